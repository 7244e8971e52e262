"""The engine scrape source against a real HTTP server on 127.0.0.1 serving recorded expositions.

The server (http.server in a thread, port 0) serves whatever body and status the test sets, so one test
steps a target through counter increases, restarts, a queue filling and emptying, and failures. No
test sleeps: the clock is the `now` passed to `poll`; only the timeout test makes the handler wait
(longer than the scraper's 0.2 s timeout, released at teardown).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config import ScrapeTarget, load_config
from agent.errors import ConfigError
from agent.records import (
    CapacityFact,
    Event,
    EventKind,
    HistogramWindow,
    Phase,
    Record,
    Server,
    ServerStats,
    Severity,
)
from agent.sources.scrape import Scraper

DATA = Path(__file__).resolve().parent.parent / "data" / "scrape"
T0 = 1_764_412_800.0  # 2025-11-29 10:40 UTC: any epoch works, the scraper only compares


def recorded(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def with_value(text: str, series: str, value: float) -> str:
    """The exposition with the sample line starting `series` (name plus labels) set to `value`."""
    pattern = re.compile(rf"^({re.escape(series)}(?:[{{,}}][^\n]*?)?) \S+$", re.MULTILINE)
    new, n = pattern.subn(lambda m: f"{m.group(1)} {value}", text)
    assert n == 1, f"{series!r} matched {n} lines"
    return new


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    body = b""
    status = 200
    delay = 0.0
    requests = 0

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.release = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out closed its socket: the late write failing is expected."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.requests += 1
        if self.server.delay:
            self.server.release.wait(self.server.delay)
        body = self.server.body
        self.send_response(self.server.status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Engine:
    """A fake engine endpoint: the test sets what `/metrics` answers."""

    def __init__(self) -> None:
        self.httpd = _Server()
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self.stopped = False

    def serve(self, text: str, status: int = 200, delay: float = 0.0) -> None:
        self.httpd.body, self.httpd.status, self.httpd.delay = text.encode(), status, delay

    @property
    def requests(self) -> int:
        return self.httpd.requests

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.httpd.release.set()
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join()


@pytest.fixture
def engine() -> Iterator[Engine]:
    e = Engine()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def shared_engine() -> Iterator[Engine]:
    """One server for a property test's many examples (a function fixture would be shared anyway)."""
    e = Engine()
    yield e
    e.stop()


def scraper(engine: Engine, server: Server = Server.VLLM, **kw: Any) -> Scraper:
    return Scraper(engine.url, server=server, source="engine-a", interval_seconds=10.0, timeout_seconds=0.5, **kw)


def only(records: list[Record], kind: type[Any]) -> list[Any]:
    return [r for r in records if isinstance(r, kind)]


def stats_of(records: list[Record]) -> ServerStats:
    (stats,) = only(records, ServerStats)
    return stats


def events(records: list[Record], kind: EventKind | None = None) -> list[Event]:
    return [e for e in only(records, Event) if kind is None or e.kind is kind]


def facts(records: list[Record]) -> dict[str, float | str]:
    return {f.name: f.value for f in only(records, CapacityFact)}


# --- vLLM -----------------------------------------------------------------------------------------

