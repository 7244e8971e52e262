"""A parser's public state protocol (parsers/checkpoint.py), which `scan --jobs` stitches chunks with: a parser
that read only the later lines, resumed after the earlier ones, is the parser that read them all."""

from __future__ import annotations

import pickle
from datetime import datetime, timezone

from agent.records import Event, EventKind
from parsers.vllm import VllmParser

from .conftest import REF_TIME

_TAG = "(APIServer pid=1) "


def _stats(second: int, waiting: int) -> str:
    return (f"{_TAG}INFO 11-28 00:{second // 60:02d}:{second % 60:02d} [loggers.py:123] Engine 000: Avg prompt "
            f"throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 4 reqs, Waiting: {waiting} "
            "reqs, GPU KV cache usage: 10.0%, Prefix cache hit rate: 0.0%")


def _oom(second: int) -> str:
    return (f"(EngineCore_DP0 pid=9) ERROR 11-28 00:{second // 60:02d}:{second % 60:02d} [core.py:710] "
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")


HEAD = [_stats(1, 0), _oom(2), _stats(3, 0)]  # an OOM the later lines' parser never sees
TAIL = [_stats(4, 2), _stats(5, 0), _stats(6, 0)]


def _fed(parser: VllmParser, lines: list[str]) -> list[object]:
    return [r for line in lines for r in parser.feed(line, None, "t.log", 0)]


def test_a_resumed_parser_goes_on_as_the_one_that_read_everything() -> None:
    whole, part = VllmParser("e", REF_TIME), VllmParser("e", REF_TIME)
    _fed(whole, HEAD)
    head_incidents, head_errors = whole.incidents(), whole.parse_errors
    assert set(head_incidents) == {"oom"} and head_incidents["oom"][1] == 3  # reported when line 3 closed it
    _fed(whole, TAIL)
    _fed(part, TAIL)
    assert part.checkpoint() != whole.checkpoint()  # three lines apart, and without the OOM
    part.resume(len(HEAD), head_incidents, head_errors)
    assert part.checkpoint() == whole.checkpoint()
    assert part.incidents() == whole.incidents() and part.lines_seen == whole.lines_seen == 6
    # an OOM 10 s after the first is the same incident to both: neither reports it
    again = [_oom(12), _stats(13, 0)]
    assert [r for r in _fed(whole, again) if isinstance(r, Event)] == []
    assert [r for r in _fed(part, again) if isinstance(r, Event)] == []


def test_a_checkpoint_tells_apart_parsers_whose_next_records_differ() -> None:
    queued, idle = VllmParser("e", REF_TIME), VllmParser("e", REF_TIME)
    _fed(queued, [_stats(1, 3)])  # a queue: the next sample with a queue is no new `pending`
    _fed(idle, [_stats(1, 0)])
    assert queued.checkpoint() != idle.checkpoint()
    assert queued.checkpoint().lines_seen == idle.checkpoint().lines_seen == 1


def test_new_incident_kinds_are_noted_where_first_reported_and_a_pickled_copy_notes_no_more() -> None:
    parser = VllmParser("e", REF_TIME)
    _fed(parser, HEAD)
    first = parser.note_new_incidents()
    _fed(parser, [_stats(50, 0), _oom(51), _stats(52, 0)])  # an OOM 49 s on: a new incident, but a known kind
    assert first == {}
    _fed(parser, [f"{_TAG}ERROR 11-28 00:00:53 [core.py:1] EngineCore encountered a fatal error.", _stats(54, 0)])
    fatal_at = datetime(2026, 11, 28, 0, 0, 53, tzinfo=timezone.utc).timestamp()  # REF_TIME's year
    assert first == {EventKind.ENGINE_DEAD.value: (fatal_at, 8)}  # the ERROR record, closed by line 8
    copy = pickle.loads(pickle.dumps(parser))
    assert type(copy.incidents()) is dict and copy.incidents() == parser.incidents()
    assert copy.checkpoint() == parser.checkpoint()
