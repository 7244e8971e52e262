"""One engine, two witnesses: a log source and a scrape target with the same engine name are one engine,
and what the scrape counts exactly (preemptions, the queue becoming non-empty) is not counted again from
the log; with different names they stay two engines, each counting its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config import load_config
from agent.daemon.loop import Daemon
from agent.daemon.witnesses import counted_once
from agent.errors import ConfigError
from agent.records import Event, EventKind, Phase, Server, ServerStats, Severity
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from tests.unit.test_scrape import Engine

STATS = ("INFO 11-29 09:00:{s:02d} [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
         "throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: 2 reqs, Preemptions: {p}, GPU KV cache usage: 42.0%, "
         "Prefix cache hit rate: 0.0%")
T0 = 1_764_406_800.0  # 2025-11-29 09:00 UTC, where the log lines are: retention keeps them
OOM = ("ERROR 11-29 09:00:30 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
       "2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free.")


def exposition(preemptions: int) -> str:
    return ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 5\n"
            "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 2\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.42\n"
            "# TYPE vllm:num_preemptions counter\n"
            f"vllm:num_preemptions_total{{engine=\"0\"}} {preemptions}\n")


@pytest.fixture
def engine() -> Iterator[Engine]:
    e = Engine()
    yield e
    e.stop()


def run(tmp_path: Path, engine: Engine, target_name: str) -> tuple[dict[tuple[str, ...], float], Store]:
    """A log and a scrape of the same vLLM: 3 preemptions happen between two steps, seen by both."""
    log = tmp_path / "vllm.log"
    log.write_text(STATS.format(s=0, p=0) + "\n")
    config = tmp_path / "config.yaml"
    config.write_text("sources: [{path: vllm.log, server: vllm, name: vllm, start_at: beginning}]\n"
                      f"scrape: [{{url: '{engine.url}', name: {target_name}, interval_seconds: 10, "
                      "timeout_seconds: 1}]\nnvml: {enabled: false}\nstore: {path: agent.db}\n")
    engine.serve(exposition(10))
    daemon = Daemon(load_config(config))
    daemon.start(T0)
    daemon.run_once(T0)
    engine.serve(exposition(13))
    with log.open("a") as f:
        f.write(STATS.format(s=20, p=3) + "\n" + OOM + "\n")
    daemon.run_once(T0 + 10)
    daemon.run_once(T0 + 12)  # quiet: the OOM's traceback is closed
    totals = {(name, *labels): value for (name, labels), value in daemon.snapshot().totals.items()
              if name == "events_total" and value}
    daemon.close(T0 + 13)
    return totals, Store.open(tmp_path / "agent.db")


def test_a_scrape_named_like_the_log_source_is_the_same_engine_and_counts_once(tmp_path: Path, engine: Engine) -> None:
    totals, store = run(tmp_path, engine, "vllm")
    assert totals == {("events_total", "vllm", "vllm", "preemption"): 3,  # the scrape's one event of count 3
                      ("events_total", "vllm", "vllm", "pending"): 1,  # not once from each witness
                      ("events_total", "vllm", "vllm", "oom"): 1}  # what only the log sees stays
    q = Queries(store)
    assert q.engines() == ["vllm"]
    samples = q.window_stats(-1e12, None, "vllm")
    assert sum(s.preemptions or 0 for s in samples) == 3, "the log's own count of the same 3 is dropped"
    assert len(samples) == 4, "both witnesses' load samples are kept: 2 scrapes and 2 stats lines"
    assert q.occurrences("preemption", -1e12, T0 + 60) == 3
    store.close()


def test_differently_named_they_are_two_engines_each_counting_its_own(tmp_path: Path, engine: Engine) -> None:
    totals, store = run(tmp_path, engine, "vllm-metrics")
    assert totals[("events_total", "vllm", "vllm", "preemption")] == 3  # occurrences: the same 3, once each
    assert totals[("events_total", "vllm-metrics", "vllm", "preemption")] == 3
    assert totals[("events_total", "vllm", "vllm", "pending")] == 1
    assert Queries(store).engines() == ["vllm", "vllm-metrics"]
    store.close()


def _stats(source: str, preemptions: int | None) -> ServerStats:
    return ServerStats(1.0, source, Server.VLLM, running=1, waiting=0, preemptions=preemptions)


def _event(source: str, kind: EventKind) -> Event:
    return Event(1.0, source, Server.VLLM, kind, Severity.WARNING, Phase.RUNTIME, kind.value, {"count": 2})


def test_only_the_kinds_the_scrape_counts_and_only_for_its_engine_are_dropped() -> None:
    records = [_stats("a", 2), _event("a", EventKind.PREEMPTION), _event("a", EventKind.QUEUE_FULL),
               _event("a", EventKind.OOM), _stats("b", 2), _event("b", EventKind.PREEMPTION)]
    # SGLang 0.5.6 exports no retraction counter: its scrape counts only the queue, the log keeps retractions
    kept = counted_once(records, {"a": frozenset({EventKind.PREEMPTION}), "c": frozenset({EventKind.OOM})})
    assert kept == [_stats("a", None), _event("a", EventKind.QUEUE_FULL), _event("a", EventKind.OOM),
                    _stats("b", 2), _event("b", EventKind.PREEMPTION)]
    assert counted_once(records, {"a": frozenset()}) == records, "a target that never answered drops nothing"


def test_a_refusal_is_counted_once_when_the_scrape_counts_admission_rejections() -> None:
    # A real vLLM's --max-num-queued-reqs refusals: the log has one `503` access line per refused request, the
    # scrape a `queue_full` event whose count is the rise of vllm:admission_rejections_total. Two refusals are
    # two occurrences either way, not four; what the log alone sees (a 500, an OOM) stays.
    refused = [_event("a", EventKind.HTTP_503), _event("a", EventKind.HTTP_503)]
    others = [_event("a", EventKind.REQUEST_FAILED), _event("a", EventKind.OOM)]
    assert counted_once([*refused, *others], {"a": frozenset({EventKind.QUEUE_FULL})}) == others
    assert counted_once(refused, {"a": frozenset({EventKind.PREEMPTION})}) == refused, \
        "without the rejection counter the log's 503 lines are the only witness"


def test_a_scrape_named_after_a_glob_or_twice_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("sources: [{path: 'logs/*.log', name: vllm}]\n"
                      "scrape: [{url: 'http://127.0.0.1:8000/metrics', name: vllm}]\n")
    with pytest.raises(ConfigError, match=r"names a glob source, whose engines are 'vllm/<file>'"):
        load_config(config)
    config.write_text("scrape: [{url: 'http://127.0.0.1:8000/metrics', name: a}, "
                      "{url: 'http://127.0.0.1:8001/metrics', name: a}]\n")
    with pytest.raises(ConfigError, match="taken by an earlier target"):
        load_config(config)
    config.write_text("sources: [{path: 'logs/*.log', name: vllm}]\n"
                      "scrape: [{url: 'http://127.0.0.1:8000/metrics', name: vllm/a}]\n")
    assert load_config(config).scrape[0].target_name() == "vllm/a"
