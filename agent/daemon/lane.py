"""The daemon's side of the compiled lane: a plain file's `RawLines` split in C next to the parser.

The tailer (with `raw`, agent/sources/rawlines.py) hands a plain file's runs of whole lines on as the bytes
it read. Here parsers/_lane.c splits them as it does for `scan` (agent/offline/plain_lane.py): a run of quiet
lines (parsers/quiet.py) is passed to the parser as one count (`StreamParser.pass_quiet`), a stats line in
V1's plain shape is settled from the numbers C read (`VllmParser.settle_sample`), and every other line goes to
`feed_batch` as the text `LineAssembler` would have given it, in order. Either call declines when something is
open (a traceback, a line held for its rest), and those lines are fed as text too. So the records and the
parser's state are the ones `LogStream.feed` gets from the same lines as `LogLine`s, the Python path and the
reference (tests/unit/test_daemon_lane.py); only no Python object is made per quiet line, nor a `LogLine`
per line at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.records import RawLines, Record
from parsers import Parser
from parsers.base import StreamParser
from parsers.compiled import LANE
from parsers.paste import WRAP_WIDTHS
from parsers.quiet import MAX_QUIET, REQUEST_GUARDS, quiet_literals
from parsers.vllm import VllmParser


def _target(parser: Parser) -> StreamParser | None:
    """The parser quiet lines are counted by: the server's, once recognised."""
    inner: Any = getattr(parser, "inner", parser)
    return inner if isinstance(inner, StreamParser) else None


def feed_raw(parser: Parser, block: RawLines, where: str) -> list[Record]:
    """The records of `block`'s lines, located at `where` (the file key, as `LogStream` tells the parser):
    what `parser.feed_batch` gives for their texts, and the same parser state after."""
    assert LANE is not None
    data, at = block.data, block.offset
    target = _target(parser)
    settle: Callable[..., list[Record] | None] | None = (target.settle_sample if isinstance(target, VllmParser)
                                                         else None)
    items, _, _ = LANE.split(data, True, -1, -1, len(data) + 1, MAX_QUIET,
                             quiet_literals(type(target)) if target is not None else None, REQUEST_GUARDS,
                             settle is not None, WRAP_WIDTHS)
    out: list[Record] = []
    texts: list[str] = []
    offsets: list[int] = []
    for item in items:
        if item.__class__ is bytes:  # valid UTF-8 (rawlines.raw_run checked), through its newline
            texts.append(item[:-1].removesuffix(b"\r").decode("utf-8"))
            offsets.append(at)
            at += len(item)
            continue
        if texts:
            out += parser.feed_batch(texts, offsets, where)
            texts, offsets = [], []
        if len(item) == 3:  # a run of quiet lines
            count, start, stop = item
            if target is not None and target.pass_quiet(count):
                at += stop - start
                continue
        else:  # a stats line C read
            start, stop = item[0], item[1]
            if settle is not None and (records := settle(*item[2:], where, at, None)) is not None:
                out += records
                at += stop - start
                continue
        for raw in data[start:stop].splitlines(keepends=True):  # ASCII without CR: only newlines split
            texts.append(raw[:-1].decode("ascii"))
            offsets.append(at)
            at += len(raw)
    if texts:
        out += parser.feed_batch(texts, offsets, where)
    return out
