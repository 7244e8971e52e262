"""Saved logs read once, start to end: the core of `deepinfer-agent scan` (views/scan_text.py prints).

The first thing an engineer runs on a log copied off a broken node. Each input is unwrapped (plain,
Docker json-file or CRI, detected per file from its first line), re-joined where the runtime split long
lines, fed to one parser per file (server given or auto-detected), and the records are summarised.
It is a report, not a check: finding problems is the normal outcome, not an error.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta, timezone, tzinfo
from typing import BinaryIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.errors import AgentError
from agent.records import Record, Server
from agent.sources.framing import PartialJoiner, unwrap
from parsers import make_parser


@dataclass
class FileScan:
    """What one input gave: its envelope format, the server it was read as, and its records."""

    source: str
    fmt: str
    server: Server
    lines: int = 0
    parse_errors: int = 0
    records: list[Record] = field(default_factory=list)
    line_starts: array[int] = field(default_factory=lambda: array("q"))  # byte offset of each line's start

    def line_of(self, offset: int) -> int:
        """The 1-based line number of the line holding byte `offset` (what `path:LINE` shows)."""
        return max(1, bisect_right(self.line_starts, offset))


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
    starts: array[int] = field(default_factory=lambda: array("q"))  # byte offset of each physical line

    def read(self, handle: BinaryIO) -> Iterator[tuple[str, float | None, int]]:
        """(text, envelope time, byte offset of the line's first piece) for each logical line."""
        joiner = PartialJoiner()
        offset = 0
        for raw in handle:
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            line_offset = offset
            offset += len(raw)
            self.lines += 1
            self.starts.append(line_offset)
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


def scan_stream(handle: BinaryIO, source: str, server: Server = Server.AUTO, ref_time: float | None = None,
                tz: tzinfo = timezone.utc) -> FileScan:
    """Classify one byte stream. `ref_time` (the file's mtime) gives yearless stamps their year."""
    parser = make_parser(server, source, ref_time, tz)
    result = FileScan(source, "plain", server)
    path = None if source == "-" else source
    unwrapper = Unwrapper()
    for text, ts, offset in unwrapper.read(handle):
        result.records.extend(parser.feed(text, ts, path, offset))
    result.records.extend(parser.flush())
    result.fmt = unwrapper.fmt or "plain"
    result.lines = unwrapper.lines
    result.line_starts = unwrapper.starts
    result.server = parser.server
    result.parse_errors = parser.parse_errors
    return result
