"""A plain file's run of whole lines handed on as the bytes read, for the daemon's compiled lane.

The tailer makes a `LogLine` per line, and under a storm most lines are ones the parser only counts
(quiet) or reads as a stats sample. When the compiled lane (parsers/_lane.c) is there, the tailer of a
plain file hands a run of whole lines on as one `RawLines` (agent/records.py) instead, in order with the
lines it delivers one by one; agent/daemon/lane.py splits it in C next to the parser, so a quiet line never
becomes a Python object. A run holds only lines `LineAssembler` would give text for text from the same
bytes: every one ends with its newline, none is over `max_line_bytes`, and all are valid UTF-8. Anything
else (an over-long line, invalid UTF-8, a line begun in an earlier read) goes through `LineAssembler` one
line at a time, as before."""

from __future__ import annotations

from collections.abc import Callable

from parsers.compiled import LANE

EmitRaw = Callable[[bytes, int, int], None]  # whole lines (bytes through the last newline), first offset, count


def raw_run(data: bytes, pos: int, last: int, base: int, room: int, max_line: int,
            emit_raw: EmitRaw) -> tuple[int, int] | None:
    """`LineAssembler._plain_run`'s contract, handing bytes on: the whole lines from `pos` up to the one ending
    at `last` (the chunk's last newline), at most `room`, stopping before a line over `max_line` bytes (which
    `LineAssembler` cuts). None when the run's bytes are not UTF-8: its lines then go one by one (to be
    counted and replaced as invalid). Returns (position after the run, lines in it)."""
    assert LANE is not None
    count, end, ascii = LANE.whole(data, pos, last + 1, room, max_line)
    part = data[pos:end]
    if not ascii:
        try:
            part.decode("utf-8")
        except UnicodeDecodeError:
            return None
    emit_raw(part, base + pos, count)
    return end, count