def test_vllm_v0_first_scrape_is_a_baseline_then_counters_become_events(engine: Engine) -> None:
    text = recorded("vllm-v0-0.6.txt")
    engine.serve(text)
    s = scraper(engine)
    first = s.poll(T0)
    assert facts(first) == {"block_size": 16, "gpu_memory_utilization": 0.9, "gpu_blocks": 11015,
                            "cpu_blocks": 2340, "kv_cache_dtype": "auto"}
    assert all(f.ts == T0 and f.source == "engine-a" for f in only(first, CapacityFact))
    stats = stats_of(first)
    assert stats == ServerStats(T0, "engine-a", Server.VLLM, running=12, waiting=0, swapped=0, kv_usage_ratio=0.4127,
                                prefix_hit_ratio=0.3125)
    assert events(first) == []  # the 51 preemptions before the agent started are not replayed

    text = with_value(text, "vllm:num_preemptions_total", 53)
    text = with_value(text, "vllm:prompt_tokens_total", 1_843_412 + 20_000)
    text = with_value(text, "vllm:generation_tokens_total", 402_213 + 3_000)
    engine.serve(text)
    second = s.poll(T0 + 10)
    assert facts(second) == {}  # unchanged facts are not repeated
    stats = stats_of(second)
    assert (stats.preemptions, stats.prompt_tps, stats.gen_tps) == (2, 2000.0, 300.0)
    (pre,) = events(second)
    assert (pre.kind, pre.severity, pre.phase, pre.server) == (EventKind.PREEMPTION, Severity.WARNING, Phase.RUNTIME,
                                                                Server.VLLM)
    assert pre.fields == {"count": 2, "total_preemptions": 53}
    assert (pre.source, pre.path, pre.offset, pre.ts) == ("engine-a", None, None, T0 + 10)


def test_poll_fetches_only_when_the_interval_has_passed(engine: Engine) -> None:
    engine.serve(recorded("vllm-v0-0.6.txt"))
    s = scraper(engine)
    assert s.poll(T0)
    assert s.poll(T0 + 9.9) == []
    assert engine.requests == 1
    assert s.poll(T0 + 10)
    assert engine.requests == 2
    assert s.poll(T0 - 100)  # the wall clock went back by more than an interval: due again, not stalled
    assert engine.requests == 3
    assert s.stats().scrapes_total == 3


def test_vllm_v1_data_parallel_engines_are_summed_usage_is_the_worst(engine: Engine) -> None:
    text = recorded("vllm-v1-0.11-dp2.txt")
    engine.serve(text)
    s = scraper(engine)
    first = s.poll(T0)
    stats = stats_of(first)
    assert (stats.running, stats.waiting, stats.swapped, stats.kv_usage_ratio) == (12, 0, None, 0.61)
    assert (stats.prefix_hit_ratio, stats.preemptions, stats.prompt_tps) == (None, None, None)  # no interval yet
    assert facts(first) == {"block_size": 16, "gpu_memory_utilization": 0.9, "gpu_blocks": 22030,
                            "kv_cache_dtype": "fp8"}  # "None" labels (num_cpu_blocks, kv_cache_memory_bytes) skipped

    eng0 = '{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"}'
    eng1 = '{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"}'
    for name, v0, v1 in (("vllm:prefix_cache_queries_total", 101_000, 81_000),
                         ("vllm:prefix_cache_hits_total", 20_500, 10_300),
                         ("vllm:num_preemptions_total", 6, 1)):
        text = with_value(with_value(text, name + eng0, v0), name + eng1, v1)
    engine.serve(text)
    second = s.poll(T0 + 10)
    stats = stats_of(second)
    assert stats.prefix_hit_ratio == pytest.approx(800 / 2000)
    assert stats.preemptions == 3
    assert [e.fields["count"] for e in events(second, EventKind.PREEMPTION)] == [3]


def test_counter_reset_after_an_engine_restart_counts_the_new_value(engine: Engine) -> None:
    text = recorded("vllm-v1-0.33.txt")
    engine.serve(text)
    s = scraper(engine)
    s.poll(T0)
    engine.serve(with_value(text, "vllm:num_preemptions_total", 5))  # 120 → 5: restarted, 5 since
    second = s.poll(T0 + 10)
    assert [e.fields for e in events(second, EventKind.PREEMPTION)] == [{"count": 5, "total_preemptions": 5}]
    assert stats_of(second).preemptions == 5

    # Restarted again and already past the old total: only the start time tells.
    restarted = with_value(with_value(text, "vllm:num_preemptions_total", 130), "process_start_time_seconds",
                           1.76441400001e09)
    engine.serve(restarted)
    third = s.poll(T0 + 20)
    assert [e.fields["count"] for e in events(third, EventKind.PREEMPTION)] == [130]
    engine.serve(with_value(restarted, "vllm:num_preemptions_total", 131))
    assert [e.fields["count"] for e in events(s.poll(T0 + 30), EventKind.PREEMPTION)] == [1]


