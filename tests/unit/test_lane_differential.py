"""The compiled lane (parsers/_lane.c, agent/offline/plain_lane.py) against the Python path, its reference:
`scan`'s text summary and JSON lines are the same byte for byte with the lane on and off, on every log under
tests/data, on generated mixes of real line shapes (CR, invalid UTF-8, quotes, lines around the quiet
limit, stats lines with and without a prefix), at every block edge, with over-long lines, one job and two.

Where the extension is not built these tests skip and say so; `test_the_lane_is_built_where_it_can_be`
fails instead when a C compiler and CPython's headers are there, so CI cannot run the Python path twice.
"""

from __future__ import annotations

import io
import platform
import shutil
import sysconfig
from collections.abc import Iterator
from datetime import timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent.offline import plain_lane
from agent.offline.parallel import scan_path
from agent.records import Server
from agent.sources.bounded import MAX_LINE_BYTES
from agent.views.scan_text import JsonlWriter, render_text
from agent.views.summary import SummaryBuilder
from parsers.quiet import MAX_QUIET

DATA = Path(__file__).resolve().parent.parent / "data"
LOGS = sorted(p for p in DATA.rglob("*") if p.is_file() and p.suffix in (".log", ".txt"))

needs_lane = pytest.mark.skipif(not plain_lane.built(), reason="the compiled lane (parsers/_lane.c) is not built "
                                "here: no C compiler or CPython headers at install time; the Python path is used")


def test_the_lane_is_built_where_it_can_be() -> None:
    """A compiler and Python.h were there at install time, so the build hook must have built the lane."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if platform.python_implementation() != "CPython" or shutil.which("cc") is None or not headers.is_file():
        pytest.skip("no C compiler or CPython headers: the lane cannot be built here")
    assert plain_lane.built(), "a compiler is here but parsers/_lane*.so is missing: reinstall with pip install -e ."


def _outputs(path: Path, jobs: int, server: Server) -> tuple[str, str, int, Server, int, str]:
    """(JSON lines, text summary, lines, server, parse errors, envelope) of `scan` on one file (with tiny
    chunks for `jobs`)."""
    out = io.StringIO()
    writer = JsonlWriter(out)
    scan = scan_path(path, writer, server, timezone.utc, jobs, writer, None, min_bytes=1, probe=3)
    writer.flush()
    summary = SummaryBuilder()
    text_scan = scan_path(path, lambda records, _: summary.add(records), server, timezone.utc, jobs, None,
                          summary, min_bytes=1, probe=3)
    text = render_text([text_scan], summary.result())
    return out.getvalue(), text, scan.lines, scan.server, scan.parse_errors, scan.fmt


@pytest.fixture
def lane_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the calls the lane serves in this process, so a test knows the lane really ran."""
    calls: list[int] = []
    real = plain_lane.feed_plain

    def counted(*args: object, **kwargs: object) -> tuple[int, int]:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(plain_lane, "feed_plain", counted)
    yield calls


def _both_ways(path: Path, jobs: int, monkeypatch: pytest.MonkeyPatch, calls: list[int],
               server: Server = Server.AUTO) -> None:
    monkeypatch.setenv(plain_lane.ENV, "python")
    reference = _outputs(path, jobs, server)
    assert not calls, "DEEPINFER_LANE=python must keep the lane out"
    monkeypatch.delenv(plain_lane.ENV)
    assert _outputs(path, jobs, server) == reference
    if jobs == 1 and reference[-1] == "plain" and path.read_bytes().decode("utf-8", "replace").strip():
        # the lane reads a plain file's lines from its first non-blank one
        assert calls, "the lane did not run"


@needs_lane
@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(DATA)))
@pytest.mark.parametrize("server", [Server.AUTO, Server.VLLM], ids=["auto", "vllm"])
def test_every_log_scans_the_same_with_the_lane(path: Path, server: Server, monkeypatch: pytest.MonkeyPatch,
                                                lane_calls: list[int]) -> None:
    _both_ways(path, 1, monkeypatch, lane_calls, server)


@needs_lane
@pytest.mark.parametrize("path", [p for p in LOGS if p.stat().st_size > 20_000], ids=lambda p: p.name)
def test_every_large_log_scans_the_same_with_the_lane_and_two_jobs(path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    lane_calls: list[int]) -> None:
    _both_ways(path, 2, monkeypatch, lane_calls)


STAMP = "11-28 00:00:{0:02d}"
STATS = ("Engine 000: Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 95.1 tokens/s, Running: 12 "
         "reqs, Waiting: {0} reqs, GPU KV cache usage: 73.5%, Prefix cache hit rate: 11.0%")
