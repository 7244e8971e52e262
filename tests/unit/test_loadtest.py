"""The load test's pure parts: URLs, payloads, error classes, percentiles, the verdict rule, the row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.records import Event, EventKind, Phase, Server, Severity
from agent.sinks.store import Store
from agent.tools.loadtest import (
    LoadTestError,
    LoadTestOptions,
    default_metrics_url,
    endpoint_url,
    load_payload,
    percentile,
    synthetic_payload,
)
from agent.tools.loadtest_answers import error_class
from agent.tools.loadtest_cli import parse_levels
from agent.tools.loadtest_report import verdict
from agent.tools.loadtest_watch import Watcher
from agent.verdicts import LoadStep


def _step(level: int, broke: bool = False, *, preempt: int = 0, oom: int = 0, errors: dict[str, int] | None = None,
          reason: str = "") -> LoadStep:
    return LoadStep(run_id="r", target="t", level=level, started=0.0, ended=1.0, requests=level * 20,
                    ok=level * 20, errors=errors or {}, preemption_events=preempt, oom_events=oom, broke=broke,
                    reason=reason)


def test_urls() -> None:
    assert endpoint_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1/completions"
    assert endpoint_url("http://h:1/v1/chat/completions") == "http://h:1/v1/chat/completions"
    assert default_metrics_url("http://h:1/v1/completions?x=1") == "http://h:1/metrics"
    with pytest.raises(LoadTestError, match="http"):
        endpoint_url("127.0.0.1:8000")


def test_error_classes() -> None:
    assert [error_class(s) for s in (200, 429, 503, 500, 502, 504, 400, 404)] == [
        None, "http_429", "http_503", "http_5xx", "http_5xx", "http_5xx", "other", "other"]


def test_percentile_is_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50.0, 95.0, 99.0)
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0


def test_payloads(tmp_path: Path) -> None:
    body = synthetic_payload(5, 7, chat=False)
    assert body["prompt"].split() == ["hello"] * 5 and body["max_tokens"] == 7
    assert synthetic_payload(3, 1, chat=True)["messages"][0]["content"] == "hello hello hello"
    good = tmp_path / "p.json"
    good.write_text(json.dumps({"prompt": "hi", "max_tokens": 4}))
    assert load_payload(good, chat=False)["max_tokens"] == 4
    with pytest.raises(LoadTestError, match="'messages'"):
        load_payload(good, chat=True)
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps({"prompt": "hi"}))
    with pytest.raises(LoadTestError, match="max_tokens"):
        load_payload(bad, chat=False)


def test_levels_and_caps() -> None:
    assert parse_levels("1, 2,3,5,8,12") == (1, 2, 3, 5, 8, 12)
    with pytest.raises(LoadTestError, match="rise"):
        parse_levels("1,3,2")
    LoadTestOptions(url="http://h", payload={}).check()
    assert LoadTestOptions(url="http://h", payload={}).requests_for(8) == 160
    with pytest.raises(LoadTestError, match="at most 32"):
        LoadTestOptions(url="http://h", payload={}, levels=tuple(range(1, 40))).check()
    with pytest.raises(LoadTestError, match="between 1 and 4096"):
        LoadTestOptions(url="http://h", payload={}, levels=(5000,)).check()
    with pytest.raises(LoadTestError, match="requests per level"):
        LoadTestOptions(url="http://h", payload={}, levels=(1,), requests_per_level=10**6).check()


def test_verdict_consistent_with_the_budget() -> None:
    steps = [_step(1), _step(2), _step(3), _step(5), _step(8), _step(12), _step(16, True, preempt=4)]
    v = verdict(steps, 13)
    assert (v.safe_level, v.broken_level, v.cause, v.agrees) == (12, 16, "preemptions", True)
    assert v.text.startswith("budget says 13, measured safe up to 12, first preemptions at 16")


def test_verdict_below_and_beyond_the_budget() -> None:
    below = verdict([_step(5), _step(8, True, oom=1)], 13)
    assert below.agrees is False and below.cause == "OOM" and "at or below the budget" in below.text
    beyond = verdict([_step(12), _step(16), _step(24, True, preempt=1)], 13)
    assert beyond.agrees is False and "beyond the budget" in beyond.text


def test_verdict_refusals_do_not_test_the_budget() -> None:
    v = verdict([_step(5), _step(8, True, errors={"http_503": 3})], 13)
    assert v.cause == "503 refusals" and v.agrees is None and "not tested" in v.text


def test_verdict_without_a_break_or_a_capacity() -> None:
    v = verdict([_step(1), _step(2)], None)
    assert v.broken_level is None and v.safe_level == 2 and "no level broke" in v.text
    assert not v.text.startswith("budget")


def _event(ts: float, kind: EventKind, offset: int) -> Event:
    return Event(ts, "engine", Server.VLLM, kind, Severity.WARNING, Phase.RUNTIME, "m", {}, "engine.log", offset)


def test_watcher_counts_oom_and_preemptions_from_the_store(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with Store.open(db) as store:
        store.commit([_event(1000.5, EventKind.OOM, 1), _event(1000.6, EventKind.PREEMPTION, 2),
                      _event(1000.7, EventKind.PREEMPTION, 3), _event(2000.0, EventKind.OOM, 4)])
    watcher = Watcher(db_path=db)
    assert watcher.events_since_last(1000.0, 1001.0) == (1, 2, 0)
    assert watcher.events_since_last(3000.0, 3001.0) == (0, 0, 0)


def test_watcher_reads_only_what_the_log_gained(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    oom = ("(EngineCore_DP0 pid=7) ERROR 12-01 10:00:01 [core.py:711] torch.OutOfMemoryError: CUDA out of memory. "
           "Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 23.99 GiB of which 0 bytes is free.\n")
    stats = ("(APIServer pid=7) INFO 12-01 10:00:02 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
             "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, Preemptions: 3, "
             "GPU KV cache usage: 99.0%, Prefix cache hit rate: 0.0%\n")
    log.write_text(oom)  # before the test: not counted
    watcher = Watcher(log_path=log)
    with log.open("a") as handle:
        handle.write(stats + oom + stats[:40])  # the last line is still being written
    assert watcher.events_since_last(0.0, 1.0) == (1, 3, 0)
    with log.open("a") as handle:
        handle.write(stats[40:])
    assert watcher.events_since_last(0.0, 1.0) == (0, 3, 0)
    assert watcher.events_since_last(0.0, 1.0) == (0, 0, 0)


def test_one_adapter_per_side_of_aiohttp() -> None:
    """The client side lives in agent/http.py only; the simulator's server side in sim_server.py only."""
    root = Path(__file__).resolve().parents[2]
    found: dict[str, list[str]] = {}
    for package in ("agent", "parsers"):
        for path in sorted((root / package).rglob("*.py")):
            for line in path.read_text().splitlines():
                words = line.split()
                if words[:2] in (["import", "aiohttp"], ["from", "aiohttp"]):
                    found.setdefault(line.strip(), []).append(path.relative_to(root).as_posix())
    assert found == {"import aiohttp": ["agent/http.py"], "from aiohttp import web": ["agent/tools/sim_server.py"]}


