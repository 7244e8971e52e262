"""`feed_batch` (how `scan` and the daemon read a run of a plain file's lines) gives exactly what feeding each
line gives: the same records with the same line numbers (none for the daemon), and the same parser state after,
whatever the batch size."""

from __future__ import annotations

from datetime import timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.offline.saved import located, stamp
from agent.records import Record, Server
from parsers import make_parser

from .conftest import LOGS, REF_TIME

_CACHES = {"stamps"}  # how fast, not what: its caches may differ (its zone and year are the constructor's)


def _newlines(data: bytes) -> Any:
    return lambda a, b: data.count(b"\n", a, b)


def _state(parser: Any) -> dict[str, Any]:
    inner = getattr(parser, "inner", None) or parser
    return {k: v for k, v in vars(inner).items() if k not in _CACHES}


def lines_of(data: bytes) -> list[bytes]:
    """The raw lines as a file's `readlines` gives them: split after each newline, and only there."""
    return [line + b"\n" for line in data.split(b"\n")[:-1]] + ([data.rsplit(b"\n", 1)[-1]] if not
                                                                 data.endswith(b"\n") else [])


def by_line(parser: Any, data: bytes) -> list[Record]:
    """The reference: `feed` per line, located as `scan` locates records."""
    out: list[Record] = []
    offset = 0
    raws = lines_of(data)
    for n, raw in enumerate(raws):
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if records := parser.feed(text, None, "t.log", offset):
            out += stamp(records, offset, n, _newlines(data))
        offset += len(raw)
    return out


def in_batches(parser: Any, data: bytes, size: int) -> list[Record]:
    out: list[Record] = []
    offset = 0
    raws = lines_of(data)
    for start in range(0, len(raws), size):
        batch = raws[start:start + size]
        texts = [raw.decode("utf-8", "replace").rstrip("\r\n") for raw in batch]
        offsets = [offset + sum(map(len, batch[:i])) for i in range(len(batch))]
        out += located(parser.feed_batch(texts, offsets, "t.log", start + 1), offsets, start + 1, _newlines(data))
        offset += sum(map(len, batch))
    return out