SHAPES = [
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS,  # V1's plain prefix
    "INFO " + STAMP + " [metrics.py:341] " + STATS,  # V0's, no process tag
    STATS,  # no prefix at all
    "2026-11-28T00:00:01.5Z (APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS,  # runtime stamp
    "\x1b[32m(APIServer pid=3646)\x1b[0m INFO " + STAMP + " [loggers.py:123] " + STATS,  # colour
    '(APIServer pid=3646) INFO:     10.0.0.{0}:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    '(APIServer pid=3646) INFO:     10.0.0.{0}:51234 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable',
    '(APIServer pid=3646) INFO:     10.0.0.{0}:51234 - "POST /v1/completions HTTP/1.1" 429 Too Many Requests',
    '10.0.0.{0} - - [28/Nov/2026:00:00:01 +0000] "GET /health HTTP/1.1" 200 2',
    # lines that print a request's duration (RequestSample), quiet to the pre-filter but not to `feed`
    '10.0.0.{0} - - [28/Nov/2026:00:00:01 +0000] "POST /v1/completions HTTP/1.1" 200 612 "-" "c" rt=1.{0} urt=1.0',
    '[2026-11-28T00:00:01.000Z] "POST /v1/completions HTTP/1.1" 200 - 0 612 3{0} 30 "-" "c" "id" "h" "10.0.0.1:80"',
    '[GIN] 2026/11/28 - 00:00:01 | 200 |  1.2{0}s |  127.0.0.1 | POST     "/api/chat"',
    # the stats line near its shape: every test the lane makes, just passed and just failed
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS.replace("Engine 000: ", ""),
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS.replace("000", "00000"),
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS.replace(", Prefix cache hit rate: 11.0%", ""),
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS.replace("11.0%", "11.0.1%"),
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS.replace("812.4", "."),
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS.replace("12 reqs", "1" * 30 + " reqs"),
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] "
    + STATS.replace("73.5%", "73.5%, CPU KV cache usage: 1.0%"),
    "(APIServer pid=3646) INFO 11-28 00:00:6{0} [loggers.py:123] " + STATS,  # second 60 and on
    "(APIServer pid=3646) INFO 11-28 00:0{0}:00 [loggers.py:123] " + STATS,
    "(APIServer pid=3646) INFO 11-28 00:00:0 [loggers.py:123] " + STATS,
    "(APIServer) INFO " + STAMP + " [loggers.py:123] " + STATS,  # a tag without a pid
    "\x1c (Worker pid={0})\t INFO " + STAMP + " [loggers.py:123] " + STATS,  # str.strip's whitespace
    "[APIServer pid=3646] INFO " + STAMP + " [loggers.py:123] " + STATS,
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS + " and more after it",
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] x " + STATS,
    "(APIServer pid=3646) WARNING " + STAMP + " [loggers.py:123] " + STATS,
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] Engine 001: " + STATS,
    "(APIServer pid=3646) INFO " + STAMP + " [loggers.py:123] " + STATS.replace("Waiting: {0}", "Waiting: 0"),
    "(APIServer pid=3646) INFO " + STAMP + " [launcher.py:37] Route: /v1/models, Methods: GET",
    "(APIServer pid=3646) INFO " + STAMP + " [chat_utils.py:470] Detected the chat template content format to be "
    "'string'. You can set `--chat-template-content-format` to override this.",
    "(APIServer pid=3646) INFO " + STAMP + " [logger.py:39] Received request cmpl-{0}: prompt: 'a\\nb', params",
    "(EngineCore_DP0 pid=20) ERROR " + STAMP + " [core.py:1] EngineCore encountered a fatal error.",
    "Traceback (most recent call last):",
    '  File "/x/y.py", line {0}, in <module>',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "(EngineCore_DP0 pid=20) INFO " + STAMP + " [kv_cache_utils.py:1] GPU KV cache size: 154,256 tokens",
    "(APIServer pid=10) INFO " + STAMP + " [api_server.py:1] vLLM API server version 0.10.1",
    "",
    'a line with "one quote',
    # request text that runs on over lines (a prompt with newlines): its next lines are not log records
    "(APIServer pid=3646) INFO " + STAMP + " [logger.py:39] Received request cmpl-{0}: prompt: 'a prompt that",
    '(APIServer pid=3646) INFO ' + STAMP + ' [logger.py:39] Received request cmpl-{0}: prompt: "a prompt that',
    '(APIServer pid=3646) INFO ' + STAMP + ' [logger.py:39] Received request cmpl-{0}: prompt: "a \\" prompt',
    "goes on with CUDA out of memory. Tried to allocate 2.00 GiB, and a 503 in it' and on",
    'and ends " here with a 429 Too Many Requests {0}',
    "plain words {0} with nothing in them",
    "x" * (MAX_QUIET - 1) + "{0}",  # around the quiet limit
    "y" * MAX_QUIET + "{0}",
    # as long as a terminal's width: held for its rest (parsers/paste.py), so never quiet
    "q" * 77 + " {0:02d}",
    "r" * 117 + " {0:02d}",
    "s" * 157 + " {0:02d}",
    "o" * 66 + "torch.OutOfMem",  # the rest of the word on the next line, which says nothing alone
    "oryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "ory, and the rest of it {0}",
    # worn by a paste or a shipper: the line inside is read (maybe several, maybe one held)
    '{{"log": "plain words \\u0043UDA out of mem\\u006fry {0}\\n", "stream": "stderr",'
    ' "time": "2026-11-28T00:00:01Z"}}',
    '{{"log": "one line\\nand another {0}", "stream": "stdout"}}',
    "2026-11-28T00:00:01.5Z stderr F " + "p" * 77 + " {0:02d}",  # the line inside: 80 characters
    "2026-11-28T00:00:01.000000000Z stderr F plain words {0}",
    "    INFO " + STAMP + " [loggers.py:123] " + STATS,
    "12 | plain words {0}",
    "  12: plain words {0}",
    "> plain words {0}",
    "- plain words {0}",
    'detail: "Traceback (most recent call last):\\n  File x, line {0}\\nValueError: bad"',
]


