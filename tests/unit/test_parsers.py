"""Behaviour of the parser machinery: detection, time stamps, incidents, counting, redaction, facts."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from agent.records import CapacityFact, Event, EventKind, Record, RequestSample, Server, ServerStats, Severity
from parsers import REGISTRY, AutoParser, catalogue, detect, make_parser
from parsers.redact import _REQUEST_MARKERS, is_request_log, redact
from parsers.vllm import VllmParser, startup_facts

from .conftest import LOGS, REF_TIME, run


def _untimed(record: Record) -> Record:
    return record._replace(ts=None) if isinstance(record, ServerStats | RequestSample) else replace(record, ts=None)


@pytest.mark.parametrize(("fixture", "server"), [
    ("vllm/v0_0.4.log", Server.VLLM), ("vllm/v1_0.31.log", Server.VLLM), ("sglang/0.4.log", Server.SGLANG),
    ("tgi/v3.log", Server.TGI), ("llamacpp/b2025.log", Server.LLAMACPP), ("llamacpp/ollama.log", Server.LLAMACPP),
    ("llamacpp/c2026.log", Server.LLAMACPP), ("kernel/kern.log", Server.KERNEL),
])
def test_detects_the_server_from_the_first_lines(fixture: str, server: Server) -> None:
    lines = (LOGS / fixture).read_text(encoding="utf-8").splitlines()[:10]
    assert detect(lines) is server


# death lines a crash tail keeps without any prefix: each names its engine through the process it speaks of
BARE_DEATHS = ["vllm.v0-rpc-server-died", "vllm.v0-engine-process-failed", "vllm.v1-workerproc-failed-start",
               "vllm.v1-workerproc-failed", "vllm.v1-workerproc-hit-exception", "vllm.v1-init-failed",
               "sglang.rank-scheduler-dead", "sglang.init-failed", "sglang.child-failed-0.4", "sglang.child-failed",
               "sglang.sigquit", "sglang.sigquit-0.5", "sglang.subprocess-crashed", "sglang.scheduler-exception",
               "sglang.detokenizer-exception",
               "tgi.shard-stderr", "tgi.shard-channel-disconnected", "tgi.shard-crashed", "tgi.webserver-crashed"]


@pytest.mark.parametrize("key", BARE_DEATHS)
def test_a_bare_death_line_names_its_engine(key: str) -> None:
    statement = next(s for source in catalogue.load() for s in source.statements if s.key == key)
    assert detect([statement.message()]) is Server(statement.engine)
    events = [r for r in run(make_parser(Server.AUTO, "t", REF_TIME), [statement.message()]) if isinstance(r, Event)]
    assert [e.kind for e in events] == [EventKind.ENGINE_DEAD]


# engines without a parser of their own: a line of their own statements, behind each of their prefixes, names them
NAMED_ONLY = [(source, s) for source in catalogue.load() if source.engine in {"tensorrt-llm", "vllm-rs", "llama-box"}
              for s in source.statements if s.signals != "benign"]


@pytest.mark.parametrize(("source", "statement"), NAMED_ONLY, ids=[s.key for _, s in NAMED_ONLY])
def test_an_engine_without_a_parser_is_named_by_its_statements(source: catalogue.Source,
                                                                statement: catalogue.Statement) -> None:
    for prefix in source.prefixes_for(statement):
        line = prefix.template.replace("{level}", statement.level).replace("{msg}", statement.message())
        parser = make_parser(Server.AUTO, "t", REF_TIME)
        run(parser, [line])
        assert isinstance(parser, AutoParser) and parser.server is Server(source.engine), (prefix.name, line)


def test_a_llama_box_log_full_of_libllama_lines_stays_llama_cpp() -> None:
    lines = ["llama_model_loader: loaded meta data with 29 key-value pairs and 291 tensors from /m/q.gguf",
             "llama_context: n_ctx_seq (8192) < n_ctx_train (131072) -- the full capacity of the model will not be "
             "utilized",
             "[2025-08-14 09:08:17.697176] D srv                 reconcile: rid 7 | batching, waiting previous batch "
             "finished: not enough space to place all tokens"]
    assert detect(lines) is Server.LLAMACPP


def test_unrecognised_stream_falls_back_to_server_independent_rules() -> None:
    parser = make_parser(Server.AUTO, "t", REF_TIME)
    records = run(parser, ["hello", "RuntimeError: CUDA error: an illegal memory access was encountered"])
    assert isinstance(parser, AutoParser) and parser.server is Server.AUTO
    assert [r.kind for r in records if isinstance(r, Event)] == [EventKind.CUDA_ERROR]


def test_yearless_stamp_takes_the_reference_year_and_wraps_at_new_year() -> None:
    ref = datetime(2027, 1, 2, 12, tzinfo=timezone.utc).timestamp()
    parser = VllmParser("t", ref)
    [dec, jan] = [r for r in run(parser, [
        "INFO 12-31 23:59:59 [kv_cache_utils.py:833] GPU KV cache size: 1,000 tokens",
        "INFO 01-02 00:00:01 [kv_cache_utils.py:833] GPU KV cache size: 2,000 tokens"]) if isinstance(r, CapacityFact)]
    assert datetime.fromtimestamp(dec.ts or 0, timezone.utc) == datetime(2026, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
    assert datetime.fromtimestamp(jan.ts or 0, timezone.utc) == datetime(2027, 1, 2, 0, 0, 1, tzinfo=timezone.utc)


def test_a_running_daemon_moves_the_reference_time_across_new_year() -> None:
    parser = make_parser(Server.VLLM, "t", datetime(2026, 12, 31, 23, tzinfo=timezone.utc).timestamp())
    line = "INFO {} [kv_cache_utils.py:833] GPU KV cache size: 1,000 tokens"
    [before] = parser.feed(line.format("12-31 23:59:59"))
    parser.set_reference_time(datetime(2027, 1, 1, 0, 1, tzinfo=timezone.utc).timestamp())
    [after] = parser.feed(line.format("01-01 00:00:30"))
    assert datetime.fromtimestamp(before.ts or 0, timezone.utc).year == 2026
    assert datetime.fromtimestamp(after.ts or 0, timezone.utc).year == 2027


def test_local_time_zone_is_applied_to_stamps_without_one() -> None:
    tz = timezone(timedelta(hours=8))
    [fact] = [r for r in run(make_parser(Server.SGLANG, "t", REF_TIME, tz), [
        "[2026-04-05 20:00:21] max_total_num_tokens=433102, chunked_prefill_size=8192"]) if isinstance(r, CapacityFact)]
    assert fact.ts == datetime(2026, 4, 5, 12, 0, 21, tzinfo=timezone.utc).timestamp()


def test_envelope_time_wins_over_the_line() -> None:
    parser = make_parser(Server.VLLM, "t", REF_TIME)
    [fact] = parser.feed("INFO 07-28 23:02:27 [kv_cache_utils.py:833] GPU KV cache size: 176,240 tokens", 123.5)
    assert fact.ts == 123.5


def test_v0_preemption_count_is_the_increment_of_the_cumulative_total() -> None:
    line = ("WARNING 08-20 10:18:39 scheduler.py:1141] Sequence group {n} is preempted by PreemptionMode.RECOMPUTE "
            "mode because there is not enough KV cache space. This can affect the end-to-end performance. "
            "total_num_cumulative_preemption={t}")
    events = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME),
                             [line.format(n=1, t=1), line.format(n=2, t=51), line.format(n=3, t=101)])
              if isinstance(r, Event)]
    assert [(e.fields["count"], e.fields["total_preemptions"]) for e in events] == [(1, 1), (50, 51), (50, 101)]
    old = ("WARNING 02-28 21:48:18 scheduler.py:682] Sequence group 9 is preempted by PreemptionMode.SWAP mode "
           "because there is not enough KV cache space. This can affect the end-to-end performance.")
    [event] = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME), [old]) if isinstance(r, Event)]
    assert event.fields == {"count": 1, "mode": "swap"}  # before 0.4 every preemption was logged


def test_a_traceback_is_one_event_and_a_reraise_is_the_same_incident() -> None:
    lines = (LOGS / "vllm/v1_0.10.log").read_text(encoding="utf-8").splitlines()
    events = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME), lines) if isinstance(r, Event)]
    kinds = [e.kind for e in events]
    assert kinds.count(EventKind.OOM) == 1  # engine core logged it, then the raw re-raise printed it again
    assert kinds.count(EventKind.ENGINE_DEAD) == 1  # fatal error + the API server's EngineDeadError


def test_separate_incidents_far_apart_are_separate_events() -> None:
    oom = ("ERROR 09-14 03:{m:02d}:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
           "1.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 0.20 GiB is free.")
    events = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME), [oom.format(m=1), "INFO 09-14 03:01:01 "
              "[x.py:1] ok", oom.format(m=5)]) if isinstance(r, Event)]
    assert [e.kind for e in events] == [EventKind.OOM, EventKind.OOM]


def test_xid_severity_follows_the_code() -> None:
    parser = make_parser(Server.KERNEL, "t", REF_TIME)
    events = [r for r in run(parser, ["NVRM: Xid (PCI:0000:3b:00): 45, pid=1, Ch 1",
                                      "NVRM: Xid (PCI:0000:3b:00): 95, pid=1, Uncontained"]) if isinstance(r, Event)]
    assert [(e.kind, e.severity, e.fields["xid"]) for e in events] == [
        (EventKind.XID, Severity.WARNING, 45), (EventKind.XID, Severity.CRITICAL, 95)]


def test_stats_lines_carry_every_era_field() -> None:
    lines = [
        "INFO 02-28 21:48:18 metrics.py:161] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 44.9 "
        "tokens/s, Running: 2 reqs, Swapped: 1 reqs, Pending: 3 reqs, GPU KV cache usage: 82.1%, CPU KV cache usage: "
        "0.0%",
        "INFO 07-28 06:40:59 [loggers.py:118] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 239.2 "
        "tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 91.2%, Prefix cache hit rate: 5.0%",
        "(APIServer pid=1) INFO 11-02 10:02:00 [loggers.py:257] 2 Engines Aggregated: Avg prompt throughput: 1.0 "
        "tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 4 reqs, Waiting: 5 reqs, KV fetch: 1 waiting to "
        "start, 2 in progress, 3 completed waiting, Preemptions: 6, GPU KV cache usage: 7.0%",
    ]
    stats = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME), lines) if isinstance(r, ServerStats)]
    assert [(s.running, s.waiting, s.swapped, s.preemptions) for s in stats] == [
        (2, 3, 1, None), (8, 0, None, None), (4, 5, None, 6)]
    assert stats[1].prefix_hit_ratio == pytest.approx(0.05)
    assert stats[0].kv_usage_ratio == pytest.approx(0.821)


def test_startup_facts_keeps_working_for_budget_from_log() -> None:
    lines = (LOGS / "vllm/v0_0.6_tp.log").read_text(encoding="utf-8").splitlines(keepends=True)
    facts = {f.name: f.value for f in startup_facts(lines, "x")}
    assert facts["gpu_blocks"] == 5691 and facts["max_concurrency"] == pytest.approx(11.12)
    assert facts["kv_cache_bytes"] == round(11.12 * 1024**3) and facts["max_num_seqs"] == 256
    # a failed start-up states its sizes inside the traceback: they are facts too
    failed = (LOGS / "vllm/v1_0.15_startup_oom.log").read_text(encoding="utf-8").splitlines()
    facts = {f.name: f.value for f in startup_facts(failed, "x")}
    assert facts["estimated_max_model_len"] == 34736 and facts["required_kv_bytes"] == 24 * 1024**3


def test_request_logs_are_dropped_and_messages_redacted() -> None:
    assert is_request_log("Received request cmpl-1: prompt: 'x', params: SamplingParams(n=1)")
    assert not is_request_log("Avg prompt throughput: 1.0 tokens/s")
    # the word pre-check in front of the marker scan lets every marker through, wherever it sits in a line
    for marker in _REQUEST_MARKERS:
        assert is_request_log(marker) and is_request_log(f"INFO x {marker} y")
    assert redact("Authorization: Bearer abc.def key sk-0123456789abcdef") == ("Authorization: Bearer <redacted> key "
                                                                             "<redacted>")
    assert redact("ValueError: bad 'never closed prompt") == "ValueError: bad <redacted>"
    assert redact("The model's max seq len (4096)") == "The model's max seq len (4096)"


def test_tgi_json_output_and_vllm_json_formatter() -> None:
    tgi = json.dumps({"timestamp": "2025-05-01T01:33:00.000001Z", "level": "ERROR", "fields": {
        "message": "Model is overloaded"}, "target": "text_generation_router::infer", "span": {"parameters": "x"}})
    [event] = run(make_parser(Server.TGI, "t", REF_TIME), [tgi])
    assert isinstance(event, Event) and event.kind is EventKind.QUEUE_FULL and event.ts is not None
    vllm = json.dumps({"asctime": "2026-03-01 10:00:00,123", "levelname": "ERROR", "name": "vllm.v1.engine.core",
                       "processName": "EngineCore_DP0", "process": 77, "message":
                       "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
                       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB."})
    events = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME), [vllm]) if isinstance(r, Event)]
    assert {e.kind for e in events} == {EventKind.OOM, EventKind.ENGINE_DEAD}
    assert all("EngineCore" in e.message or "CUDA" in e.message for e in events)


@pytest.mark.parametrize("server", list(REGISTRY))
def test_the_prefilter_loses_nothing_on_the_fixtures(server: Server) -> None:
    """The pre-filter (HOT keywords) only saves time: with it disabled, every fixture yields the same
    records. Only times may differ: a line without its own time borrows the last time among the lines
    examined. (Envelope-wrapped fixtures are left out: a parser only sees unwrapped, re-joined lines.)"""
    cls = REGISTRY[server]
    open_door = type("Unfiltered", (cls,), {"HOT": re.compile(""), "STATS_WORD": ""})
    for path in sorted(p for p in LOGS.rglob("*.log") if not p.name.endswith((".cri.log", ".docker.log"))):
        lines = path.read_text(encoding="utf-8").splitlines()
        untimed = [_untimed(r) for r in run(cls("t", REF_TIME), lines)]
        assert untimed == [_untimed(r) for r in run(open_door("t", REF_TIME), lines)], path.name


def test_runtime_time_stamp_and_pod_prefix_are_an_envelope() -> None:
    """`docker logs --timestamps` and `kubectl logs --timestamps --prefix` put their own UTC time first."""
    stats = ("2025-09-14T03:11:15.500000000Z (APIServer pid=851) INFO 09-14 03:11:15 [loggers.py:123] Engine 000: "
             "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 4 reqs, "
             "Waiting: 0 reqs, GPU KV cache usage: 80.2%, Prefix cache hit rate: 0.0%")
    refused = ('[pod/vllm-0/vllm] 2025-09-14T03:11:16Z (APIServer pid=851) INFO:     10.1.2.3:40000 - '
               '"POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable')
    [sample, event] = run(make_parser(Server.AUTO, "t", REF_TIME), [stats, refused])
    assert isinstance(sample, ServerStats) and sample.kv_usage_ratio == pytest.approx(0.802)
    assert sample.ts == datetime(2025, 9, 14, 3, 11, 15, 500000, tzinfo=timezone.utc).timestamp()
    assert isinstance(event, Event) and event.kind is EventKind.HTTP_503
    assert event.ts == datetime(2025, 9, 14, 3, 11, 16, tzinfo=timezone.utc).timestamp()
