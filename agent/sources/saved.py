"""Saved logs read once, start to end: the core of `deepinfer-agent scan` (views/scan_text.py prints).

The first thing an engineer runs on a log copied off a broken node. Each input is unwrapped (plain,
Docker json-file or CRI, detected per file from its first line), re-joined where the runtime split long
lines, fed to one parser per file (server given or auto-detected), and the records are summarised.
It is a report, not a check: finding problems is the normal outcome, not an error.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta, timezone, tzinfo
from typing import BinaryIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.errors import AgentError
from agent.records import Record, Server
from agent.sources.framing import PartialJoiner, unwrap
from parsers import AutoParser, Parser, make_parser


@dataclass
class FileScan:
    """What one input gave: its envelope format, the server it was read as, and its records."""

    source: str
    fmt: str
    server: Server
    lines: int = 0
    parse_errors: int = 0
    records: list[Record] = field(default_factory=list)


def parse_tz(text: str) -> tzinfo:
    """`UTC`, an offset (`+08:00`, `-0500`) or an IANA name (`Asia/Shanghai`): the zone that log lines
    without one were written in (vLLM, SGLang and syslog print local time)."""
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)", text.strip())
    if m is not None:
        sign = -1 if m.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(m.group(2)), minutes=int(m.group(3))))
    if text.strip().upper() in ("UTC", "Z"):
        return timezone.utc
    try:
        return ZoneInfo(text.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise AgentError(f"--tz {text!r}: expected UTC, an offset like +08:00, or a zone name like "
                         "Asia/Shanghai") from exc


def detect_format(first_line: str) -> str:
    """`docker`, `cri` or `plain`, from one physical line."""
    if unwrap(first_line, "docker") is not None:
        return "docker"
    if unwrap(first_line, "cri") is not None:
        return "cri"
    return "plain"


@dataclass
class Unwrapper:
    """Reads a saved log's lines out of their envelope (plain, Docker json-file or CRI, told by the first
    non-empty line), re-joining runtime-split pieces; `fmt` and `lines` say what it saw."""

    fmt: str | None = None
    lines: int = 0

    def read(self, handle: Iterable[bytes], offset: int = 0) -> Iterator[tuple[str, float | None, int]]:
        """(text, envelope time, byte offset of the line's first piece) for each logical line, the first
        read at byte `offset`."""
        joiner = PartialJoiner()
        for raw in handle:
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            line_offset = offset
            offset += len(raw)
            self.lines += 1
            if self.fmt is None:
                if not text.strip():
                    continue
                self.fmt = detect_format(text)
            frame = unwrap(text, self.fmt)
            if frame is None:  # a malformed envelope line is still a line
                yield text, None, line_offset
                continue
            whole = joiner.feed(frame, line_offset)  # a split line is located by its first piece
            if whole is not None:
                joined, start = whole
                yield joined.text, joined.ts, start
        for held, start in joiner.flush():
            yield held.text, held.ts, start


Emit = Callable[[list[Record], Server], None]  # a line's records, and the server the stream is read as


def scan_into(handle: BinaryIO, source: str, emit: Emit, server: Server = Server.AUTO,
              ref_time: float | None = None, tz: tzinfo = timezone.utc) -> FileScan:
    """Classify one byte stream, handing each line's records to `emit` as they come (nothing is kept, so
    memory stays flat whatever the size). `ref_time` (the file's mtime) gives yearless stamps their year.

    A plain file (most saved logs) is read without the envelope machinery: the format is told by the
    first non-empty line, and from then on each line goes straight to the parser."""
    parser = make_parser(server, source, ref_time, tz)
    result = FileScan(source, "plain", server)
    path = None if source == "-" else source
    lines = 0
    offset = 0
    first: bytes | None = None
    text = ""
    for raw in handle:  # blank lines before the first one that says the format are counted, not parsed
        lines += 1
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if text.strip():
            first = raw
            break
        offset += len(raw)
    if first is not None:
        result.fmt = detect_format(text)
        if result.fmt == "plain":
            count, _ = feed_plain(itertools.chain((first,), handle), parser, path, offset, emit)
            lines += count - 1
        else:
            unwrapper = Unwrapper(result.fmt)
            for text, ts, at in unwrapper.read(itertools.chain((first,), handle), offset):
                if records := parser.feed(text, ts, path, at):
                    emit(records, parser.server)
            lines += unwrapper.lines - 1
    if records := parser.flush():
        emit(records, parser.server)
    result.lines = lines
    result.server = parser.server
    result.parse_errors = parser.parse_errors
    return result


def feed_plain(raws: Iterable[bytes], parser: Parser, path: str | None, offset: int, emit: Emit,
               end: int | None = None, limit: int | None = None) -> tuple[int, int]:
    """Feed plain lines that start at byte `offset`, stopping after the line that reaches byte `end` (a
    line start) or after `limit` lines, so the caller may go on reading the same handle; return (lines
    read, offset after them)."""
    if (end is not None and offset >= end) or limit == 0:
        return 0, offset
    feed = parser.feed
    auto = parser if isinstance(parser, AutoParser) else None  # once it has settled, feed its parser directly
    count = 0
    for raw in raws:
        count += 1
        if auto is not None and (inner := auto.inner) is not None:
            feed = inner.feed
            auto = None
        records = feed(raw.decode("utf-8", errors="replace").rstrip("\r\n"), None, path, offset)
        offset += len(raw)
        if records:
            emit(records, parser.server)
        if (end is not None and offset >= end) or count == limit:
            break
    return count, offset


def scan_stream(handle: BinaryIO, source: str, server: Server = Server.AUTO, ref_time: float | None = None,
                tz: tzinfo = timezone.utc) -> FileScan:
    """Classify one byte stream and keep its records (tests and small inputs; `scan` streams with `scan_into`)."""
    kept: list[Record] = []
    result = scan_into(handle, source, lambda records, _: kept.extend(records), server, ref_time, tz)
    result.records = kept
    return result