def test_pending_on_the_transition_only(engine: Engine) -> None:
    text = recorded("vllm-v1-0.33.txt")
    waiting = 'vllm:num_requests_waiting{engine="0"'
    s = scraper(engine)
    seen = []
    for i, value in enumerate([0, 3, 5, 0, 2]):
        engine.serve(with_value(text, waiting, value))
        records = s.poll(T0 + 10 * i)
        assert stats_of(records).waiting == value
        seen.append([(e.fields["waiting"], e.phase, e.severity) for e in events(records, EventKind.PENDING)])
    assert seen == [[], [(3, Phase.QUEUE, Severity.INFO)], [], [], [(2, Phase.QUEUE, Severity.INFO)]]


def test_vllm_033_admission_rejections_become_queue_full_and_cache_config_gives_capacity(engine: Engine) -> None:
    text = recorded("vllm-v1-0.33.txt")
    engine.serve(text)
    s = scraper(engine)
    first = s.poll(T0)
    assert facts(first) == {"block_size": 16, "gpu_memory_utilization": 0.9, "gpu_blocks": 11015,
                            "kv_cache_dtype": "auto", "kv_cache_tokens": 176240, "max_concurrency": 21.51}
    assert stats_of(first).kv_usage_ratio == 0.93
    assert events(first) == []

    rejected = 'vllm:admission_rejections_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct",reason='
    text = with_value(text, rejected + '"max_num_queued_reqs"', 5)
    text += rejected + '"max_num_queued_tokens"} 1.0\n'  # a label value seen for the first time: from 0
    engine.serve(text)
    second = events(s.poll(T0 + 10), EventKind.QUEUE_FULL)
    assert [(e.fields, e.phase) for e in second] == [
        ({"count": 3, "reason": "max_num_queued_reqs"}, Phase.ADMISSION),
        ({"count": 1, "reason": "max_num_queued_tokens"}, Phase.ADMISSION),
    ]
    assert events(s.poll(T0 + 20)) == []  # nothing new


# --- SGLang, TGI, llama.cpp ---------------------------------------------------------------------

def test_sglang_0_4_cumulative_retraction_gauge(engine: Engine) -> None:
    text = recorded("sglang-0.4.10.txt")
    engine.serve(text)
    s = scraper(engine, Server.SGLANG)
    stats = stats_of(s.poll(T0))
    assert stats == ServerStats(T0, "engine-a", Server.SGLANG, running=24, waiting=0, kv_usage_ratio=0.78,
                                gen_tps=1534.2, prefix_hit_ratio=0.21, kv_used_tokens=81234)
    engine.serve(with_value(text, "sglang:total_retracted_reqs", 7))
    records = s.poll(T0 + 10)
    assert [e.fields for e in events(records, EventKind.PREEMPTION)] == [{"count": 4, "total_preemptions": 7}]
    assert events(records)[0].server is Server.SGLANG


def test_sglang_0_5_tensor_parallel_ranks_count_once(engine: Engine) -> None:
    text = recorded("sglang-0.5.23-tp2.txt")
    engine.serve(text)
    s = scraper(engine, Server.SGLANG)
    first = s.poll(T0)
    stats = stats_of(first)
    assert (stats.running, stats.waiting, stats.kv_used_tokens, stats.kv_usage_ratio) == (30, 17, 401000, 0.97)
    assert facts(first) == {"kv_cache_tokens": 413400, "max_model_len": 131072, "block_size": 1}
    assert [e.kind for e in events(first)] == [EventKind.PENDING]  # a queue at the first look, as in the logs
    series = 'sglang:num_retracted_requests_total{engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct"'
    text = with_value(text, series + ',pp_rank="0",tp_rank="0"}', 45)
    text = with_value(text, series + ',pp_rank="0",tp_rank="1"}', 45)
    engine.serve(text)
    assert [e.fields["count"] for e in events(s.poll(T0 + 10), EventKind.PREEMPTION)] == [5]


