"""Saved logs read once, start to end: the core of `deepinfer-agent scan` (views/scan_text.py prints).

The first thing an engineer runs on a log copied off a broken node. Each input is unwrapped (plain,
Docker json-file or CRI, detected per file from its first line), re-joined where the runtime split long
lines, fed to one parser per file (server given or auto-detected), and the records are summarised.
It is a report, not a check: finding problems is the normal outcome, not an error.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta, timezone, tzinfo
from typing import BinaryIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.errors import AgentError
from agent.offline import plain_lane
from agent.records import Event, Record, RequestSample, Server, ServerStats, event_with
from agent.sources.bounded import MAX_LINE_BYTES
from agent.sources.framing import PartialJoiner, unwrap
from parsers import Parser, make_parser


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
    at: int = 0  # byte offset of the last physical line read
    end: int = 0  # byte offset after the last line, once all are read

    def read(self, handle: Iterable[bytes], offset: int = 0) -> Iterator[tuple[str, float | None, int]]:
        """(text, envelope time, byte offset of the line's first piece) for each logical line, the first
        read at byte `offset`."""
        joiner = PartialJoiner()
        for raw in handle:
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            line_offset = self.at = offset
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
        self.end = offset
        for held, start in joiner.flush():
            yield held.text, held.ts, start


Emit = Callable[[list[Record], Server], None]  # a line's records, and the server the stream is read as
Newlines = Callable[[int, int], int | None]  # newlines in the file's bytes [a, b); None when they cannot be read again


class RecentLineStarts:
    """The lines of a stream that cannot be read again (a pipe): the starts of the last `keep` are noted, so
    `newlines` can count back over them (the one case where a line costs more than a count)."""

    def __init__(self, raws: Iterable[bytes], keep: int = 1 << 14) -> None:
        self._raws = raws
        self._starts: deque[int] = deque(maxlen=keep)

    def __iter__(self) -> Iterator[bytes]:
        at = 0
        note = self._starts.append
        raw = b""
        for raw in self._raws:
            note(at)
            at += len(raw)
            yield raw
        if raw.endswith(b"\n"):
            note(at)  # so the newline that ends the input counts

    def newlines(self, a: int, b: int) -> int | None:
        starts = self._starts
        if not starts or a < starts[0]:
            return None  # further back than noted
        noted = list(starts)
        return bisect.bisect_right(noted, b) - bisect.bisect_right(noted, a)


def file_newlines(handle: BinaryIO) -> Newlines | None:
    """`Newlines` of a file handle read again by position (None for a pipe: its bytes are gone)."""
    try:
        fd = handle.fileno()
        seekable = handle.seekable()
    except (OSError, ValueError, AttributeError):
        seekable = False
    if not seekable:
        return None

    def count(a: int, b: int) -> int | None:
        n = 0
        while a < b:
            block = os.pread(fd, min(b - a, 1 << 20), a)
            if not block:
                break
            n += block.count(b"\n")
            a += len(block)
        return n
    return count


def stamp(records: list[Record], pos: int, before: int, newlines: Newlines) -> list[Record]:
    """The records with their 1-based `line`: `before` newlines precede byte `pos` (the start of the line just
    read, or the end of the input); a record that starts earlier (a traceback, a joined Docker line) is
    counted back from there by reading its bytes again — only for those, so no line costs more than a count."""
    out: list[Record] = []
    for r in records:
        cls = r.__class__
        if (cls is ServerStats or cls is Event or cls is RequestSample) and r.offset is not None:  # type: ignore[union-attr]
            at: int = r.offset  # type: ignore[union-attr]
            back = 0 if at == pos else newlines(at, pos)
            line = None if back is None else before + 1 - back
            r = event_with(r, line=line) if cls is Event else r._replace(line=line)  # type: ignore[union-attr, arg-type]
        out.append(r)
    return out


def located(records: list[Record], offsets: list[int], first_line: int, newlines: Newlines) -> list[Record]:
    """The records of a batch of lines (each at its offset, the first numbered `first_line`) with their 1-based
    `line`, where the parser did not give it: a record that starts in the batch is numbered by its place there,
    one that starts earlier (a traceback, lines held until the server was recognised) is counted back from the
    batch's first line by reading its bytes again, so no line costs more than a look-up."""
    start = offsets[0]
    out: list[Record] = []
    for r in records:
        cls = r.__class__
        if (cls is ServerStats or cls is Event or cls is RequestSample) and (
                r.offset is not None and r.line is None):  # type: ignore[union-attr]
            at: int = r.offset  # type: ignore[union-attr]
            if at >= start:
                line: int | None = first_line + bisect.bisect_right(offsets, at) - 1
            else:
                back = newlines(at, start)
                line = None if back is None else first_line - back
            r = event_with(r, line=line) if cls is Event else r._replace(line=line)  # type: ignore[union-attr, arg-type]
        out.append(r)
    return out


def ended_before(newlines: Newlines, end: int, lines: int) -> int:
    """Newlines before byte `end` (the end of the input) after `lines` physical lines: one fewer when the
    last line has none."""
    if lines and newlines(end - 1, end) == 0:
        return lines - 1
    return lines


def scan_into(handle: BinaryIO, source: str, emit: Emit, server: Server = Server.AUTO,
              ref_time: float | None = None, tz: tzinfo = timezone.utc) -> FileScan:
    """Classify one byte stream, handing each line's records to `emit` as they come (nothing is kept, so
    memory stays flat whatever the size). `ref_time` (the file's mtime) gives yearless stamps their year.

    A plain file (most saved logs) is read without the envelope machinery: the format is told by the
    first non-empty line, and from then on each line goes straight to the parser."""
    parser = make_parser(server, source, ref_time, tz)
    result = FileScan(source, "plain", server)
    path = None if source == "-" else source
    newlines = file_newlines(handle)
    raws: Iterator[bytes] = iter(handle)
    if newlines is None:
        starts = RecentLineStarts(handle)
        raws, newlines = iter(starts), starts.newlines
    lines = 0
    offset = 0
    first: bytes | None = None
    text = ""
    for raw in raws:  # blank lines before the first one that says the format are counted, not parsed
        lines += 1
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if text.strip():
            first = raw
            break
        offset += len(raw)
    if first is not None:
        result.fmt = detect_format(text)
        if result.fmt == "plain":
            count, offset = feed_plain(raws, parser, path, offset, emit, line=lines, newlines=newlines,
                                       first=first)
            lines += count - 1
        else:
            unwrapper = Unwrapper(result.fmt)
            base = lines - 1  # physical lines before the first one
            for text, ts, at in unwrapper.read(itertools.chain((first,), raws), offset):
                if records := parser.feed(text, ts, path, at):  # located from the physical line just read
                    emit(stamp(records, unwrapper.at, base + unwrapper.lines - 1, newlines), parser.server)
            lines += unwrapper.lines - 1
            offset = unwrapper.end
    if records := parser.flush():
        emit(stamp(records, offset, ended_before(newlines, offset, lines), newlines), parser.server)
    result.lines = lines
    result.server = parser.server
    result.parse_errors = parser.parse_errors
    return result


BATCH_BYTES = 1 << 16  # a plain file is read in batches of lines of about this many bytes (one `readlines`)
BATCH_LINES = 512  # or of this many lines, from a source that is not a file (a pipe's lines)


def _batches(raws: Iterable[bytes]) -> Iterator[list[bytes]]:
    readlines = getattr(raws, "readlines", None)
    if readlines is not None:
        while batch := readlines(BATCH_BYTES):
            yield batch
        return
    lines = iter(raws)
    while batch := list(itertools.islice(lines, BATCH_LINES)):
        yield batch


def feed_plain(raws: Iterable[bytes], parser: Parser, path: str | None, offset: int, emit: Emit,
               end: int | None = None, limit: int | None = None, line: int = 1,
               newlines: Newlines | None = None, first: bytes | None = None) -> tuple[int, int]:
    """Feed plain lines (`first`, then those of `raws`) that start at byte `offset` (the first is line number
    `line` of the file), stopping after the line that reaches byte `end` (a line start) or after `limit`
    lines; return (lines read, offset after them). A file is read in batches, and when it stops inside one
    the file is put back at the first line not read, so the caller may go on reading it. Records get their
    `line` (`stamp`; `newlines` counts back for those that start before the line just read)."""
    if (end is not None and offset >= end) or limit == 0:
        return 0, offset
    newlines = newlines or no_newlines
    if plain_lane.usable(raws):  # the compiled lane: the same lines, quiet ones only counted
        return plain_lane.feed_plain(raws, parser, path, offset, emit, end, limit, line,
                                     functools.partial(located, newlines=newlines), first)
    feed_batch = parser.feed_batch
    # A line over MAX_LINE_BYTES comes in pieces (bounded.py), each the last of its batch: pieces that end
    # without a newline are not lines of their own, so they do not move the count of lines.
    cut = getattr(raws, "cut", 0) - (first is not None and len(first) == MAX_LINE_BYTES and first[-1:] != b"\n")
    count = 0
    batches = _batches(raws)
    for batch in itertools.chain(([first],), batches) if first is not None else batches:
        take = len(batch) if limit is None else min(len(batch), limit - count)
        part = batch if take == len(batch) else batch[:take]
        if end is not None:  # through the line that reaches `end`
            ends = list(itertools.accumulate(map(len, part), initial=offset))
            take = min(take, bisect.bisect_left(ends, end, 1))
            part = part[:take]
        offsets = list(itertools.accumulate(map(len, part), initial=offset))
        offsets.pop()  # the offset after the batch
        texts = [raw.decode("utf-8", "replace").rstrip("\r\n") for raw in part]
        if texts and (records := feed_batch(texts, offsets, path, line + count)):
            emit(located(records, offsets, line + count, newlines), parser.server)
        count += take
        if (pieces := getattr(raws, "cut", 0) - cut) and take == len(batch):
            count -= pieces
            cut += pieces
        offset += sum(map(len, part))
        if take < len(batch):
            raws.seek(offset)  # type: ignore[attr-defined]  # only a file is read with `end` or `limit`
            break
        if (end is not None and offset >= end) or count == limit:
            break
    return count, offset


def no_newlines(a: int, b: int) -> int | None:
    return None


def scan_stream(handle: BinaryIO, source: str, server: Server = Server.AUTO, ref_time: float | None = None,
                tz: tzinfo = timezone.utc) -> FileScan:
    """Classify one byte stream and keep its records (tests and small inputs; `scan` streams with `scan_into`)."""
    kept: list[Record] = []
    result = scan_into(handle, source, lambda records, _: kept.extend(records), server, ref_time, tz)
    result.records = kept
    return result
