"""The seeds' two distinctions, as the classifier must draw them (seed 000, "日志里区分…").

OOM vs queueing: OOM is an `out of memory` error (memory at the limit, work fails); queueing is requests
accepted but not started — `pending`/`waiting` grows while memory stays flat, and is never an OOM.
Timeout vs rejection: a timeout happens during generation, after tokens were produced (`deadline
exceeded`, a running timeout); a rejection happens at admission with no token (`queue full`, 429/503).
"""

from __future__ import annotations

from agent.records import Event, EventKind, Phase, Server, ServerStats
from parsers import make_parser

from .conftest import REF_TIME, run

STATS = ("(APIServer pid=1) INFO 09-14 03:11:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 "
         "tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 64 reqs, Waiting: {w} reqs, "
         "GPU KV cache usage: {kv}%, Prefix cache hit rate: 0.0%")


def _events(server: Server, lines: list[str]) -> list[Event]:
    return [r for r in run(make_parser(server, "t", REF_TIME), lines) if isinstance(r, Event)]


def test_queueing_with_flat_memory_is_pending_not_oom() -> None:
    lines = [STATS.format(s=s, w=w, kv=62.0) for s, w in ((0, 0), (10, 5), (20, 40), (30, 80))]
    records = run(make_parser(Server.VLLM, "t", REF_TIME), lines)
    events = [r for r in records if isinstance(r, Event)]
    assert [e.kind for e in events] == [EventKind.PENDING]  # once: when the queue became non-empty
    assert events[0].phase is Phase.QUEUE
    samples = [r for r in records if isinstance(r, ServerStats)]
    assert [s.waiting for s in samples] == [0, 5, 40, 80]
    assert {s.kv_usage_ratio for s in samples} == {0.62}


def test_pending_again_only_after_the_queue_drained() -> None:
    lines = [STATS.format(s=s, w=w, kv=50.0) for s, w in ((0, 3), (10, 9), (20, 0), (30, 2))]
    assert [e.kind for e in _events(Server.VLLM, lines)] == [EventKind.PENDING, EventKind.PENDING]


def test_each_data_parallel_engine_has_its_own_queue() -> None:
    engines = [STATS.format(s=s, w=w, kv=50.0).replace("Engine 000", f"Engine 00{e}")
               for s, e, w in ((0, 0, 4), (0, 1, 0), (10, 0, 6), (10, 1, 0), (20, 0, 7), (20, 1, 2))]
    events = _events(Server.VLLM, engines)
    assert [(e.kind, e.fields["waiting"]) for e in events] == [(EventKind.PENDING, 4), (EventKind.PENDING, 2)]


def test_out_of_memory_is_oom_not_queueing() -> None:
    lines = [
        STATS.format(s=0, w=0, kv=99.0),
        "(EngineCore_DP0 pid=9) ERROR 09-14 03:11:05 [core.py:710] EngineCore encountered a fatal error.",
        "(EngineCore_DP0 pid=9) ERROR 09-14 03:11:05 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free.",
    ]
    events = _events(Server.VLLM, lines)
    kinds = {e.kind for e in events}
    assert EventKind.OOM in kinds and EventKind.PENDING not in kinds
    oom = next(e for e in events if e.kind is EventKind.OOM)
    assert oom.fields["requested_bytes"] == 2 * 1024**3
    assert oom.fields["free_bytes"] == round(1.2 * 1024**3)


def test_kv_pressure_is_preemption_not_oom() -> None:
    """SGLang says "Decode out of memory happened" when it retracts requests: KV pressure, not a CUDA OOM."""
    line = ("[2025-02-27 04:47:41 TP0] Decode out of memory happened. #retracted_reqs: 12, "
            "#new_token_ratio: 0.4000 -> 0.6000")
    assert [(e.kind, e.fields) for e in _events(Server.SGLANG, [line])] == [(EventKind.PREEMPTION, {"count": 12})]


def test_oom_before_serving_is_startup_after_is_runtime() -> None:
    start = "INFO 01-13 11:35:10 api_server.py:528] vLLM API server version 0.6.6"
    ready = "INFO:     Application startup complete."
    oom = ("ERROR 01-13 11:36:00 worker.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
           "1.00 GiB. GPU 0 has a total capacity of 23.56 GiB of which 0.10 GiB is free.")
    assert [e.phase for e in _events(Server.VLLM, [start, oom])] == [Phase.STARTUP]
    assert [e.phase for e in _events(Server.VLLM, [start, ready, oom])] == [Phase.RUNTIME]


def test_timeout_after_tokens_is_deadline_exceeded_in_generation() -> None:
    line = ("time=2026-01-01T10:00:00.000Z level=ERROR source=server.go:1 msg=\"stream ended\" "
            "error=\"context deadline exceeded\" completion_tokens=187")
    events = _events(Server.LLAMACPP, [line])
    assert [(e.kind, e.phase) for e in events] == [(EventKind.DEADLINE_EXCEEDED, Phase.GENERATION)]
    # the shared timeout fields: what it timed out on, and how many tokens had come
    assert events[0].fields == {"tokens": 187, "tokens_produced": 187, "scope": "request", "timeout_on": "generation"}


def test_running_timeout_is_deadline_but_waiting_timeout_is_a_refusal() -> None:
    """SGLang's two timeouts: one fires after the request started (tokens), one while it only waited."""
    running = "[2026-04-05 20:02:58] Request running timeout reached."
    waiting = "[2026-04-05 20:02:59] Request waiting timeout reached."
    assert [(e.kind, e.phase) for e in _events(Server.SGLANG, [running])] == [
        (EventKind.DEADLINE_EXCEEDED, Phase.GENERATION)]
    assert [(e.kind, e.phase) for e in _events(Server.SGLANG, [waiting])] == [(EventKind.QUEUE_FULL, Phase.QUEUE)]


def test_rejection_at_admission_has_no_generation_phase() -> None:
    lines = {
        Server.VLLM: ['(APIServer pid=7) INFO:     10.1.2.3:40000 - "POST /v1/chat/completions HTTP/1.1" 503 '
                      "Service Unavailable",
                      "(APIServer pid=7) ERROR 11-02 10:02:01 [serving.py:312] The engine is currently busy and "
                      "cannot accept new requests. Please try again later or on a different instance."],
        Server.TGI: ["2025-05-01T01:33:00.000001Z ERROR chat_completions{parameters=\"x\"}: "
                     "text_generation_router::infer: router/src/infer/mod.rs:66: Model is overloaded"],
        Server.LLAMACPP: ['[GIN] 2024/08/19 - 14:12:00 | 429 |     101.2µs |       127.0.0.1 | POST     "/api/chat"'],
    }
    for server, server_lines in lines.items():
        events = _events(server, server_lines)
        assert events, server
        assert {e.kind for e in events} <= {EventKind.QUEUE_FULL, EventKind.HTTP_429, EventKind.HTTP_503}
        assert {e.phase for e in events} == {Phase.ADMISSION}, server