def test_capacity_from_the_agent_config_is_the_budget() -> None:
    from agent.tools.loadtest_cli import capacity_from_config

    config = Path(__file__).resolve().parents[1] / "data" / "config" / "valid-full.yaml"
    assert capacity_from_config(config) == 13  # the design notes' worked example, as that config describes it


def test_stream_chunks() -> None:
    from agent.tools.loadtest_answers import stream_chunk_kind

    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n'
    text = b'data: {"choices":[{"index":0,"delta":{"content":" Hi"}}]}\n'
    completion = b'data: {"choices": [{"index": 0, "text": " Hi"}]}\n'
    error = b'data: {"error": {"message": "engine dead", "code": 500}}\n'
    assert [stream_chunk_kind(x) for x in (role, text, completion, error, b"data: [DONE]\n", b"\n", b": ping\n")] == [
        "chunk", "text", "text", "error", None, None, None]


def test_levels_are_kept_in_the_agents_store_for_report(tmp_path: Path) -> None:
    from agent.sinks.queries import Queries
    from agent.sinks.store import Store
    from agent.tools.loadtest_cli import store_steps
    from agent.tools.loadtest_report import LoadTestResult

    steps = (_step(8, False), _step(16, True, errors={"http_503": 3}))
    store_steps(tmp_path / "agent.db", LoadTestResult("run", "http://x", steps, verdict(steps, 13)))
    with Store.open_readonly(tmp_path / "agent.db") as store:
        assert [(s.level, s.broke, dict(s.errors)) for s in Queries(store).load_steps()] == [
            (8, False, {}), (16, True, {"http_503": 3})]


def test_a_level_is_judged_by_what_the_clients_felt_before_what_the_engine_did() -> None:
    from collections import Counter

    from agent.tools.loadtest_watch import Peaks, level_verdict

    def judged(errors: dict[str, int], **peaks: int | bool) -> str:
        broke, reason = level_verdict(4, Counter(errors), Peaks(**peaks))  # type: ignore[arg-type]
        assert broke
        return reason

    # What a real vLLM did (tests/engines): clients that gave up after 1 s while it preempted twice, 20 refusals
    # from --max-num-queued-reqs while it preempted 7 times, 6 × 500 after its engine core was killed.
    assert judged({"timeout": 3}, preemptions=2) == "3 failed request(s): 3 client timeout(s) (also 2 preemption(s))"
    assert judged({"http_503": 20}, preemptions=7).startswith("20 failed request(s): 20 refused (503)")
    assert judged({"http_5xx": 6, "connection": 4}, engine_dead=1) == \
        "the engine died: 10 request(s) failed (6 failed (5xx), 4 connection(s) lost)"
    assert judged({"connection": 4}, scrape_lost=True).startswith("the engine died")
    assert judged({}, preemptions=5) == "5 preemption(s)", "with no failed request the engine's distress is the cause"
    assert judged({"http_503": 1}, oom=1) == "1 OOM event(s); 1 request(s) failed (1 refused (503))"
