"""Unwrap container-runtime envelopes: Docker json-file, Kubernetes CRI, or plain text. Pure functions.

Runtimes split long lines: Docker's json-file driver writes a 16 KiB piece per entry whose `log` does
not end in a newline until the last one; CRI marks pieces `P` and the last one `F`. `PartialJoiner`
re-joins them per stream, bounded by a maximum length so a runaway line cannot take the memory.
The envelope's timestamp becomes the line's timestamp (epoch seconds, UTC).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone

_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$"
)
_CRI = re.compile(r"(\S+) (stdout|stderr) ([PF])(?: (.*))?$", re.DOTALL)


@dataclass(frozen=True)
class Frame:
    """One log line freed of its envelope; `partial` means the runtime split it and more follows."""

    text: str
    stream: str | None = None
    ts: float | None = None
    partial: bool = False
    truncated: bool = False


_new_object = object.__new__
# `plain_frame` fills every field of Frame by name: tests/unit/test_record_layouts.py holds the list.


def plain_frame(text: str) -> Frame:
    """`Frame(text)` without the frozen dataclass's `object.__setattr__` per field (one per plain line read)."""
    frame: Frame = _new_object(Frame)
    frame.__dict__.update(text=text, stream=None, ts=None, partial=False, truncated=False)
    return frame


def parse_rfc3339(text: str) -> float | None:
    """RFC 3339 with up to nanosecond fractions (Python's own parser stops at microseconds)."""
    m = _RFC3339.match(text.strip())
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    fraction = float(f"0.{m.group(7)}") if m.group(7) else 0.0
    zone = m.group(8)
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
    except ValueError:
        return None
    offset = 0
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return moment.timestamp() - offset + fraction


def unwrap_docker(raw: str) -> Frame | None:
    """A Docker json-file entry, or None when the line is not one."""
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("log"), str):
        return None
    log: str = entry["log"]
    stream = entry.get("stream") if isinstance(entry.get("stream"), str) else None
    ts = parse_rfc3339(entry["time"]) if isinstance(entry.get("time"), str) else None
    if log.endswith("\n"):
        return Frame(log[:-1].removesuffix("\r"), stream, ts, partial=False)
    return Frame(log, stream, ts, partial=True)


def unwrap_cri(raw: str) -> Frame | None:
    """A CRI log line (`<RFC3339Nano> <stream> <P|F> <message>`), or None when the line is not one."""
    m = _CRI.match(raw)
    if not m:
        return None
    ts = parse_rfc3339(m.group(1))
    if ts is None:
        return None
    return Frame(m.group(4) or "", m.group(2), ts, partial=m.group(3) == "P")


def unwrap(raw: str, fmt: str) -> Frame | None:
    """Unwrap one physical line (without its newline) of format plain, docker or cri; None if malformed."""
    if fmt == "docker":
        return unwrap_docker(raw)
    if fmt == "cri":
        return unwrap_cri(raw)
    return Frame(raw)


class PartialJoiner:
    """Re-joins runtime-split pieces per stream; a line longer than `max_chars` is cut and flagged.

    Each piece comes with the byte offset it started at; a joined line carries the offset of its first
    piece, and `held_offset` tells the tailer where the earliest unfinished line began, so its cursor
    never moves past bytes that have not been delivered yet. Only `stdout`, `stderr` and no-stream are
    kept apart, so a hostile `stream` value cannot grow the table.
    """

    def __init__(self, max_chars: int = 1 << 20) -> None:
        self._max = max_chars
        self._pending: dict[str | None, tuple[Frame, int]] = {}

    def feed(self, frame: Frame, offset: int = 0) -> tuple[Frame, int] | None:
        """Give one frame and where it started; get back (complete line, its offset), or None while partial."""
        key = frame.stream if frame.stream in ("stdout", "stderr") else None
        held = self._pending.pop(key, None)
        if held is not None:
            first, offset = held
            room = self._max - len(first.text)
            text = first.text + frame.text[:max(room, 0)]
            frame = Frame(text, frame.stream, first.ts, frame.partial,
                          first.truncated or frame.truncated or len(frame.text) > room)
        elif len(frame.text) > self._max:
            frame = Frame(frame.text[: self._max], frame.stream, frame.ts, frame.partial, True)
        if frame.partial:
            self._pending[key] = (frame, offset)
            return None
        return frame, offset

    def held_offset(self) -> int | None:
        """Where the earliest held (unfinished) line began, None when nothing is held."""
        return min((offset for _, offset in self._pending.values()), default=None)

    def flush(self) -> list[tuple[Frame, int]]:
        """Whatever is held (at shutdown or after a quiet time), as complete lines in file order."""
        held = sorted(((Frame(f.text, f.stream, f.ts, False, f.truncated), o) for f, o in self._pending.values()),
                      key=lambda item: item[1])
        self._pending.clear()
        return held
