"""Turn the bytes of one file into complete log lines, in bounded memory.

Separate from the tailer because it is the part that must hold under hostile input, whatever the files
do: a line is split at `\\n` (a `\\r` before it is dropped), decoded as UTF-8 (invalid bytes replaced and
counted), freed of its envelope (Docker json-file, CRI) and re-joined where the runtime split it. At most
`max_line_bytes` of an unfinished line are kept; the rest of an over-long line is dropped and the line
is flagged `truncated`. `committed` tells the tailer the first byte not yet delivered as part of a line,
which is where its cursor may point.
"""

from __future__ import annotations

import codecs
import itertools
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Literal

from agent.sources.framing import Frame, PartialJoiner, plain_frame, unwrap
from agent.sources.rawlines import EmitRaw, raw_run

Emit = Callable[[Frame, int], None]  # a complete line and the file offset of its first byte
EmitPlain = Callable[[list[str], list[int]], None]  # plain lines (texts, the offset of each): a run at once
Run = Callable[[bytes, int, int, int, int], tuple[int, int] | None]  # `_plain_run` with its emitter bound


class LineAssembler:
    """Assembles lines from consecutive byte chunks of one file starting at offset `start`."""

    def __init__(self, fmt: Literal["plain", "docker", "cri"], max_line_bytes: int, counts: Counter[str],
                 start: int = 0) -> None:
        self._fmt = fmt
        self._max = max_line_bytes
        self._counts = counts  # the source's counters: invalid_utf8, framing_errors
        self._joiner = PartialJoiner(max_line_bytes)
        self._buf = bytearray()  # the unfinished physical line, at most max_line_bytes
        self._buf_start = start  # file offset of its first byte
        self._dropping = False  # the unfinished line is over the maximum: its further bytes are dropped

    def feed(self, data: bytes, base: int, emit: Emit, limit: int, emit_plain: EmitPlain | None = None,
             emit_raw: EmitRaw | None = None) -> int:
        """Consume bytes read at file offset `base`, assembling at most `limit` lines (the caller's line
        budget); return how many bytes were consumed, which is fewer than `len(data)` only when the limit
        was reached after a complete line. `emit_plain`, when given, takes a plain file's runs of whole
        lines in one call each (see `_plain_run`); `emit_raw`, when given instead, takes them as the bytes
        read (for the compiled lane: agent/sources/rawlines.py); `emit` takes every other line."""
        pos = 0
        done = 0
        runs: Run | None = None
        if emit_raw is not None:
            runs = partial(raw_run, max_line=self._max, emit_raw=emit_raw)
        elif emit_plain is not None:
            runs = partial(self._plain_run, emit_plain)
        runs_from = 0 if self._fmt == "plain" else len(data)  # where a run of whole lines may start
        while pos < len(data) and done < limit:
            newline = data.find(b"\n", pos)
            if newline >= 0 and not self._buf and not self._dropping and newline - pos <= self._max:
                if runs is not None and pos >= runs_from:
                    last = data.rfind(b"\n", newline)
                    run = runs(data, pos, last, base, limit - done)
                    if run is not None:
                        pos, count = run
                        done += count
                        self._buf_start = base + pos
                        continue
                    runs_from = last + 1  # its lines go one by one, and a run may start after them
                # a whole line inside this chunk with nothing held: no copy into the buffer
                self._line(data[pos:newline], self._buf_start, False, emit)
                done += 1
                pos = newline + 1
                self._buf_start = base + pos
                continue
            end = len(data) if newline < 0 else newline
            if not self._dropping:
                room = self._max - len(self._buf)
                self._buf += data[pos:pos + min(room, end - pos)]
                self._dropping = end - pos > room
            if newline < 0:
                return len(data)
            self._line(bytes(self._buf), self._buf_start, self._dropping, emit)
            self._buf.clear()
            self._dropping = False
            done += 1
            pos = newline + 1
            self._buf_start = base + pos
        return pos

    def _plain_run(self, emit_plain: EmitPlain, data: bytes, pos: int, last: int, base: int,
                   room: int) -> tuple[int, int] | None:
        """The whole lines of a plain file from `pos` to the chunk's last newline (at `last`), at most `room`
        of them, split and decoded in one call each and handed over at once: the same texts and offsets as
        `_line` one by one, without its calls per line (a busy log is thousands of lines a second). None
        when the run holds what only `_line` handles — a line over the maximum, invalid UTF-8 — and then
        every line of it goes that way. Returns (position after the run, lines in it)."""
        part = data[pos:last]
        raws = part.split(b"\n")
        if len(raws) > room:
            raws = raws[:room]
            part = b"\n".join(raws)
        if max(map(len, raws)) > self._max:
            return None
        try:
            texts = part.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            return None
        if b"\r" in part:
            texts = [text.removesuffix("\r") for text in texts]
        offsets = list(itertools.accumulate(map((1).__add__, map(len, raws)), initial=base + pos))
        offsets.pop()  # the offset after the run
        emit_plain(texts, offsets)
        return pos + len(part) + 1, len(raws)

    def committed(self, read_pos: int) -> int:
        """The first byte not yet delivered as part of a line, given that bytes up to `read_pos` were fed."""
        start = self._buf_start if (self._buf or self._dropping) else read_pos
        held = self._joiner.held_offset()
        return start if held is None else min(held, start)

    def holding(self) -> bool:
        """Whether an unfinished line (or runtime-split piece) is held."""
        return bool(self._buf) or self._dropping or self._joiner.held_offset() is not None

    def flush(self, read_pos: int, emit: Emit) -> None:
        """Deliver what is held as complete lines (quiet for long enough, finished file, shutdown)."""
        if self._buf or self._dropping:
            self._line(bytes(self._buf), self._buf_start, self._dropping, emit)
            self._buf.clear()
            self._dropping = False
        self._buf_start = read_pos
        for frame, offset in self._joiner.flush():
            emit(frame, offset)

    def _line(self, raw: bytes, offset: int, cut: bool, emit: Emit) -> None:
        if not cut:
            raw = raw.removesuffix(b"\r")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            # A cut line may end inside a character: drop that stub rather than count it as invalid.
            text = codecs.getincrementaldecoder("utf-8")("replace").decode(raw, final=not cut)
            if "\ufffd" in text:
                self._counts["invalid_utf8"] += 1
        if self._fmt == "plain":  # nothing to unwrap or re-join: a plain line is never split by a runtime
            emit(Frame(text, truncated=True) if cut else plain_frame(text), offset)
            return
        frame = unwrap(text, self._fmt)
        if frame is None:
            self._counts["framing_errors"] += 1
            frame = Frame(text)
        if cut:
            frame = Frame(frame.text, frame.stream, frame.ts, frame.partial, True)
        joined = self._joiner.feed(frame, offset)
        if joined is not None:
            emit(*joined)
