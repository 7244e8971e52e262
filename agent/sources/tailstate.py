"""What a file tailer holds between polls, and how it opens a file and places its read position.

`FileTailer` (agent.sources.tailer) is built on this in two layers: `Refinder` (agent.sources.refind)
finds files again after a restart and among rotation siblings, and the tailer itself is the loop.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import secrets
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent.bookkeeping import Cursor
from agent.config import SourceSection
from agent.records import LogLine, RawLines
from agent.sources.identity import (
    COMPRESSED_SUFFIXES,
    FINGERPRINT_BYTES,
    READ_CHUNK_BYTES,
    TailedFile,
    fingerprint,
    near_fingerprint,
)
from agent.sources.lines import LineAssembler

MAX_BYTES_PER_POLL = 4 * 1024 * 1024  # shared by the open files; the rest waits for the next poll
MAX_LINES_PER_POLL = 20_000  # likewise: bounds a batch of short lines in memory and in one transaction
START_MARKER = ""  # the file_key of a source's start-marker cursor


@dataclass(frozen=True)
class TailOptions:
    """How one file source reads; `from_section` maps the config keys one to one."""

    fmt: Literal["plain", "docker", "cri"] = "plain"
    start_at: Literal["end", "beginning"] = "end"
    max_line_bytes: int = 1 << 20
    partial_flush_seconds: float = 5.0
    rotate_wait_seconds: float = 5.0
    cursor_grace_seconds: float = 86400.0

    @classmethod
    def from_section(cls, section: SourceSection) -> TailOptions:
        if section.format == "journald":
            raise ValueError("a journald source is read by agent.sources.journal, not the file tailer")
        return cls(section.format, section.start_at, section.max_line_bytes, section.partial_flush_seconds,
                   section.rotate_wait_seconds, section.cursor_grace_seconds)


@dataclass
class TailOut:
    lines: list[LogLine | RawLines] = field(default_factory=list)
    delivered: int = 0  # lines in `lines` (a `RawLines` holds several): what the poll's line budget counts
    cursors: list[Cursor] = field(default_factory=list)
    expired: list[Cursor] = field(default_factory=list)


class TailerState:
    """A tailer's files and counters, and how it opens and places files: what `FileTailer` (the
    loop) and its `Refinder` (files found again) share, so each has it rather than deriving from it."""

    def __init__(self, name: str, pattern: str, options: TailOptions, cursors: Sequence[Cursor] = (),
                 exclude: Collection[str] = ()) -> None:
        self.name = name
        self.pattern = pattern
        self.options = options
        # Files never to open (the agent's own store and its -wal/-shm: reading them would feed the
        # agent its own writes, and closing a descriptor of them drops SQLite's locks).
        self.exclude = {os.path.realpath(Path(p).expanduser()) for p in exclude}
        # A cursor with an empty file_key is the source's start marker: it records that the source has
        # run before (so files found later are read from their start) and when it last looked.
        self.restored = [c for c in cursors if c.file_key != START_MARKER]
        self.first_run = not cursors
        self.started = False
        self.files: dict[str, TailedFile] = {}
        self.retired: dict[str, tuple[Cursor, float]] = {}
        self.count: Counter[str] = Counter()
        self.up = True
        self.lag = 0
        self.failed_paths: dict[str, str] = {}  # path → why it cannot be opened
        self.drop: list[Cursor] = []  # cursors found stale at restart (their file was rewritten): delete
        self.named: set[tuple[int, int]] = set()  # identities the glob named at the last discovery
        self.down_reason = ""
        self.first_discovery = True
        self.budget = MAX_BYTES_PER_POLL  # bytes each file may read in this poll (set per poll)
        self.line_budget = MAX_LINES_PER_POLL  # and lines it may read (a batch of tiny lines stays small)
        # When the tailer last looked (the previous poll, or the newest stored cursor); None on a first run.
        self.last_now: float | None = max((c.seen_seconds for c in cursors), default=None)

    def glob(self) -> list[str]:
        """The paths the pattern names now, in a stable order, compressed rotations left out."""
        paths = glob.glob(self.pattern)  # noqa: PTH207 (an absolute user glob; Path.glob takes relative ones)
        return sorted(p for p in paths if not p.endswith(COMPRESSED_SUFFIXES))

    def own_ids(self) -> set[tuple[int, int]]:
        """(device, inode) of the agent's own store files as they are now: a hard link to one (or a copy
        of the name through a bind mount) is the same file under a name `_exclude` does not list."""
        ids = set()
        for p in self.exclude:
            with contextlib.suppress(OSError):
                st = os.stat(p)  # noqa: PTH116 (a hot path: no Path object per call)
                ids.add((st.st_dev, st.st_ino))
        return ids

    def open_at(self, path: str, now: float, key: str | None, offset: int | None) -> TailedFile | None:
        """Open `path` read-only and identify it by fstat; offset None means "at the last complete line".
        The agent's own store is never opened, under any name (closing a descriptor of it would drop
        SQLite's locks), so it is told by stat first."""
        try:
            st = os.stat(path)  # noqa: PTH116
            if (st.st_dev, st.st_ino) in self.own_ids():
                return None
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if path not in self.failed_paths:  # counted once per failure, retried every poll
                self.count["read_errors"] += 1
                if exc.errno == errno.EMFILE:
                    self.count["emfile"] += 1
            self.failed_paths[path] = exc.strerror or str(exc)
            return None
        self.failed_paths.pop(path, None)
        try:
            st = os.fstat(fd)
            start = self.last_line_end(fd, st.st_size) if offset is None else offset
            fp = fingerprint(fd, FINGERPRINT_BYTES)
        except OSError:
            os.close(fd)
            self.count["read_errors"] += 1
            return None
        f = TailedFile(fd, path, st.st_dev, st.st_ino, key or f"{st.st_dev}:{st.st_ino}:{secrets.token_hex(6)}",
                  fp, start, self.assembler(start), last_growth=now, mtime_ns=st.st_mtime_ns,
                  real=str(Path(path).resolve()))
        with contextlib.suppress(OSError):
            f.near = near_fingerprint(fd, start)
        return f

    def assembler(self, start: int) -> LineAssembler:
        return LineAssembler(self.options.fmt, self.options.max_line_bytes, self.count, start)

    def restart_at(self, f: TailedFile, offset: int) -> None:
        """Read `f` from `offset` on, forgetting any unfinished line."""
        f.read_pos = offset
        f.lines = self.assembler(offset)
        try:
            f.near = near_fingerprint(f.fd, offset)
        except OSError:
            f.near = ""

    def last_line_end(self, fd: int, size: int) -> int:
        """Where a first run starting "at the end" begins: after the last newline, not mid-line."""
        tail_start = max(0, size - READ_CHUNK_BYTES)
        tail = os.pread(fd, size - tail_start, tail_start)
        cut = tail.rfind(b"\n")
        return tail_start + cut + 1 if cut >= 0 else size

    @staticmethod
    def names_file(path: str, f: TailedFile) -> bool:
        try:
            st = Path(path).stat()
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (f.dev, f.inode)

    @staticmethod
    def size(f: TailedFile) -> int:
        try:
            return os.fstat(f.fd).st_size
        except OSError:
            return f.read_pos