def test_tgi_usage_capacity_and_overloaded_rejections(engine: Engine) -> None:
    text = recorded("tgi-3.3.txt")
    engine.serve(text)
    s = scraper(engine, Server.TGI)
    first = s.poll(T0)
    stats = stats_of(first)
    assert (stats.running, stats.waiting, stats.kv_used_tokens) == (32, 0, 48128)
    assert stats.kv_usage_ratio == pytest.approx(48128 / 64000)
    assert facts(first) == {"kv_cache_tokens": 64000}
    text = with_value(text, 'tgi_request_failure{err="overloaded"}', 30)
    text = with_value(text, 'tgi_request_failure{err="validation"}', 50)  # not an admission rejection
    engine.serve(text)
    (full,) = events(s.poll(T0 + 10))
    assert (full.kind, full.server, full.phase) == (EventKind.QUEUE_FULL, Server.TGI, Phase.ADMISSION)
    assert full.fields == {"count": 6, "reason": "max_concurrent_requests", "status": 429}


# Throughput is a rate of the token counters, so the first scrape (the baseline) has none; the engine's own
# `prompt_tokens_seconds` / `predicted_tokens_seconds` are one slot's speed while busy, not a throughput.
@pytest.mark.parametrize(("name", "expected"), [
    ("llamacpp-2024.txt", dict(running=2, waiting=0, kv_usage_ratio=0.354492, kv_used_tokens=2904,
                               prompt_tps=None, gen_tps=None)),
    ("llamacpp-2025.txt", dict(running=4, waiting=3, kv_usage_ratio=None, kv_used_tokens=None,
                               prompt_tps=None, gen_tps=None)),
])
def test_llamacpp_eras(engine: Engine, name: str, expected: dict[str, Any]) -> None:
    engine.serve(recorded(name))
    records = scraper(engine, Server.LLAMACPP).poll(T0)
    stats = stats_of(records)
    assert {k: getattr(stats, k) for k in expected} == expected
    assert facts(records) == {}  # n_tokens_max is the largest batch seen, not a capacity
    assert len(events(records, EventKind.PENDING)) == (expected["waiting"] > 0)


def test_llamacpp_throughput_is_the_counters_rate(engine: Engine) -> None:
    text = recorded("llamacpp-2025.txt")
    engine.serve(text)
    s = scraper(engine, Server.LLAMACPP)
    s.poll(T0)
    # 2,000 more prompt tokens and 500 more predicted tokens in 10 s: 200 and 50 tokens/s, whatever the
    # per-slot speeds (2,920.6 and 99.9 in the page) say
    text = with_value(with_value(text, "llamacpp:prompt_tokens_total", 120331 + 2000),
                      "llamacpp:tokens_predicted_total", 40221 + 500)
    engine.serve(text)
    stats = stats_of(s.poll(T0 + 10))
    assert (stats.prompt_tps, stats.gen_tps) == (pytest.approx(200.0), pytest.approx(50.0))


@pytest.mark.parametrize(("name", "server"), [
    ("vllm-v0-0.6.txt", Server.VLLM), ("vllm-v1-0.33.txt", Server.VLLM), ("sglang-0.4.10.txt", Server.SGLANG),
    ("sglang-0.5.23-tp2.txt", Server.SGLANG), ("tgi-3.3.txt", Server.TGI), ("llamacpp-2025.txt", Server.LLAMACPP),
])
def test_auto_detects_the_engine(engine: Engine, name: str, server: Server) -> None:
    engine.serve(recorded(name))
    s = scraper(engine, Server.AUTO)
    assert stats_of(s.poll(T0)).server is server
    assert s.stats().server is server


# --- failures -----------------------------------------------------------------------------------

