"""A REAL vLLM 0.32 (the CPU build) serving the tiny local model: each incident caused on purpose, and every
surface of the agent — scan, advise --log, report --log, budget --from-log, the daemon with log plus scrape,
loadtest — compared with the engine's own counters and what its clients saw.

One engine serves the runtime incidents in order (module scope: a start costs 30–70 s here); the death comes
last, and each start-up failure is an engine start of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines import bed, scenarios
from tests.engines.expect import CHECKS, read_log
from tests.engines.surfaces import Daemon, agent, occurrences, report_json

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[bed.Engine]:
    engine = bed.start_vllm(tmp_path_factory.mktemp("vllm") / "vllm.log")
    yield engine
    engine.stop()


def _saved(recording: scenarios.Recording, tmp: Path) -> Path:
    path = tmp / f"{recording.name}.log"
    path.write_text(recording.log)
    return path


def test_runtime_incidents_read_as_the_engine_counted_them(vllm: bed.Engine, tmp_path: Path) -> None:
    for scenario in scenarios.VLLM_RUNTIME:
        recording = scenario(vllm)
        CHECKS[("vllm", recording.name)](read_log(recording.log), recording.truth)
        log = _saved(recording, tmp_path)
        truth = recording.truth
        report = report_json(log)
        blind = {b["what"] for b in report["blind"]}
        assert "log_cannot_show_client_timeouts" in blind
        assert "log_cannot_show_preemptions" in blind, "log only: V1 preemptions are not in the log"
        if recording.name == "refusals":
            assert occurrences(report, "http_503") == truth["rejected_queue_full"]
            jsonl = agent("scan", "--format", "jsonl", str(log)).stdout.splitlines()
            assert sum('"kind": "http_503"' in line for line in jsonl) == truth["client_503"]
        if recording.name == "client_errors":
            assert occurrences(report, "request_failed") == truth["http_4xx"]
        advice = agent("advise", "--log", str(log)).stdout
        assert "not in the log: preemptions" in advice
        assert "lower max_num_seqs 0" not in advice


def test_the_daemon_with_log_and_scrape_counts_each_occurrence_once(vllm: bed.Engine, tmp_path: Path) -> None:
    daemon = Daemon(tmp_path / "agent", vllm.log, vllm.url + "/metrics", "vllm")
    try:
        preempted = scenarios.vllm_preemption(vllm).truth
        refused = scenarios.vllm_refusals(vllm).truth
    finally:
        daemon.stop()
    seen = daemon.occurrences()
    assert seen.get("preemption", 0) == preempted["preemptions"] + refused["preemptions"], seen
    refusals = seen.get("http_503", 0) + seen.get("queue_full", 0)
    assert refusals == refused["rejected_queue_full"] == refused["client_503"], seen
    report = json.loads(agent("report", "--db", str(daemon.db), "--since", "1d", "--format", "json").stdout)
    assert "log_cannot_show_preemptions" not in {b["what"] for b in report["blind"]}, "the scrape sees them"


def test_the_load_test_names_the_cause_the_engine_counters_show(vllm: bed.Engine, tmp_path: Path) -> None:
    # 2 requests of 250 + 250 tokens fit 1,024 KV tokens; 6 at once outgrow it and are preempted (no client fails)
    out = json.loads(agent("loadtest", vllm.url + "/v1/completions", "--levels", "2,6", "--requests-per-level", "6",
                           "--input-tokens", "250", "--output-tokens", "250", "--pause", "1", "--no-gpu", "--json",
                           "--keep-going", check=False).stdout)
    steps = {s["level"]: s for s in out["steps"]}
    assert steps[6]["broke"] and "preemption" in steps[6]["reason"]
    # clients that give up after 1 s: the cause is their timeouts, whatever the engine preempted meanwhile
    out = json.loads(agent("loadtest", vllm.url + "/v1/completions", "--levels", "4", "--requests-per-level", "4",
                           "--input-tokens", "250", "--output-tokens", "250", "--timeout", "1", "--pause", "1",
                           "--no-gpu", "--json", check=False).stdout)
    (step,) = out["steps"]
    # (most of the four time out; one that finds the engine alone may finish inside the second)
    assert step["broke"] and re.match(r"(\d+) failed request\(s\): \1 client timeout\(s\)", step["reason"]), step
    bed.wait_for_stats(vllm, 0)
    # 30 clients against --max-num-queued-reqs 10: refusals are the cause
    out = json.loads(agent("loadtest", vllm.url + "/v1/completions", "--levels", "30", "--requests-per-level", "30",
                           "--input-tokens", "250", "--output-tokens", "200", "--pause", "1", "--no-gpu", "--json",
                           check=False).stdout)
    (step,) = out["steps"]
    assert step["broke"] and "refused (503)" in step["reason"].split("(also")[0], step


def test_engine_death_every_failed_request_counted(vllm: bed.Engine, tmp_path: Path) -> None:
    recording = scenarios.vllm_death(vllm)  # last: the engine is gone afterwards
    CHECKS[("vllm", "death")](read_log(recording.log), recording.truth)
    report = report_json(_saved(recording, tmp_path))
    assert occurrences(report, "engine_dead") == 1
    assert occurrences(report, "request_failed") == recording.truth["client_500"]


@pytest.mark.parametrize(("name", "extra", "env", "what"), scenarios.VLLM_STARTUP, ids=[s[0] for s in
                                                                                        scenarios.VLLM_STARTUP])
def test_startup_failures(tmp_path: Path, name: str, extra: tuple[str, ...], env: dict[str, str], what: str) -> None:
    recording = scenarios.vllm_startup(tmp_path / f"{name}.log", name, extra, env, what)
    CHECKS[("vllm", name)](read_log(recording.log), recording.truth)
    log = _saved(recording, tmp_path)
    if name in ("startup_blocks_below_max_model_len", "startup_small_blocks"):
        facts = read_log(recording.log).facts
        fits, block = int(facts["estimated_max_model_len"]), int(facts["block_size"])
        budget = agent("budget", "--model", str(bed.VLLM / "tiny-llama"), "--vram-gib", "1", "--util", "0.92",
                       "--weights-gib", "0.001", "--overhead-gib", "0", "--from-log", str(log)).stdout
        assert "the engine refused to start" in budget and f"the longest that fits is {fits} tokens" in budget
        assert f"max_model_len: {fits // block * block}" in budget and "max_num_seqs: 0" not in budget
        assert "agree" not in budget


def test_the_demo_runs_on_the_real_engine(tmp_path: Path) -> None:
    bed.require(bed.VLLM, "vLLM 0.32.0 (CPU build)", "vllm")
    out = agent("demo", "--engine", "vllm", "--workdir", str(tmp_path / "demo"), timeout=900).stdout
    assert "REAL vLLM 0.32.0" in out and (tmp_path / "demo" / "report.html").is_file()
    # 1,024 KV tokens hold 2 requests of 250 + 250: the step-up load test breaks from 3 on, and the advisor
    # lowers max_num_seqs 4 → 2
    assert "lower max_num_seqs 4 → 2" in out, out[-3000:]
