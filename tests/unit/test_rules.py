"""Rule files: every malformed fixture gives its one-line error; later files override by name; `rules check`,
`advise` (over saved real logs and over a store) and the daemon's judge stage with SIGHUP reloads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.config import load_config
from agent.daemon.loop import Daemon
from agent.judge.rules import RuleError, load_file, load_rules

ROOT = Path(__file__).parent.parent.parent
BAD = ROOT / "tests" / "data" / "rules"
LOGS = ROOT / "tests" / "data" / "logs"
runner = CliRunner()

# fixture → (line, rule, field, the words of the one error)
MALFORMED = {
    "bad-unknown-signal.yaml": (5, "kv_high", "when.all[0].signal", "unknown signal 'kv_usage' (expected one of: "
                                "kv_usage_ratio, running"),
    "bad-unknown-agg.yaml": (5, "kv_high", "when.all[0].agg", "expected 'p50', 'p95'"),
    "bad-unknown-knob.yaml": (6, "kv_high", "action.knob", "expected 'max_num_seqs'"),
    "bad-unknown-builtin.yaml": (6, "kv_high", "action.to", "unknown built-in 'halve_it' (expected one of: "
                                 "capacity_bound"),
    "bad-unknown-ref.yaml": (5, "kv_high", "when.all[0].ref", "unknown reference 'config.max_seqs'"),
    "bad-message-field.yaml": (7, "kv_high", "message", "message names {prompt}, not an evidence value"),
    "bad-value-and-ref.yaml": (5, "kv_high", "when.all[0]", "give exactly one of value"),
    "bad-extra-field.yaml": (8, "kv_high", "exec", "unknown field (expected one of: name, description, severity"),
    "bad-window.yaml": (3, "kv_high", "window", "expected a duration like 90s, 10m, 2h or 1d, got '10 minutes'"),
    "bad-where.yaml": (5, "slow_engine", "when.all[0].where", "unknown knob 'RPC'"),
    "bad-yaml-syntax.yaml": (4, "-", None, "YAML syntax error"),
    "bad-empty-group.yaml": (3, "kv_high", "when", "a group takes exactly one non-empty list: all, any, "
                             "same_sample or together"),
    "bad-together-no-within.yaml": (5, "refused_with_room", "when.all[0]", "within goes with together"),
    "bad-together-event-op.yaml": (5, "refused_with_room", "when.all[0].together[0]", "events hold wherever such "
                                   "an event was logged: give no op, value or ref"),
    "bad-together-signal.yaml": (5, "refused_with_room", "when.all[0].together[1].signal", "'ttft_seconds' is not "
                                 "a signal with a time per value"),
    "bad-name.yaml": (2, "KV High!", "name", "expected 3–64 lowercase letters"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_every_malformed_rule_file_gives_its_one_line_error(name: str) -> None:
    line, rule, field, words = MALFORMED[name]
    with pytest.raises(RuleError) as caught:
        load_file(BAD / name)
    assert len(caught.value.problems) == 1, caught.value.problems
    problem = caught.value.problems[0]
    prefix = f"{BAD / name}:{line}: {rule}: " + (f"{field}: " if field else "")
    assert problem.startswith(prefix), problem
    assert words in problem


def test_every_fixture_is_covered() -> None:
    assert {p.name for p in BAD.glob("bad-*.yaml")} == set(MALFORMED)


def test_shipped_rules_load_and_a_later_file_overrides_by_name(tmp_path: Path) -> None:
    shipped = load_rules([ROOT / "rules"])
    assert len(shipped.rules) >= 15
    (tmp_path / "mine.yaml").write_text(
        "rules:\n  - name: preemption_storm\n    window: 2m\n    when:\n      all:\n"
        "        - {signal: events.preemption, agg: rate, op: '>', value: 5}\n"
        "    action: {knob: max_num_seqs, direction: lower, to: capacity_bound}\n    message: 'mine'\n")
    merged = load_rules([ROOT / "rules", tmp_path])
    storm = next(r for r in merged.rules if r.name == "preemption_storm")
    assert (storm.window, storm.message) == (120.0, "mine")
    assert len(merged.rules) == len(shipped.rules) and merged.origin["preemption_storm"].endswith("mine.yaml")


def test_rules_check_lists_every_problem_and_exits_1() -> None:
    result = runner.invoke(app, ["rules", "check", str(BAD)])
    assert result.exit_code == 1
    assert f"{len(MALFORMED)} problem(s)" in result.output
    ok = runner.invoke(app, ["rules", "check"])
    assert ok.exit_code == 0 and "rule(s) OK" in ok.output and "oom_kv_at_limit" in ok.output


# --- advise over saved logs: real excerpts from public issues, through the parsers -------------------------

def advise(*args: str) -> tuple[int, dict[str, object]]:
    result = runner.invoke(app, ["advise", *args, "--json", "--fail-on-finding"])
    assert result.exit_code in (0, 3), result.output
    return result.exit_code, json.loads(result.stdout)


def by_rule(data: dict[str, object]) -> dict[str, dict[str, object]]:
    findings = data["findings"]
    assert isinstance(findings, list)
    return {f["rule"]: f for f in findings}


def test_vllm_activation_oom_lowers_utilization_not_concurrency() -> None:
    # v1_0.10.log: real 0.10 lines (PR #21728, #43295): an OOM with KV 81 % full, engine capacity 18.83x
    code, data = advise("--log", str(LOGS / "vllm" / "v1_0.10.log"))
    found = by_rule(data)
    assert code == 3
    peak = found["oom_activation_peak"]
    assert (peak["knob"], peak["direction"], peak["from"], peak["to"]) == ("gpu_memory_utilization", "lower",
                                                                           0.92, 0.87)
    assert "oom_kv_at_limit" not in found
    bound = found["max_num_seqs_above_bound"]
    assert (bound["from"], bound["to"]) == (64, 18) and "engine: floor(18.83x)" in str(bound["arithmetic"])


def test_vllm_ramp_that_reaches_max_num_seqs_once_does_not_raise_it(tmp_path: Path) -> None:
    # vLLM PR #37307: Running 10 → 34, Waiting 90 → 66, KV 19 % → 65 %. The waits happened while slots were
    # free (a prefill-bound ramp); only the last of five samples has all 34 slots running with a queue and KV
    # < 80 %: one joint sample, not the three the rule needs — "raise max_num_seqs" here was the misfire
    config = tmp_path / "config.yaml"
    config.write_text("model: {preset: qwen2.5-7b, weights_gib: 5.5}\ngpu: {vram_gib: 24, overhead_gib: 1.6}\n"
                      "server: {gpu_memory_fraction: 0.9, max_model_len: 4096, max_num_seqs: 34}\n")
    _, data = advise("--log", str(LOGS / "vllm" / "real-v1-waiting-37307.log"), "--config", str(config))
    assert "kv_headroom_raise_concurrency" not in by_rule(data)


def test_vllm_draining_queue_below_max_num_seqs_recommends_no_concurrency_change(tmp_path: Path) -> None:
    # the negative twin: the same log with vLLM's default max_num_seqs 256 — memory not full, running below the
    # limit: no rule may lower (or raise) max_num_seqs
    config = tmp_path / "config.yaml"
    config.write_text("server: {max_num_seqs: 256}\n")
    _, data = advise("--log", str(LOGS / "vllm" / "real-v1-waiting-37307.log"), "--config", str(config))
    assert not [f for f in by_rule(data).values() if f["knob"] == "max_num_seqs"]


def test_one_sglang_retraction_is_not_a_storm() -> None:
    # SGLang #4184: one "Decode out of memory happened. #retracted_reqs: 1"
    code, data = advise("--log", str(LOGS / "sglang" / "real-tp-retract-4184.log"))
    assert code == 0 and data["findings"] == []


def test_sglang_max_num_seqs_far_above_what_the_pool_holds() -> None:
    # sglang/0.5.log (PR #22166, #22331): max_running_requests 128, pool of 433,102 tokens at 40,960 per request
    _, data = advise("--log", str(LOGS / "sglang" / "0.5.log"))
    bound = by_rule(data)["max_num_seqs_above_bound"]
    assert (bound["from"], bound["to"]) == (128, 10)


def test_advise_text_and_exit_codes(tmp_path: Path) -> None:
    result = runner.invoke(app, ["advise", "--log", str(LOGS / "vllm" / "v1_0.10.log")])
    assert result.exit_code == 0, "a report: findings are not a failure unless asked"
    assert "[critical] oom_activation_peak on" in result.output and "how: 0.92 × 0.95 = 0.87" in result.output
    strict = runner.invoke(app, ["advise", "--log", str(LOGS / "vllm" / "v1_0.10.log"), "--fail-on-finding"])
    assert strict.exit_code == 3
    missing = runner.invoke(app, ["advise", "--db", str(tmp_path / "none.db")])
    assert missing.exit_code == 1 and "no store here" in missing.output
    bad = runner.invoke(app, ["advise", "--log", str(LOGS / "vllm" / "v1_0.10.log"), "--rules", str(BAD)])
    assert bad.exit_code == 1


# --- the daemon: judge stage, snapshot, SIGHUP ---------------------------------------------------------------

OOM = ("ERROR 11-29 09:00:01 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
       "2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free.")
STATS = ("INFO 11-29 09:00:0{} [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
         "throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: 0 reqs, GPU KV cache usage: 42.0%, Prefix cache "
         "hit rate: 0.0%")


def test_the_daemon_judges_exports_and_reloads_rules(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("".join(STATS.format(i) + "\n" for i in range(3)) + OOM + "\n")
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    config_path = tmp_path / "config.yaml"
    config_path.write_text("sources: [{path: vllm.log, server: vllm, name: vllm, start_at: beginning}]\n"
                           "nvml: {enabled: false}\nstore: {path: agent.db}\n"
                           "server: {gpu_memory_fraction: 0.9}\nrules: {dirs: [rules], interval_seconds: 15}\n")
    daemon = Daemon(load_config(config_path), load_config=lambda: load_config(config_path))
    now = 1_764_406_805.0  # 2025-11-29 09:00:05 UTC: the log's lines carry no year, the parser gives them this one
    daemon.start(now)
    daemon.run_once(now)
    daemon.run_once(now + 2)  # the traceback is closed; not yet due again
    daemon.run_once(now + 16)
    active = daemon.snapshot().findings
    assert [(f.rule, f.engine, f.recommended) for f in active] == [("oom_activation_peak", "vllm", 0.85)]
    stored = daemon.advisor.active()
    assert stored == list(active)
    shutil.copy(BAD / "bad-unknown-signal.yaml", rules_dir / "broken.yaml")
    assert daemon.reload(now + 20) is True  # the config is fine; the broken rule file is refused
    assert daemon.rule_errors and "unknown signal 'kv_usage'" in daemon.rule_errors[0]
    daemon.run_once(now + 31)
    snap = daemon.snapshot()
    assert snap.totals[("rule_load_errors_total", ())] == 1
    assert [f.rule for f in snap.findings] == ["oom_activation_peak"], "the last good rules still judge"
    daemon.close(now + 32)


def test_a_glob_over_two_engines_is_two_series_judged_apart(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_text("".join(STATS.format(i) + "\n" for i in range(3)) + OOM + "\n")
    (logs / "b.log").write_text(STATS.format(0).replace("42.0%", "91.0%").replace("Running: 5", "Running: 7") + "\n")
    config_path = tmp_path / "config.yaml"
    config_path.write_text("sources: [{path: 'logs/*.log', server: vllm, name: vllm, start_at: beginning}]\n"
                           "nvml: {enabled: false}\nstore: {path: agent.db}\nserver: {gpu_memory_fraction: 0.9}\n")
    daemon = Daemon(load_config(config_path))
    now = 1_764_406_805.0
    daemon.start(now)
    daemon.run_once(now)
    daemon.run_once(now + 16)
    snap = daemon.snapshot()
    assert {k: (v.running, v.kv_usage_ratio) for k, v in snap.servers.items()} == {
        "vllm/a": (5, 0.42), "vllm/b": (7, 0.91)}, "each file its own series: the last written does not win"
    assert snap.totals[("events_total", ("vllm/a", "vllm", "oom"))] == 1
    assert ("events_total", ("vllm/b", "vllm", "oom")) not in snap.totals
    assert [(f.rule, f.engine) for f in snap.findings] == [("oom_activation_peak", "vllm/a")]
    assert snap.totals[("source_lines_total", ("vllm",))] == 5  # self-metrics stay per configured source
    daemon.close(now + 17)


def test_status_shows_the_active_findings_the_daemon_stored(tmp_path: Path) -> None:
    from agent.daemon.status import gather
    from agent.views.status import render

    log = tmp_path / "vllm.log"
    log.write_text("".join(STATS.format(i) + "\n" for i in range(3)) + OOM + "\n")
    config_path = tmp_path / "config.yaml"
    config_path.write_text("sources: [{path: vllm.log, server: vllm, name: vllm, start_at: beginning}]\n"
                           "nvml: {enabled: false}\nstore: {path: agent.db}\nmetrics: {port: 1}\n"
                           "server: {gpu_memory_fraction: 0.9}\n")
    config = load_config(config_path)
    daemon = Daemon(config)
    now = 1_764_406_805.0
    daemon.start(now)
    daemon.run_once(now)
    daemon.run_once(now + 16)
    daemon.close(now + 17)
    again = Daemon(config)  # a restart takes the active finding back: not logged or stored a second time
    again.start(now + 20)
    again.run_once(now + 20)
    assert [f.rule for f in again.advisor.active()] == ["oom_activation_peak"]
    again.close(now + 21)
    report = gather(config, timeout=0.2)
    assert [(f.rule, f.engine, f.active) for f in report.findings] == [("oom_activation_peak", "vllm", True)]
    from agent.sinks.queries import Queries
    from agent.sinks.store import Store

    stored = Queries(Store.open_readonly(tmp_path / "agent.db")).findings()
    assert [(f.rule, f.active) for f in stored] == [("oom_activation_peak", True)], "one row, not one per restart"
    text = render(report, config, None, now + 60)
    assert "findings (active):" in text
    assert "[critical] oom_activation_peak on vllm: lower gpu_memory_utilization 0.9 → 0.85" in text


def test_advise_over_a_store_window(tmp_path: Path) -> None:
    import time

    from agent.records import Event, EventKind, Phase, Server, ServerStats, Severity
    from agent.sinks.store import Store

    now = time.time()
    db = tmp_path / "agent.db"
    store = Store.open(db)
    store.commit([*(ServerStats(now - 1600 + 10 * i, "vllm", Server.VLLM, running=4, waiting=0, kv_usage_ratio=0.3)
                    for i in range(6)),
                  # the OOM 20 s after the last sample (KV 30 %, the nearest, within 30 s): the activation peak
                  Event(now - 1530, "vllm", Server.VLLM, EventKind.OOM, Severity.ERROR, Phase.RUNTIME, "CUDA out of "
                        "memory", {}, "/logs/vllm.log", 1)], now=now)
    store.close()
    config = tmp_path / "config.yaml"
    config.write_text(f"store: {{path: {db}}}\nserver: {{gpu_memory_fraction: 0.9}}\n")
    code, data = advise("--config", str(config), "--since", "30m")
    assert code == 3 and [f["rule"] for f in data["findings"]] == ["oom_activation_peak"]
    found = data["findings"][0]
    assert found["to"] == 0.85 and found["cleared_at"] is not None, "the OOM left its 10m window: cleared"
    # judged over the last minute, each rule still looks back its own window (10m): 25 minutes ago is out
    code, data = advise("--db", str(db), "--since", "1m")
    assert code == 0 and data["findings"] == []
    bad = runner.invoke(app, ["advise", "--db", str(db), "--since", "a while"])
    assert bad.exit_code == 1 and "--since" in bad.output


def test_a_config_rule_is_not_active_before_the_first_record(tmp_path: Path) -> None:
    import time

    from agent.records import Server, ServerStats
    from agent.sinks.store import Store

    now = time.time()
    db = tmp_path / "agent.db"
    store = Store.open(db)
    store.commit([ServerStats(now - 300 + 10 * i, "vllm", Server.VLLM, running=4, waiting=0, kv_usage_ratio=0.3)
                  for i in range(6)], now=now)
    store.close()
    config = tmp_path / "config.yaml"
    config.write_text(f"store: {{path: {db}}}\nmodel: {{preset: qwen2.5-7b, weights_gib: 14.2}}\n"
                      "gpu: {vram_gib: 24, overhead_gib: 1.6}\n"
                      "server: {gpu_memory_fraction: 0.9, max_model_len: 8192, max_num_seqs: 64}\n")
    code, data = advise("--config", str(config), "--since", "1h")
    found = {f["rule"]: f for f in data["findings"]}
    assert code == 3 and "max_num_seqs_above_bound" in found, data
    assert found["max_num_seqs_above_bound"]["since"] >= now - 300, "active from the first record, not the window"


def excerpt(name: str) -> str:
    """The body of one labelled real excerpt (tests/data/real/excerpts.txt: `### id`, headers, blank, body)."""
    text = (ROOT / "tests" / "data" / "real" / "excerpts.txt").read_text()
    block = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
    return block.split("\n\n", 1)[1]


@pytest.mark.parametrize(("name", "rule", "knob"), [
    ("vllm-v06-iteration-timeout-9839", "engine_iteration_timeout", "VLLM_ENGINE_ITERATION_TIMEOUT_S"),
    ("sglang-watchdog-access-7783", "engine_watchdog_timeout", "watchdog_timeout"),
])
def test_real_engine_timeouts_name_the_knob_that_fired(tmp_path: Path, name: str, rule: str, knob: str) -> None:
    # vllm#9839 "Engine iteration timed out"; sglang#7783 "Watchdog timeout (self.watchdog_timeout=300)"
    log = tmp_path / f"{name}.log"
    log.write_text(excerpt(name))
    _, data = advise("--log", str(log))
    found = by_rule(data)
    assert found[rule]["knob"] == knob and found[rule]["direction"] == "raise"
    assert "deadline_during_generation" not in found, "an engine timeout is not a request timeout"


def test_the_worked_example_in_the_docs_is_what_advise_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the example names the log by its path in the repository
    result = runner.invoke(app, ["advise", "--log", "tests/data/logs/vllm/v1_0.10.log"])
    assert result.exit_code == 0
    assert result.stdout.strip() in (ROOT / "docs" / "rules.md").read_text()


def test_evaluate_window_is_the_replay_report_reads(tmp_path: Path) -> None:
    from agent.judge.replay import evaluate_window
    from agent.offline.load import load_logs
    from agent.sinks.queries import Queries
    from agent.sinks.store import Store

    store = Store.open(":memory:")
    load_logs([LOGS / "vllm" / "v1_0.10.log"], store)
    queries = Queries(store)
    span = queries.time_span()
    assert span is not None
    found = {f.rule: f for f in evaluate_window(queries, None, span[0], span[1] + 1)}
    assert set(found) == {"max_num_seqs_above_bound", "oom_activation_peak"}
    assert found["oom_activation_peak"].recommended == 0.87 and found["oom_activation_peak"].active