def test_failures_are_counted_logged_once_per_episode_and_never_raise(engine: Engine,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    text = recorded("vllm-v0-0.6.txt")
    engine.serve(text)
    s = Scraper(engine.url, source="engine-a", interval_seconds=1.0, timeout_seconds=0.2)
    assert s.poll(T0)
    assert s.stats().up
    caplog.set_level(logging.INFO, logger="agent.sources.scrape")

    engine.serve("<html><body>502 Bad Gateway</body></html>")
    assert s.poll(T0 + 1) == []
    assert s.stats().last_error is not None and s.stats().last_error.startswith("not a Prometheus text exposition")
    engine.serve("oops", status=500)
    assert s.poll(T0 + 2) == []
    assert s.stats().last_error == "HTTP 500 Internal Server Error"
    engine.serve(text, delay=5.0)
    assert s.poll(T0 + 3) == []
    assert s.stats().last_error == "no answer within 0.2 s"
    waited = s.stats().last_duration_seconds
    assert waited is not None and waited >= 0.2
    engine.httpd.release.set()  # let the held handler finish
    engine.serve("# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.21\n")
    assert s.poll(T0 + 4) == []
    assert "no vllm metrics in the response" in (s.stats().last_error or "")

    down = s.stats()
    assert (down.up, down.scrapes_total, down.errors_total) == (False, 5, 4)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one failure episode

    engine.serve(with_value(text, "vllm:num_preemptions_total", 60))
    back = s.poll(T0 + 5)
    assert [e.fields["count"] for e in events(back, EventKind.PREEMPTION)] == [9]  # 51 → 60 across the outage
    up = s.stats()
    assert (up.up, up.scrapes_total, up.errors_total, up.last_success_seconds) == (True, 6, 4, T0 + 5)
    assert up.last_error == down.last_error  # kept after recovery
    assert len([r for r in caplog.records if r.levelno == logging.INFO]) == 1  # "answers again"

    engine.serve("oops", status=503)
    s.poll(T0 + 6)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2  # a new episode logs again


def test_a_stopped_engine_is_down(engine: Engine) -> None:
    engine.serve(recorded("tgi-3.3.txt"))
    s = scraper(engine, Server.TGI)
    assert s.poll(T0)
    engine.stop()
    assert s.poll(T0 + 10) == []
    stats = s.stats()
    assert not stats.up and stats.errors_total == 1
    assert (stats.last_error or "").startswith("cannot connect: ")


def test_not_found_hints_how_to_enable_metrics(engine: Engine) -> None:
    engine.serve("File Not Found", status=404)
    s = scraper(engine, Server.LLAMACPP)
    assert s.poll(T0) == []
    assert "llama-server needs --metrics" in (s.stats().last_error or "")
    assert s.stats().up is False


def test_wrong_server_type_names_the_right_one(engine: Engine) -> None:
    engine.serve(recorded("vllm-v0-0.6.txt"))
    s = scraper(engine, Server.SGLANG)
    assert s.poll(T0) == []
    assert "(it has vllm metrics: set server: vllm)" in (s.stats().last_error or "")


def test_an_oversized_body_is_refused(engine: Engine) -> None:
    text = recorded("vllm-v0-0.6.txt")
    engine.serve(text)
    s = Scraper(engine.url, max_body_bytes=len(text.encode()) - 1)
    assert s.poll(T0) == []
    assert s.stats().last_error == f"response larger than {len(text.encode()) - 1} bytes; is this a /metrics URL?"


def test_nan_and_negative_values_are_missing_not_numbers(engine: Engine) -> None:
    text = with_value(recorded("vllm-v0-0.6.txt"), "vllm:gpu_prefix_cache_hit_rate", -1)
    engine.serve(with_value(text, "vllm:gpu_cache_usage_perc", float("nan")))
    stats = stats_of(scraper(engine).poll(T0))
    assert (stats.kv_usage_ratio, stats.prefix_hit_ratio, stats.running) == (None, None, 12)


_ERAS = ["vllm-v0-0.6.txt", "vllm-v1-0.11-dp2.txt", "vllm-v1-0.33.txt", "sglang-0.4.10.txt",
         "sglang-0.5.23-tp2.txt", "tgi-3.3.txt", "llamacpp-2024.txt", "llamacpp-2025.txt"]


def _mutated(text: str, data: st.DataObject) -> str:
    """A recorded exposition with some sample values changed (up, down, to 0), lines dropped or garbled."""
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(0, 6))):
        how = data.draw(st.sampled_from(["value", "value", "value", "drop", "garble"]))
        samples = [j for j, line in enumerate(lines) if line and not line.startswith("#")]
        i = data.draw(st.sampled_from(samples) if how == "value" and samples else st.integers(0, len(lines) - 1))
        if how == "value" and i in samples:
            value = data.draw(st.sampled_from([0, 1, 7, 1e6, -3, float("inf"), float("nan")]))
            lines[i] = lines[i].rsplit(" ", 1)[0] + f" {value}"
        elif how == "drop":
            del lines[i]
        else:
            lines[i] = data.draw(st.text(max_size=30))
        if not lines:
            break
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_poll_never_raises_and_counts_are_never_negative(shared_engine: Engine, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(_ERAS))
    s = Scraper(shared_engine.url, server=data.draw(st.sampled_from([Server.AUTO, Server.VLLM, Server.TGI])),
                interval_seconds=1.0, timeout_seconds=1.0)
    polls = data.draw(st.integers(1, 4))
    for i in range(polls):
        shared_engine.serve(_mutated(recorded(name), data))
        records = s.poll(T0 + i)
        assert not (s.stats().last_error or "").startswith("unexpected")  # a failure is the body's, not ours
        for record in records:
            assert isinstance(record, ServerStats | Event | CapacityFact | HistogramWindow)
            if isinstance(record, HistogramWindow):
                assert record.counts == tuple(sorted(record.counts)) and record.counts[0] >= 0 < record.count
            if isinstance(record, Event):
                count = record.fields.get("count", record.fields.get("waiting"))
                assert isinstance(count, int) and count > 0
            if isinstance(record, ServerStats) and record.preemptions is not None:
                assert record.preemptions >= 0
    stats = s.stats()
    assert stats.scrapes_total == polls and 0 <= stats.errors_total <= polls