def _like(fragment: str) -> str:
    return next(shape for shape in SHAPES if fragment in shape)


ODDITIES = [b"", b"\r", b"\xff", b"\xe6\x97\xa5", b"\x00", b"'", b"\\", b'"', b"\r\r", b"\x1b[0m"]


@st.composite
def _mixes(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.tuples(st.sampled_from(SHAPES), st.integers(0, 59), st.sampled_from(ODDITIES),
                                    st.booleans()), min_size=1, max_size=120))
    out = b"".join((shape.format(n).encode() + (odd + b"\n" if tail else b"\n" + odd))
                   for shape, n, odd, tail in lines)
    return out if draw(st.booleans()) else out.rstrip(b"\n")  # with and without a last newline


@needs_lane
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_mixes(), block=st.sampled_from([1, 7, 64, 1000, plain_lane.READ_BYTES]),
       server=st.sampled_from([Server.AUTO, Server.VLLM, Server.SGLANG, Server.LLAMACPP]))
# request text opened, then a quiet line with a prefix of its own (it ends the text), then an event's line
@example(data=("\n".join(map(_like, ['prompt: "a prompt that', "Route:", "OutOfMemoryError", "Route:", "200 OK",
                                     "and ends"])).format(3) + "\n")
         .encode(), block=plain_lane.READ_BYTES, server=Server.VLLM)
def test_generated_mixes_scan_the_same_at_every_block_edge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           lane_calls: list[int], data: bytes, block: int,
                                                           server: Server) -> None:
    """A server named (or recognised early) is where quiet lines are passed over: a short log read as `auto`
    is held until its end, then fed whole."""
    log = tmp_path / "mix.log"
    log.write_bytes(data)
    monkeypatch.setattr(plain_lane, "READ_BYTES", block)
    lane_calls.clear()
    _both_ways(log, 1, monkeypatch, lane_calls, server)


@needs_lane
def test_generated_mix_scans_the_same_with_two_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   lane_calls: list[int]) -> None:
    lines = [SHAPES[i % len(SHAPES)].format(i % 60) for i in range(3000)]
    log = tmp_path / "mix.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _both_ways(log, 2, monkeypatch, lane_calls)


@needs_lane
@pytest.mark.parametrize("tail", [b"\n", b""])
def test_over_long_lines_scan_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lane_calls: list[int],
                                       tail: bytes) -> None:
    """Lines over MAX_LINE_BYTES come in pieces (bounded.py); one exactly that long with its newline does not."""
    access = b'(APIServer pid=1) INFO:     10.0.0.1:5 - "POST /v1/completions HTTP/1.1" 503 Service Unavailable\n'
    data = (access + b"z" * (MAX_LINE_BYTES * 2 + 17) + b" CUDA out of memory\n" + access
            + b"w" * (MAX_LINE_BYTES - 1) + b"\n" + access + b"v" * MAX_LINE_BYTES + access + b"u" * 100 + tail)
    log = tmp_path / "long.log"
    log.write_bytes(data)
    _both_ways(log, 1, monkeypatch, lane_calls)


def _width(line: str, width: int) -> str:
    """`line` padded at its end to the next multiple of `width` characters."""
    return line + " " + "z" * (-(len(line) + 1) % width)


