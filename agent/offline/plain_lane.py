"""The compiled lane of `scan`'s plain-file path: a plain file's bytes read in C, quiet lines only counted.

`feed_plain` (agent/offline/saved.py) reads a plain file in batches of lines and hands every line to the
parser. Most lines of a busy log hold nothing the parser looks for; the parser would only count them.
Here the file is read in 1 MiB blocks and parsers/_lane.c splits them into the same lines a
`BoundedLines` reader gives, telling quiet ones (parsers/quiet.py) before any Python object is made. Every
other line goes to the parser's `feed_batch` unchanged and in order; a run of quiet lines is passed with
`pass_quiet` when nothing is open, and fed like the others when something is (an open traceback, request
text running on, a line held for its rest, the server not yet recognised). A quiet line is never one a
parser would hold (as long as a terminal's width) or unwrap (a paste's or shipper's wrapper, parsers/paste.py):
_lane.c tells those apart too. The Python path is the reference: the output is the same byte for byte
(tests/unit/test_lane_differential.py).

`DEEPINFER_LANE=python` forces the Python path; without the built extension (no compiler at install
time, another interpreter) it is the only path (parsers/compiled.py loads it, for the daemon too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

from agent.records import Record, Server
from agent.sources.bounded import MAX_LINE_BYTES, BoundedLines
from parsers import Parser
from parsers.base import StreamParser
from parsers.compiled import ENV as ENV
from parsers.compiled import LANE
from parsers.compiled import active as active
from parsers.compiled import built as built
from parsers.paste import WRAP_WIDTHS
from parsers.quiet import MAX_QUIET, REQUEST_GUARDS, quiet_literals
from parsers.vllm import VllmParser

READ_BYTES = 1 << 20  # one block of the file; at least MAX_LINE_BYTES, so each block ends a line or a piece

Emit = Callable[[list[Record], Server], None]
Located = Callable[[list[Record], list[int], int], list[Record]]  # a batch's records, its offsets, its first line


def usable(raws: object) -> TypeGuard[BoundedLines]:
    """Whether a `feed_plain` call can be served by the lane: a bounded, seekable file."""
    if not isinstance(raws, BoundedLines) or not active():
        return False
    try:
        return raws.seekable()
    except (OSError, ValueError):
        return False


class _Feed:
    """One `feed_plain` call's state: where the next line starts and which line it is."""

    def __init__(self, parser: Parser, path: str | None, offset: int, line: int, emit: Emit,
                 locate: Located) -> None:
        self.parser = parser
        self.path = path
        self.at = offset  # byte offset of the next line
        self.before = line - 1  # newlines before the next line
        self.count = 0  # lines read (a piece of an over-long line that ends without a newline is not one)
        self.emit = emit
        self.locate = locate
        self.run: list[bytes] = []
        self.offsets: list[int] = []
        self.out: list[Record] = []  # records of the block read, emitted together
        self._target: StreamParser | None = None
        self.run_at = offset
        self.run_before = self.before

    def target(self) -> StreamParser | None:
        """The parser quiet lines are counted by: the server's, once recognised (then it stays)."""
        if self._target is None:
            inner: Any = getattr(self.parser, "inner", self.parser)
            self._target = inner if isinstance(inner, StreamParser) else None
        return self._target

    def line(self, raw: bytes) -> None:
        if not self.run:
            self.run_at, self.run_before = self.at, self.before
        self.run.append(raw)
        self.offsets.append(self.at)
        self.at += len(raw)
        if len(raw) == MAX_LINE_BYTES and raw[-1:] != b"\n":
            self.flush()  # a piece: the rest of its line follows with the same line number, in a batch of its own
        else:
            self.count += 1
            self.before += 1

    def unseen(self, buf: bytes, start: int, stop: int) -> None:
        """Quiet lines the parser cannot pass over now (a block or a request's text is open): fed as they are."""
        for raw in buf[start:stop].splitlines(keepends=True):  # quiet lines hold no CR: only newlines split
            self.line(raw)
        self.flush()

    def flush(self) -> None:
        if self.run:  # decoded as saved.feed_plain decodes its batches
            texts = [raw.decode("utf-8", "replace").rstrip("\r\n") for raw in self.run]
            first = self.run_before + 1
            if records := self.parser.feed_batch(texts, self.offsets, self.path, first):
                self.out += self.locate(records, self.offsets, first)
            self.run = []
            self.offsets = []

    def emit_all(self) -> None:
        self.flush()
        if self.out:
            self.emit(self.out, self.parser.server)
            self.out = []


def feed_plain(raws: BoundedLines, parser: Parser, path: str | None, offset: int, emit: Emit, end: int | None,
               limit: int | None, line: int, locate: Located, first: bytes | None) -> tuple[int, int]:
    """`saved.feed_plain` through the compiled lane (`usable` said it may): the same records, emitted in
    order, and the same (lines read, offset after them); the file is left at the first line not read."""
    assert LANE is not None
    feed = _Feed(parser, path, offset, line, emit, locate)
    if first is not None:
        feed.line(first)
        feed.emit_all()
        if (end is not None and feed.at >= end) or feed.count == limit:
            return feed.count, feed.at
    raws.seek(feed.at)  # its lines start at `offset`, after `first`; read through it, so progress is told
    buf = b""
    buf_at = feed.at  # the file offset of buf[0]
    split = LANE.split
    settle: Callable[..., list[Record] | None] | None = None
    quiet: Callable[[int], bool] | None = None
    while True:
        block = raws.read(READ_BYTES)
        buf = buf + block if buf else block
        final = not block
        target = feed.target()
        literals = quiet_literals(type(target)) if target is not None else None
        items, used, done = split(buf, final, -1 if end is None else end - buf_at,
                                  -1 if limit is None else limit - feed.count, MAX_LINE_BYTES, MAX_QUIET,
                                  literals, REQUEST_GUARDS, isinstance(target, VllmParser), WRAP_WIDTHS)
        if quiet is None and target is not None:
            quiet = target.pass_quiet
            settle = target.settle_sample if isinstance(target, VllmParser) else None
        out = feed.out
        for item in items:
            if item.__class__ is bytes:
                feed.line(item)
            elif len(item) == 3:  # a run of quiet lines
                if feed.run:
                    feed.flush()
                lines, start, stop = item
                if quiet is not None and quiet(lines):
                    feed.at += stop - start
                    feed.count += lines
                    feed.before += lines
                else:
                    feed.unseen(buf, start, stop)
            else:  # a stats line read in C: settled here, the commonest line of a busy vLLM log (inlined)
                if feed.run:
                    feed.flush()
                start, stop = item[0], item[1]
                if settle is not None and (records := settle(*item[2:], path, feed.at, feed.before + 1)) is not None:
                    out += records  # numbered already: a sample and its `pending` carry the line
                    feed.at += stop - start
                    feed.count += 1
                    feed.before += 1
                else:
                    feed.line(buf[start:stop])
        feed.emit_all()
        buf = buf[used:]
        buf_at += used
        if done or final:
            break
    raws.seek(feed.at)
    return feed.count, feed.at