# --- config -------------------------------------------------------------------------------------

def test_target_defaults_and_from_target(engine: Engine) -> None:
    target = ScrapeTarget(url=engine.url)
    assert (target.target_name(), target.timeout(), target.server) == (engine.url, 2.0, Server.VLLM)
    assert ScrapeTarget(url=engine.url, interval_seconds=0.5).timeout() == 0.5
    named = ScrapeTarget(url=engine.url, name="qwen", server=Server.AUTO, interval_seconds=5, timeout_seconds=1)
    s = Scraper.from_target(named)
    assert (s.source, s.server, s.interval_seconds, s.timeout_seconds) == ("qwen", Server.AUTO, 5.0, 1.0)
    engine.serve(recorded("sglang-0.4.10.txt"))
    assert stats_of(s.poll(T0)).source == "qwen"


def test_config_loads_every_scrape_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("scrape:\n"
                    "  - url: http://127.0.0.1:30000/metrics\n    server: sglang\n    name: sglang-a\n"
                    "    interval_seconds: 5\n    timeout_seconds: 1.5\n"
                    "  - url: http://127.0.0.1:8080/metrics\n    server: auto\n", encoding="utf-8")
    first, second = load_config(path).scrape
    assert (first.target_name(), first.server, first.interval_seconds, first.timeout()) == (
        "sglang-a", Server.SGLANG, 5.0, 1.5)
    assert (second.target_name(), second.server, second.timeout()) == (
        "http://127.0.0.1:8080/metrics", Server.AUTO, 2.0)


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("scrape:\n"
                    "  - url: http://127.0.0.1:8000/metrics\n    server: kernel\n"
                    "  - url: http://127.0.0.1:8001/metrics\n    interval_seconds: 1\n    timeout_seconds: 3\n"
                    "  - url: http://127.0.0.1:8002/metrics\n    timeout: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = "\n".join(caught.value.problems)
    assert "scrape[0].server: expected an engine (vllm, sglang, tgi, llamacpp or auto), got 'kernel'" in problems
    assert "timeout_seconds (3) must not exceed interval_seconds (1)" in problems
    assert "scrape[2].timeout: unknown field; did you mean 'timeout_seconds'?" in problems