@needs_lane
@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("block", [1, 64, plain_lane.READ_BYTES])
@pytest.mark.parametrize("server", [Server.AUTO, Server.VLLM], ids=["auto", "vllm"])
def test_lines_as_long_as_a_terminal_scan_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   lane_calls: list[int], width: int, block: int,
                                                   server: Server) -> None:
    """A line exactly 80 or 120 characters long is held one line in case the next is its rest: the lane
    neither passes it as quiet nor reads it as a stats line, and counts no quiet line past it while held."""
    stats = [_like("[loggers.py:123] Engine 000").format(n) for n in range(6)]
    cut = "o" * (width - 14) + "torch.OutOfMem"
    assert len(cut) == width
    lines = [*stats,
             cut, "oryError: CUDA out of memory. Tried to allocate 2.00 GiB.",  # one statement, cut at the width
             *stats,
             "q" * width, "plain words that end nothing", "more plain words", stats[1],
             "q" * width, stats[2],  # a stats line right after a held line
             _width(stats[3], width), "plain words again",  # a stats line as long as a terminal
             _width(stats[4], width), stats[5],
             "q" * (2 * width), "r" * width, "the rest", *stats,
             "q" * width]  # held at the end: the flush reads it
    log = tmp_path / "wrapped.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(plain_lane, "READ_BYTES", block)
    _both_ways(log, 1, monkeypatch, lane_calls, server)


# The literal test itself, against Python's `in`: a line of a few letters is quiet exactly when it holds none of the
# literals, whatever their lengths (one, two, three, four and more bytes, where the C filter takes different
# paths), and whichever literals an earlier call asked for (the filter of the last tuple is kept between calls).
_LETTERS = st.text(alphabet="abcz", min_size=1, max_size=7)


@needs_lane
@settings(max_examples=300, deadline=None)
@given(first=st.lists(_LETTERS, min_size=1, max_size=12), second=st.lists(_LETTERS, min_size=1, max_size=12),
       lines=st.lists(st.text(alphabet="abcz ", max_size=60), min_size=1, max_size=20))
def test_the_lanes_literal_test_is_pythons_in(first: list[str], second: list[str], lines: list[str]) -> None:
    from parsers.compiled import LANE
    from parsers.quiet import REQUEST_GUARDS

    assert LANE is not None
    buf = b"".join(b"q" + line.encode() + b"\n" for line in lines)
    for words in (first, second, first):
        literals = tuple(sorted({w.encode() for w in words}))
        for _ in range(2):  # the same tuple again: the kept filter
            items, used, _done = LANE.split(buf, True, -1, -1, MAX_LINE_BYTES, MAX_QUIET, literals, REQUEST_GUARDS,
                                           False, ())
            assert used == len(buf)
            quiet: list[bool] = []
            for item in items:
                quiet += [True] * item[0] if isinstance(item, tuple) else [False]
            assert quiet == [not any(w in "q" + line for w in words) for line in lines]


# The stats line's numbers, against Python's `float` bit for bit (the lane divides exact doubles for up to 15 digits,
# Clinger's fast path, and asks CPython's strtod beyond), and its minute, tag and engine texts, which it hands out
# again while they repeat, against the line's own.
_NUMBER = st.from_regex(r"[0-9]{1,19}(\.[0-9]{0,19})?|\.[0-9]{1,19}", fullmatch=True)


@needs_lane
@settings(max_examples=400, deadline=None)
@given(numbers=st.lists(_NUMBER, min_size=4, max_size=4),
       lines=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["APIServer pid=1", "Worker pid=22"]),
                                st.sampled_from(["000", "001", "002", "003", "004", "7"])), min_size=1, max_size=8))
def test_the_lanes_stats_numbers_and_texts_are_pythons(numbers: list[str],
                                                       lines: list[tuple[int, str, str]]) -> None:
    import struct

    from parsers.compiled import LANE
    from parsers.paste import WRAP_WIDTHS
    from parsers.quiet import REQUEST_GUARDS

    assert LANE is not None
    pt, gt, kv, hit = numbers
    texts = [f"({tag}) INFO 11-28 00:0{minute}:01 [loggers.py:123] Engine {engine}: Avg prompt throughput: {pt} "
             f"tokens/s, Avg generation throughput: {gt} tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache "
             f"usage: {kv}%, Prefix cache hit rate: {hit}%\n" for minute, tag, engine in lines]
    items, _, _ = LANE.split("".join(texts).encode(), True, -1, -1, MAX_LINE_BYTES, MAX_QUIET, None, REQUEST_GUARDS,
                             True, WRAP_WIDTHS)
    held = [len(text) - 1 for text in texts if any((len(text) - 1) % w == 0 for w in WRAP_WIDTHS)]
    if held:
        return  # as long as a terminal: the parser's (test_lines_as_long_as_a_terminal_scan_the_same)
    assert len(items) == len(lines)
    for item, (minute, tag, engine) in zip(items, lines, strict=True):
        assert isinstance(item, tuple)
        assert item[2:6] == (f"11-28 00:0{minute}", 1, f"({tag})", engine)
        got = (item[6], item[7], item[10], item[11])
        assert [struct.pack("<d", g) for g in got] == [struct.pack("<d", float(n)) for n in numbers]
