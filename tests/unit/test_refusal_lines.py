"""A storm's access line replayed from its first reading (parsers/refusal_lines.py) gives exactly what the plain
path gives: the same records and the same parser state after, line for line, whatever the parser's state — after
an engine death, during start-up, inside an open block or a request's text, within and after the de-duplication
and pairing windows, for any client, with and without a time. Each case is read twice, the shortcut on and off."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.records import Event, EventKind, Record
from parsers import refusal_lines
from parsers.base import DEDUP_WINDOW_LINES, DEDUP_WINDOW_S, StreamParser
from parsers.generic import GenericParser
from parsers.refusals import PAIR_LINES
from parsers.sglang import SglangParser
from parsers.signature import index_of
from parsers.vllm import VllmParser

from .conftest import REF_TIME

PARSERS = (VllmParser, SglangParser, GenericParser)
ACCESS = '(APIServer pid=3646) INFO:     {client} - "POST /v1/chat/completions HTTP/1.1" {status}'
STATUSES = ("503 Service Unavailable", "429 Too Many Requests", "500 Internal Server Error", "404 Not Found",
            "504 Gateway Timeout", "408 Request Timeout", "499 -")
# clients whose digits spell the statuses and the needles near them (`:503`, `:429`, `5.0.4.0`)
CLIENTS = ("10.0.0.9:40000", "10.0.0.9:40312", "192.168.1.20:503", "1.2.3.4:429", "5.0.4.0:504", "127.0.0.1:500",
           "0.0.0.0:0", "0.0.0.0", "255.255.255.255:65535", "1.1.1.1")
DEATH = "(EngineCore_DP0 pid=17) ERROR 12-01 10:00:00 [core.py:710] EngineCore encountered a fatal error."
DEAD = "(APIServer pid=3646) ERROR 12-01 10:00:01 [async_llm.py:480] AsyncLLM output_handler failed."
START = "(APIServer pid=3646) INFO 12-01 10:00:05 [api_server.py:1] vLLM API server version 0.11.0"
READY = "(APIServer pid=3646) INFO:     Application startup complete."
QUEUE_FULL = "(APIServer pid=3646) WARNING 12-01 10:00:06 [serving.py:1] Request queue full - rejecting request"
TRACEBACK = "Traceback (most recent call last):"
FRAME = '  File "/usr/lib/python3/site-packages/vllm/entrypoints/openai/api_server.py", line 12, in create'
PROMPT = "(APIServer pid=3646) INFO 12-01 10:00:07 [logger.py:1] Received request chatcmpl-1: prompt: 'a\\nb"
OOM_ACCESS = ('(APIServer pid=3646) INFO:     {client} - "POST /v1/completions HTTP/1.1" 500 Internal Server Error: '
              "CUDA out of memory. Tried to allocate 2.00 GiB")
TIMED = ('(APIServer pid=3646) INFO 12-01 10:00:08 [launcher.py:1] {client} - "POST /v1/completions HTTP/1.1" '
         "503 Service Unavailable")
# a line that is both (contrived: a proxy quoting the engine): its V0 total must be read once, as the plain path does
PREEMPTED = ('(APIServer pid=3646) INFO:     {client} - "POST /v1/completions HTTP/1.1" 503 Sequence group 7 is '
             "preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
             "total_num_cumulative_preemption={total}")
STATS = ("(APIServer pid=3646) INFO 12-01 10:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
         "Avg generation throughput: 0.0 tokens/s, Running: 3 reqs, Waiting: 9 reqs, GPU KV cache usage: 99.0%, "
         "Prefix cache hit rate: 0.0%")


def plain(cls: type[StreamParser]) -> type[StreamParser]:
    """The same parser with the shortcut off: every line takes the plain path."""
    return type(f"Plain{cls.__name__}", (cls,), {"REFUSAL_LINES": False})


def read(cls: type[StreamParser], lines: Sequence[tuple[str, float | None]]) -> tuple[list[Record], Any, StreamParser]:
    """Every line fed (with its envelope time, or none), then flushed: the records, the state, the parser."""
    parser = cls("node-1", ref_time=REF_TIME)
    out: list[Record] = []
    for i, (text, ts) in enumerate(lines):
        out += parser.feed(text, ts, "/var/log/vllm.log", i * 200)
    out += parser.flush()
    return out, (parser.checkpoint(), parser.lines_seen, parser.parse_errors, parser.phase()), parser


def same_both_ways(cls: type[StreamParser], lines: Sequence[tuple[str, float | None]]) -> list[Record]:
    """The records of `lines`, asserted equal (and the state after) with the shortcut on and off; the shortcut must
    have read at least one line, so that a case cannot pass by never taking it."""
    on, state_on, parser = read(cls, lines)
    off, state_off, _ = read(plain(cls), lines)
    assert on == off
    assert state_on == state_off
    assert any(r is not None for r in type(parser)._refusal_readings.values()), "the shortcut never ran"
    return on


def kinds(records: list[Record], kind: EventKind) -> list[Event]:
    return [r for r in records if isinstance(r, Event) and r.kind is kind]


Lines = list[tuple[str, float | None]]  # each line with its envelope time, or none


def storm(n: int, status: str = STATUSES[0], ts: float | None = None, step: float = 0.0) -> Lines:
    return [(ACCESS.format(client=CLIENTS[i % 2], status=status), None if ts is None else ts + i * step)
            for i in range(n)]


@pytest.mark.parametrize("cls", PARSERS)
def test_a_storm_with_clients_that_vary(cls: type[StreamParser]) -> None:
    lines = [(ACCESS.format(client=f"10.0.{i % 3}.9:{40000 + i}", status=STATUSES[i % len(STATUSES)]), None)
             for i in range(200)]
    records = same_both_ways(cls, lines)
    assert len(kinds(records, EventKind.HTTP_503)) == 29  # every 7th of 200, from the first
    assert all("<client>" in r.message and "10.0." not in r.message for r in records if isinstance(r, Event))


@pytest.mark.parametrize("cls", PARSERS)
def test_after_an_engine_death_a_500_is_the_dead_engines(cls: type[StreamParser]) -> None:
    lines = [*storm(5, STATUSES[2]), (DEATH, None), (DEAD, None), *storm(5, STATUSES[2]), *storm(3)]
    records = same_both_ways(cls, lines)
    if cls is VllmParser:
        reasons = [r.fields["reason"] for r in kinds(records, EventKind.REQUEST_FAILED)]
        assert reasons == ["server_error"] * 5 + ["engine_dead"] * 5


@pytest.mark.parametrize("cls", PARSERS)
def test_during_start_up_and_after_it(cls: type[StreamParser]) -> None:
    lines = [(START, None), *storm(4), *storm(2, STATUSES[2]), (READY, None), *storm(4)]
    records = same_both_ways(cls, lines)
    assert len(kinds(records, EventKind.HTTP_503)) == 8 and len(kinds(records, EventKind.REQUEST_FAILED)) == 2
    _on, _, parser = read(cls, [(START, None), *storm(3)])
    assert parser.phase().value == ("startup" if cls is VllmParser else "runtime")  # vLLM's start: still starting


@pytest.mark.parametrize("cls", PARSERS)
def test_inside_an_open_block_and_a_requests_text(cls: type[StreamParser]) -> None:
    lines = [*storm(2), (TRACEBACK, None), (FRAME, None), *storm(3), (DEATH, None), (FRAME, None), *storm(3),
             (PROMPT, None), *storm(2), ("more of the prompt'", None), *storm(2)]
    same_both_ways(cls, lines)


@pytest.mark.parametrize("cls", PARSERS)
def test_an_incident_on_an_access_line_within_and_after_the_window(cls: type[StreamParser]) -> None:
    oom = [(OOM_ACCESS.format(client=CLIENTS[i % len(CLIENTS)]), None) for i in range(DEDUP_WINDOW_LINES + 20)]
    records = same_both_ways(cls, oom)  # by lines: one per window of lines
    assert len(kinds(records, EventKind.OOM)) == 2
    t0 = REF_TIME
    timed = [(OOM_ACCESS.format(client=CLIENTS[i % 3]), t0 + i * 4.0) for i in range(30)]
    records = same_both_ways(cls, timed)  # by the envelope's time: one per window of seconds
    assert len(kinds(records, EventKind.OOM)) == len(range(0, 30, int(DEDUP_WINDOW_S // 4) + 1))


@pytest.mark.parametrize("cls", PARSERS)
def test_a_line_with_a_capacity_record_keeps_the_plain_path(cls: type[StreamParser]) -> None:
    lines = [(PREEMPTED.format(client=CLIENTS[i % 2], total=1 + 50 * (i // 2)), None) for i in range(6)] + storm(2)
    records = same_both_ways(cls, lines)
    if cls is VllmParser:
        # totals 1, 1, 51, 51, 101, 101: the increment since the last total, or the total when it did not grow
        assert [r.fields["count"] for r in kinds(records, EventKind.PREEMPTION)] == [1, 1, 50, 51, 50, 101]


@pytest.mark.parametrize("cls", PARSERS)
def test_a_refusal_message_pairs_within_its_window_and_not_after(cls: type[StreamParser]) -> None:
    lines = [(QUEUE_FULL, None)] + storm(3) + [(QUEUE_FULL, None)] + [("(APIServer pid=3646) INFO:     idle", None)] * (
        PAIR_LINES + 1) + storm(2)
    records = same_both_ways(cls, lines)
    if cls is VllmParser:
        counts = [r.fields.get("count") for r in kinds(records, EventKind.HTTP_503)]
        assert counts == [0, None, None, None, None]


@pytest.mark.parametrize("cls", PARSERS)
def test_with_and_without_a_time(cls: type[StreamParser]) -> None:
    t0 = REF_TIME
    lines = (storm(3) + storm(3, ts=t0, step=0.5) + [(STATS, None)] + storm(3)
             + [(TIMED.format(client=c), None) for c in CLIENTS[:3]] + storm(3) + storm(2, ts=t0 + 100))
    records = same_both_ways(cls, lines)
    assert records[0].ts is None  # nothing before it had a time
    assert {r.ts for r in records[3:6]} == {t0, t0 + 0.5, t0 + 1.0}


@pytest.mark.parametrize("cls", PARSERS)
@pytest.mark.parametrize("status", STATUSES)
def test_no_signature_reads_the_client(cls: type[StreamParser], status: str) -> None:
    """The reading is kept by the text without its client: every signature must match, and read, the same for any
    client, and the redaction must take it out."""
    index = index_of(cls.SIGNATURES)
    readings = set()
    for client in CLIENTS:
        msg = f'{client} - "POST /v1/chat/completions HTTP/1.1" {status}'
        readings.add(repr([(r.source, fields) for r, fields in index.matches(msg)]))
    assert len(readings) == 1


def test_keys_split_the_client_out_and_nothing_else() -> None:
    key = refusal_lines.key_of(ACCESS.format(client="10.0.0.9:40000", status="503"))
    assert key == ('(APIServer pid=3646) INFO:      - "POST /v1/chat/completions HTTP/1.1" 503', 31)
    assert refusal_lines.key_of(ACCESS.format(client="10.0.0.9:40312", status="503")) == key
    assert refusal_lines.key_of('10.0.0.9:40000 - "POST / HTTP/1.1" 503') is None  # a bare line: maybe a paste
    assert refusal_lines.key_of('INFO:     [::1]:40000 - "POST / HTTP/1.1" 503') is None  # IPv6: the plain path
    assert refusal_lines.key_of("INFO:     10.0.0.9:40000 - " + '"' + "x" * 3000) is None


@pytest.mark.parametrize("cls", PARSERS)
def test_the_readings_are_no_streams_state(cls: type[StreamParser]) -> None:
    """Kept per class (a reading depends on the text and the class alone): a parser's state, its checkpoint and its
    pickled copy (a worker's, handed back) hold none of them, and another stream's events keep their own source."""
    _, _, parser = read(cls, storm(10))
    assert "_refusal_readings" not in vars(parser)
    assert pickle.loads(pickle.dumps(parser)).checkpoint() == parser.checkpoint()
    other = cls("node-2", ref_time=REF_TIME)
    assert {r.source for r in other.feed(storm(1)[0][0]) if isinstance(r, Event)} == {"node-2"}


_POOL = [ACCESS.format(client=c, status=s) for c in CLIENTS[:4] for s in STATUSES] + [
    DEATH, DEAD, START, READY, QUEUE_FULL, TRACEBACK, FRAME, PROMPT, "b'", STATS, "",
    *(OOM_ACCESS.format(client=c) for c in CLIENTS[:2]), *(TIMED.format(client=c) for c in CLIENTS[:2]),
    *(PREEMPTED.format(client=c, total=t) for c in CLIENTS[:2] for t in (1, 51)),
    "(APIServer pid=3646) INFO:     10.0.0.9:1 - " + '"GET /health HTTP/1.1" 200 OK']


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(PARSERS),
       st.lists(st.tuples(st.sampled_from(_POOL), st.one_of(st.none(), st.floats(REF_TIME, REF_TIME + 600))),
                min_size=1, max_size=80))
def test_any_mix_reads_the_same_both_ways(cls: type[StreamParser], lines: list[tuple[str, float | None]]) -> None:
    on, state_on, _ = read(cls, lines)
    off, state_off, _ = read(plain(cls), lines)
    assert on == off
    assert state_on == state_off


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(_POOL), min_size=1, max_size=80), st.integers(1, 7))
def test_batches_read_the_same_both_ways(lines: list[str], size: int) -> None:
    """`feed_batch` (scan's and the daemon's way in) takes the same shortcut: the same records as the plain path."""
    out = []
    for cls in (VllmParser, plain(VllmParser)):
        parser = cls("node-1", ref_time=REF_TIME)
        records: list[Record] = []
        for i in range(0, len(lines), size):
            records += parser.feed_batch(lines[i:i + size], [200 * j for j in range(i, i + len(lines[i:i + size]))],
                                         "/var/log/vllm.log", i + 1)
        out.append((records + parser.flush(), parser.checkpoint()))
    assert out[0] == out[1]