def as_the_daemon(data: bytes) -> tuple[list[str], list[int]]:
    """The texts and offsets of a plain file's lines as the tailer reads them: a final `\r` dropped."""
    texts, offsets, offset = [], [], 0
    for raw in lines_of(data):
        texts.append(raw.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8", "replace"))
        offsets.append(offset)
        offset += len(raw)
    return texts, offsets


def assert_same(server: Server, data: bytes, size: int, tz: Any = timezone.utc) -> None:
    one, many = make_parser(server, "t", REF_TIME, tz), make_parser(server, "t", REF_TIME, tz)
    expected, got = by_line(one, data), in_batches(many, data, size)
    assert got == expected
    assert [getattr(r, "line", None) for r in got] == [getattr(r, "line", None) for r in expected]
    assert _state(many) == _state(one)
    assert many.flush() == one.flush()
    # the daemon's runs (no line numbers): what `feed` gives line by line
    one, runs = make_parser(server, "t", REF_TIME, tz), make_parser(server, "t", REF_TIME, tz)
    texts, offsets = as_the_daemon(data)
    expected = [r for text, offset in zip(texts, offsets, strict=True) for r in one.feed(text, None, "t.log", offset)]
    got = [r for start in range(0, len(texts), size)
           for r in runs.feed_batch(texts[start:start + size], offsets[start:start + size], "t.log")]
    assert got == expected
    assert [getattr(r, "line", None) for r in got] == [getattr(r, "line", None) for r in expected]
    assert _state(runs) == _state(one)
    assert runs.flush() == one.flush()


LOG_FILES = sorted(LOGS.rglob("*.log"))
REAL = sorted((LOGS.parent / "real").glob("*.txt"))


@pytest.mark.parametrize("path", [*LOG_FILES, *REAL], ids=lambda p: p.name)
@pytest.mark.parametrize("size", [1, 7, 400])
def test_every_fixture_and_real_log_reads_the_same_in_batches(path: Any, size: int) -> None:
    data = path.read_bytes()
    assert_same(Server.AUTO, data, size)
    if path.parent.name in {s.value for s in Server}:
        assert_same(Server(path.parent.name), data, size)


_TAG = "(APIServer pid=3646) "
_V1 = ("Engine 000: Avg prompt throughput: 1675.6 tokens/s, Avg generation throughput: 1339.8 tokens/s, Running: 44 "
       "reqs, Waiting: {w} reqs, GPU KV cache usage: 14.2%, Prefix cache hit rate: 32.3%")
TRICKY_LINES = [
    _TAG + "INFO 11-28 00:00:01 [loggers.py:123] " + _V1.format(w=0),
    _TAG + "INFO 11-28 00:00:02 [loggers.py:123] " + _V1.format(w=3),  # a queue forms: a `pending` event
    _TAG + "INFO 11-28 00:00:59 [loggers.py:123] " + _V1.format(w=0).replace("Engine 000", "Engine 001"),
    _TAG + "INFO 11-28 00:01:60 [loggers.py:123] " + _V1.format(w=0),  # a second that is not one
    _TAG + "INFO 11-28 00:0x:05 [loggers.py:123] " + _V1.format(w=0),  # a stamp that is not one
    _TAG + "INFO 11-28 00:02:03 [loggers.py:123] " + _V1.format(w=0).replace("1675.6", "1.2.3"),  # a bad number
    _TAG + "INFO 11-28 00:02:04 [loggers.py:123] " + _V1.format(w=9).replace(
        "Waiting: 9 reqs", "Waiting: 9 reqs, Preemptions: 4"),
    _TAG + "INFO 11-28 00:02:05 [loggers.py:123] " + _V1.format(w=0).replace(
        "14.2%", "14.2%, CPU KV cache usage: 0.0%"),
    _TAG + "INFO 11-28 00:02:06 [loggers.py:123] " + _V1.format(w=0).replace(", Prefix cache hit rate: 32.3%", ""),
    "\x1b[36m(APIServer pid=3646)\x1b[0m INFO 11-28 00:02:07 [loggers.py:123] " + _V1.format(w=0),
    "INFO 11-28 00:02:08 [metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 5.1 "
    "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 0.4%, CPU KV cache usage: 0.0%.",
    "Nov 28 00:02:09 host vllm[1]: " + _TAG + "INFO 11-28 00:02:09 [loggers.py:123] " + _V1.format(w=0),
    _TAG + 'INFO:     10.0.0.9:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    _TAG + 'INFO:     10.0.0.9:40000 - "POST /v1/chat/completions HTTP/1.1" 429 Too Many Requests',
    _TAG + 'INFO:     10.0.0.9:40000 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable',
    _TAG + 'INFO:     10.0.0.9:40000 - "GET /v1/request?prompt=\'hi HTTP/1.1" 200 OK',
    _TAG + "INFO 11-28 00:02:10 [logger.py:39] Received request chatcmpl-1: prompt: 'line one",
    "line two of the prompt",
    _TAG + "ERROR 11-28 00:02:11 [core.py:710] EngineCore encountered a fatal error.",
    _TAG + "ERROR 11-28 00:02:11 [core.py:710] Traceback (most recent call last):",
    '  File "/usr/lib/python3/site-packages/vllm/v1/engine/core.py", line 701, in run_engine_core',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "progress 50%\r" + _TAG + "INFO 11-28 00:02:12 [loggers.py:123] " + _V1.format(w=0),
    _TAG + "INFO 11-28 00:02:13 [loggers.py:123] " + _V1.format(w=0) + " " + "x" * 70000,
    # the lines the batch lane settles in its loop, and near misses of them that it must leave to `feed`
    "(INFO pid=7) INFO 11-28 00:02:14 [loggers.py:123] " + _V1.format(w=0),  # `INFO ` inside the tag
    "(FOOINFO pid=7) INFO 11-28 00:02:15 [loggers.py:123] " + _V1.format(w=2),
    "(VllmWorker TP0 pid=8) INFO 11-28 00:02:16 [loggers.py:123] " + _V1.format(w=0),  # a two-word tag
    "(VllmWorker TP0 pid=8) INFO 11-28 00:03:16 [loggers.py:123] " + _V1.format(w=1).replace("Engine 000: ", ""),
    _TAG + "INFO 11-28 00:02:17 [a] b] " + _V1.format(w=0),  # the first `] ` is not the location's
    _TAG + "INFO 11-28 00:02:18 [loggers.py:123] " + _V1.format(w=0) + "\rtail after a carriage return",
    _TAG + "INFO 11-28 00:04:00 [loggers.py:123] " + _V1.format(w=0).replace("44 reqs", "9" * 5000 + " reqs"),
    'INFO:     10.0.0.9:40000 - "GET /health HTTP/1.1" 200 OK',  # no process tag
    _TAG + 'INFO:     10.0.0.9:40000 - "POST /v1/completions HTTP/1.1" 4290 Odd',
    _TAG + 'INFO:     10.0.0.9:40000 - "POST /v1/completions HTTP/1.1" 504 Gateway Timeout',
    _TAG + 'INFO:     10.0.0.9:40000 - "POST /v1/completions HTTP/1.1" 200 OK Avg prompt throughput: 1',
    _TAG + 'INFO:     10.0.0.9:40000 - "POST /v1/completions HTTP/1.1" 200 OK "',
    _TAG + 'INFO:     10.0.0.9:40000 - "GET /a\\b HTTP/1.1" 200 OK',
    _TAG + 'INFO:     10.0.0.9:40000 - "GET /\x1b[31m HTTP/1.1" 200 OK',
    "",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(TRICKY_LINES), max_size=40), st.sampled_from([1, 2, 5, 64]),
       st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_vllm_stats_and_access_lanes_match_feed(lines: list[str], size: int, newline: str, latin: bool) -> None:
    data = newline.join(lines).encode() + (b"\xe9\xff tail\n" if latin else b"")
    assert_same(Server.VLLM, data, size)


def test_a_minute_that_is_not_sixty_seconds_is_converted_line_by_line() -> None:
    """The autumn DST change repeats 02:00–02:59 in Berlin; each line is still converted as `feed` does."""
    lines = [_TAG + f"INFO 10-25 02:{m:02d}:{s:02d} [loggers.py:123] " + _V1.format(w=0)
             for m in (59,) for s in (0, 30, 59)] + [_TAG + "INFO 10-25 03:00:00 [loggers.py:123] " + _V1.format(w=0)]
    for size in (1, 3):
        assert_same(Server.VLLM, "\n".join(lines).encode(), size, ZoneInfo("Europe/Berlin"))


def test_an_access_line_after_a_request_text_is_read_as_feed_reads_it() -> None:
    """A prompt opened over lines: the access line after it ends it (it has a prefix of its own), so the
    batch lane must not settle it while a request's text is open."""
    opened = _TAG + "INFO 11-28 00:02:10 [logger.py:39] Received request chatcmpl-1: prompt: 'line one"
    access = _TAG + 'INFO:     10.0.0.9:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    data = "\n".join([opened, access, access, "line two of the prompt"]).encode()
    for size in (1, 2, 4):
        assert_same(Server.VLLM, data, size)


@pytest.mark.parametrize("line", [
    "INFO 11-28 00:02:08 [loggers.py:123] " + _V1.format(w=0),  # no process tag
    "INFO 11-28 00:02:08 metrics.py:351] " + _V1.format(w=0).replace("Engine 000: ", ""),  # V0's location
    "Nov 28 00:02:09 host vllm[1]: " + _TAG + "INFO 11-28 00:02:09 [loggers.py:123] " + _V1.format(w=0),  # syslog
    _TAG + "INFO 11-28 00:02:10 [loggers.py:123] " + _V1.format(w=0),
])
def test_a_stats_line_is_read_once_whatever_its_prefix(line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each prefix is tried once, and the fields are read once, by whichever path found them."""
    from parsers import vllm_stats

    reads: list[int | None] = []
    real = vllm_stats.sample

    def counted(*args: Any) -> Any:
        reads.append(args[5] if len(args) > 5 else None)
        return real(*args)

    monkeypatch.setattr(vllm_stats, "sample", counted)
    parser = make_parser(Server.VLLM, "t", REF_TIME)
    (sample,) = parser.feed_batch([line], [0], "t.log", 5)
    assert len(reads) == 1 and sample.running == 44 and sample.waiting == 0  # type: ignore[union-attr]
