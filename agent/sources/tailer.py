"""Follow the files a glob names, through every kind of rotation, delivering each line exactly once.

A file is known by (device, inode) from `os.fstat` on the open handle plus a fingerprint of its first
bytes, never by its name: names move under rotation, and inodes are reused. Each incarnation of a file
gets a `file_key`; lines carry (file_key, offset) and cursors carry the offset of the first byte not yet
delivered, and the caller commits both in one transaction (`Store.commit`), so a crash at any instant
neither loses nor repeats a line.

Rotation, in the order the loop meets it on each `poll(now)`:
- every open file is read to EOF first (bounded per poll), so a renamed file is drained before its
  successor is read, and a renamed file stays open and is read for `rotate_wait_seconds` after its last
  growth (a writer that keeps its handle may still append to it);
- a file whose size fell below our position, or whose first bytes changed, was truncated
  (copytruncate): its unread tail is taken from the copy (same first bytes, another inode) and the file
  is read again from 0 as a new incarnation;
- a path that now names another inode (rename + create, create-from-temp, delete + recreate, symlink
  swap) makes the old file "draining" and the new one is read from its start.
After a restart, stored cursors are matched to files by inode in their directory (a file renamed while
the agent was down is found and finished), and rotated siblings written while it was down are read too.

The loop never sleeps: `poll(now)` does one bounded step, and the caller waits (inotify or a timer).
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import fnmatch
import glob
import gzip
import hashlib
import io
import logging
import lzma
import os
import re
import secrets
import stat
import zlib
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent.config import SourceSection
from agent.records import Cursor, LogLine, SourceBatch, SourceStats
from agent.sources.framing import Frame
from agent.sources.lines import LineAssembler

log = logging.getLogger("deepinfer.tailer")

FINGERPRINT_BYTES = 128
NEAR_BYTES = 64  # the bytes before a cursor that must still be there when it is resumed
READ_CHUNK_BYTES = 64 * 1024
MAX_BYTES_PER_POLL = 4 * 1024 * 1024  # shared by the open files; the rest waits for the next poll
MAX_LINES_PER_POLL = 20_000  # likewise: bounds a batch of short lines in memory and in one transaction
START_MARKER = ""  # the file_key of a source's start-marker cursor
COMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2", ".zst", ".lz4", ".zip")
# The compressions a rotated file may be finished from (logrotate `compress` without `delaycompress`).
DECOMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2")


def _open_compressed(path: str, suffix: str) -> io.BufferedIOBase:
    if suffix == ".gz":
        return gzip.GzipFile(path, "rb")
    return lzma.LZMAFile(path, "rb") if suffix == ".xz" else bz2.BZ2File(path, "rb")
# A rotation suffix: `.1`, `-20250101`, `.2025-01-01`, `-1701234567`, optionally compressed.
_ROTATION_SUFFIX = re.compile(r"(?:[.-]\d[\w-]*)+(?:\.(?:gz|xz|bz2|zst|lz4|zip))?$")


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


def fingerprint(fd: int, length: int) -> str:
    """`"<n>:<hash>"` of the first n ≤ `length` bytes readable through `fd` (n is what the file holds)."""
    head = os.pread(fd, length, 0)
    return f"{len(head)}:{hashlib.blake2b(head, digest_size=8).hexdigest()}"


def _fingerprint_length(stored: str) -> int:
    return int(stored.split(":", 1)[0])


def _fingerprint_matches(fd: int, stored: str) -> bool:
    """Whether the file behind `fd` starts with the bytes `stored` was taken from."""
    return fingerprint(fd, _fingerprint_length(stored)) == stored


def near_fingerprint(fd: int, offset: int) -> str:
    """`"<n>:<hash>"` of the n ≤ NEAR_BYTES bytes before `offset` ("" at offset 0)."""
    start = max(0, offset - NEAR_BYTES)
    if offset <= 0:
        return ""
    return _near_hash(os.pread(fd, offset - start, start), offset)


def _near_hash(data: bytes, offset: int) -> str:
    """near_fingerprint of `data`, the bytes just before `offset`."""
    return f"{len(data)}:{hashlib.blake2b(data, digest_size=8).hexdigest()}" if offset > 0 else ""


def _near_matches(fd: int, offset: int, stored: str) -> bool:
    """Whether the bytes before `offset` are still those `stored` was taken from (True when unknown)."""
    return not stored or near_fingerprint(fd, offset) == stored


def rotation_base(name: str) -> str:
    """The live name a rotated file was shifted from: `vllm.log.2.gz` → `vllm.log`."""
    base = _ROTATION_SUFFIX.sub("", name)
    return base or name


@dataclass
class _File:
    """One open file incarnation and the line being assembled from it."""

    fd: int
    path: str
    dev: int
    inode: int
    key: str
    fp: str
    read_pos: int  # next byte to read
    lines: LineAssembler
    last_growth: float = 0.0
    rotated_at: float | None = None  # set once the path no longer names this file: drain, then close
    emitted: tuple[int, str] | None = None  # (offset, fingerprint) of the last cursor handed out
    mtime_ns: int = 0  # as of the last poll, to notice a file that changed without growing
    real: str = ""  # the resolved path at open time: where a restart looks for it (symlink targets too)
    near: str = ""  # near_fingerprint at read_pos: bytes rewritten in place before it mean truncation

    def committed(self) -> int:
        """The first byte not yet delivered as part of a line: where a restart must resume."""
        return self.lines.committed(self.read_pos)


class FileTailer:
    """Follows one glob; `poll(now)` returns a `SourceBatch` to commit, `stats()` the self-metrics.

    `cursors` are the source's stored cursors (`Store.cursors(name)`); with none, this is the source's
    first run and files already present start at `options.start_at`. Every file found later, and every
    file found after a restart, is read from its beginning.
    """

    def __init__(self, name: str, pattern: str, options: TailOptions, cursors: Sequence[Cursor] = (),
                 exclude: Collection[str] = ()) -> None:
        self.name = name
        self.pattern = pattern
        self.options = options
        # Files never to open (the agent's own store and its -wal/-shm: reading them would feed the
        # agent its own writes, and closing a descriptor of them drops SQLite's locks).
        self._exclude = {os.path.realpath(Path(p).expanduser()) for p in exclude}
        # A cursor with an empty file_key is the source's start marker: it records that the source has
        # run before (so files found later are read from their start) and when it last looked.
        self._restored = [c for c in cursors if c.file_key != START_MARKER]
        self._first_run = not cursors
        self._started = False
        self._open: dict[str, _File] = {}
        self._retired: dict[str, tuple[Cursor, float]] = {}
        self._count: Counter[str] = Counter()
        self._up = True
        self._lag = 0
        self._failed_paths: dict[str, str] = {}  # path → why it cannot be opened
        self._drop: list[Cursor] = []  # cursors found stale at restart (their file was rewritten): delete
        self._named: set[tuple[int, int]] = set()  # identities the glob named at the last discovery
        self._down_reason = ""
        self._first_discovery = True
        self._budget = MAX_BYTES_PER_POLL  # bytes each file may read in this poll (set per poll)
        self._line_budget = MAX_LINES_PER_POLL  # and lines it may deliver (a batch of tiny lines stays small)
        # When the tailer last looked (the previous poll, or the newest stored cursor); None on a first run.
        self._last_now: float | None = max((c.seen_seconds for c in cursors), default=None)

    @classmethod
    def from_section(cls, section: SourceSection, cursors: Sequence[Cursor] = (),
                     exclude: Collection[str] = ()) -> FileTailer:
        """The tailer for one `sources:` entry (not journald), resumed from `Store.cursors(name)`."""
        if section.path is None:
            raise ValueError("a file source needs a path")
        return cls(section.source_name(), str(Path(section.path).expanduser()), TailOptions.from_section(section),
                   cursors, exclude)

    # --- the loop -------------------------------------------------------------------------------------

    def poll(self, now: float) -> SourceBatch:
        """One bounded step: read what is new, follow rotations, expire old cursors. Never sleeps or raises
        on I/O errors (they are counted and retried).

        `now` is wall-clock epoch seconds (`time.time()`): besides timing partial-line flushes and rotate
        waits, it is stored in cursors and compared with file modification times after a restart.
        """
        out = _Out()
        if not self._started:
            self._started = True
            self._restore(now)
            if self._first_run:
                out.cursors.append(Cursor(self.name, self.pattern, 0, 0, "0:", 0, START_MARKER, now))
        more = False
        share = max(1, len(self._open))
        self._budget = max(READ_CHUNK_BYTES, MAX_BYTES_PER_POLL // share)
        self._line_budget = max(100, MAX_LINES_PER_POLL // share)
        out.expired.extend(self._drop)
        self._drop.clear()
        for f in list(self._open.values()):
            more |= self._service(f, now, out)
        more |= self._discover(now, out)
        self._expire(now, out)
        self._lag = sum(self._size(f) - f.read_pos for f in self._open.values())
        for f in self._open.values():
            self._cursor(f, now, out)
        self._last_now = now
        return SourceBatch(tuple(out.lines), tuple(out.cursors), tuple(out.expired), more)

    def close(self, now: float) -> SourceBatch:
        """Flush held partial lines (shutdown) and close every file; commit the returned batch."""
        out = _Out()
        for f in list(self._open.values()):
            self._flush(f, out)
            self._cursor(f, now, out)
            os.close(f.fd)
        self._open.clear()
        return SourceBatch(tuple(out.lines), tuple(out.cursors))

    def stats(self) -> SourceStats:
        """The self-metrics snapshot the metrics module exports (`deepinfer_source_*`)."""
        c = self._count
        return SourceStats(self.name, self._up, len(self._open), c["lines"], c["bytes"], c["rotations"],
                           c["truncations"], c["read_errors"], c["partial_flushes"], c["invalid_utf8"],
                           c["truncated_lines"], c["framing_errors"], 0, self._lag, self._down_reason,
                           c["emfile"])

    def watch_dirs(self) -> set[str]:
        """Directories whose changes should wake the loop: the glob's fixed part and every open file's."""
        fixed = Path(self.pattern)
        while glob.has_magic(str(fixed)):
            fixed = fixed.parent
        dirs = {fixed if fixed.is_dir() else fixed.parent}
        for f in self._open.values():
            dirs.add(Path(f.path).parent)
            dirs.add(Path(f.path).resolve().parent)
        return {str(d) for d in dirs if d.is_dir()}

    # --- finding files ------------------------------------------------------------------------------------

    def _restore(self, now: float) -> None:
        """Reattach stored cursors to files (by inode, wherever they were renamed) and read what was
        rotated while the agent was down."""
        live: dict[tuple[int, int], str] = {}
        for path in self._glob():
            with contextlib.suppress(OSError):
                st = Path(path).stat()
                live.setdefault((st.st_dev, st.st_ino), path)
        # Where a file may have gone since its cursor was written: any glob match, and any rotation of a
        # watched name (logrotate may have shifted `x.log.1` to `x.log.2` while the agent was down).
        family: dict[tuple[int, int], str] = {}
        for name in {*live.values(), *(self._watched_name(c.path) for c in self._restored)}:
            for entry in _rotated_siblings(name):
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    family.setdefault((st.st_dev, st.st_ino), entry.path)
        # The surest identities first: a long fingerprint cannot be mistaken for a reused inode.
        for cursor in sorted(self._restored, key=lambda c: -_fingerprint_length(c.fingerprint)):
            f = self._reattach(cursor, live, family, now)
            if f is None:
                self._retired[cursor.file_key] = (cursor, now)
        for path in {self._watched_name(c.path) for c in self._restored}:
            self._catch_up(path, now)

    def _watched_name(self, path: str) -> str:
        """The name the glob watches that `path` is, or was rotated from (`x.log.2` → `x.log`)."""
        if fnmatch.fnmatchcase(path, self.pattern):
            return path
        return str(Path(path).with_name(rotation_base(Path(path).name)))

    def _reattach(self, cursor: Cursor, live: dict[tuple[int, int], str], family: dict[tuple[int, int], str],
                  now: float) -> _File | None:
        candidates = [cursor.path]
        if _fingerprint_length(cursor.fingerprint) > 0:  # an empty file's inode may be anyone's now
            ident = (cursor.dev, cursor.inode)
            candidates += [p for p in (live.get(ident), family.get(ident)) if p is not None and p != cursor.path]
        for path in candidates:
            f = self._open_at(path, now, key=cursor.file_key, offset=cursor.offset)
            if f is None:
                continue
            if (f.dev, f.inode) != (cursor.dev, cursor.inode) or f.key in self._open:
                os.close(f.fd)
                continue
            if not _fingerprint_matches(f.fd, cursor.fingerprint):
                # Same inode, other first bytes: truncated and rewritten (or the inode was reused).
                os.close(f.fd)
                return self._recover_from_copy(cursor, now) or self._recover_compressed(cursor, now)
            if self._size(f) >= cursor.offset and not _near_matches(f.fd, cursor.offset, cursor.near):
                # Same first bytes, other bytes before the cursor: truncated in place and written again
                # past the cursor while the agent was down. Finish the old bytes from a copy if one was
                # made (copytruncate), and read this file again from its start as a new incarnation.
                self._count["truncations"] += 1
                self._drop.append(cursor)
                self._recover_from_copy(cursor, now)
                f.key = f"{f.dev}:{f.inode}:{secrets.token_hex(6)}"
                self._restart_at(f, 0)
                f.fp = fingerprint(f.fd, FINGERPRINT_BYTES)
                if (f.dev, f.inode) in live:
                    f.path = live[(f.dev, f.inode)]
                self._open[f.key] = f
                return f
            f.fp, f.emitted = cursor.fingerprint, (cursor.offset, cursor.fingerprint)
            f.near = cursor.near
            if (f.dev, f.inode) in live:
                f.path = live[(f.dev, f.inode)]  # the name the glob knows it by (a symlink, say)
            else:  # renamed, replaced or unlinked from the glob while the agent was down
                f.rotated_at = now
                self._count["rotations"] += 1
            self._open[f.key] = f
            return f
        return self._recover_from_copy(cursor, now) or self._recover_compressed(cursor, now)

    def _catch_up(self, live_path: str, now: float) -> None:
        """Read rotated siblings of `live_path` (`x.log.1`, `x.log-20250101`) that the tailer never saw:
        written and rotated away between two polls, or while the agent was down.

        Only files modified since the previous poll (or the last stored cursor) qualify, so old rotated
        files whose cursors have expired are not read again.
        """
        if self._last_now is None:
            return
        known = {(f.dev, f.inode) for f in self._open.values()}
        for entry in _rotated_siblings(live_path):
            try:
                st = entry.stat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in known or st.st_mtime < self._last_now - 1.0:
                continue
            f = self._open_at(entry.path, now, key=None, offset=0)
            if f is None:
                continue
            if any(_same_start(f, o) for o in self._open.values()):
                os.close(f.fd)  # a copy of a file still being read: truncation recovery will drain it
                continue
            # An empty fingerprint identifies nothing (the inode may have been reused by a copy).
            finished = next((c for c, _ in self._retired.values() if (c.dev, c.inode) == (f.dev, f.inode)
                             and _fingerprint_length(c.fingerprint) > 0
                             and _fingerprint_matches(f.fd, c.fingerprint)), None)
            copy_of = next((c for c, _ in self._retired.values() if _same_start(f, c)), None)
            if finished is not None and finished.file_key in self._open:
                os.close(f.fd)  # its bytes are being read through another name already
                continue
            if finished is not None:  # a file read before: resume it (it may have grown since)
                del self._retired[finished.file_key]
                f.key, f.fp, f.emitted = finished.file_key, finished.fingerprint, None
                self._restart_at(f, finished.offset)
            elif copy_of is not None:  # a copytruncate copy of bytes already read: start where they ended
                self._restart_at(f, min(copy_of.offset, self._size(f)))
            f.rotated_at = now
            self._open[f.key] = f
            known.add((f.dev, f.inode))
            if finished is None:
                self._count["rotations"] += 1

    def _discover(self, now: float, out: _Out) -> bool:
        """Notice rotations of live files, then open (and read) files the glob names that are not open yet;
        True when a new file has more to read than one poll's budget."""
        for f in list(self._open.values()):
            if f.rotated_at is None and not self._names_file(f.path, f):
                f.rotated_at = now
                self._count["rotations"] += 1
        live = {(f.dev, f.inode) for f in self._open.values()}
        retired = {(c.dev, c.inode): key for key, (c, _) in self._retired.items()}
        more = False
        self._named = set()
        paths = self._glob()
        reasons = self._pattern_problems(paths)
        for path in paths:
            if os.path.realpath(path) in self._exclude:
                reasons.append(f"{path} is the agent's own store: not read")
                continue
            try:
                st = Path(path).stat()
            except OSError as exc:
                reasons.append(f"{path}: " + ("dangling symlink" if Path(path).is_symlink()
                                              else exc.strerror or str(exc)))
                continue
            if not stat.S_ISREG(st.st_mode):
                if not glob.has_magic(self.pattern):
                    reasons.append(f"{path} is " + ("a directory" if stat.S_ISDIR(st.st_mode)
                                                    else "not a regular file"))
                continue
            ident = (st.st_dev, st.st_ino)
            self._named.add(ident)
            if ident in live:
                continue
            at_end = self._first_run and self._first_discovery and self.options.start_at == "end"
            offset = None if at_end else 0
            new = self._open_at(path, now, key=None, offset=offset)
            if new is None:
                reasons.append(f"{path}: {self._failed_paths.get(path) or 'cannot open'}")
                continue
            ident = (new.dev, new.inode)  # the handle's identity, in case the path moved since stat
            if ident in live:
                os.close(new.fd)
                continue
            if self._copy_of_live(new):
                # A copy of a live file (copytruncate, with a glob that names rotated files too), or one
                # being made: its bytes are read through the live file, and what the truncation leaves
                # unread from the copy. (An empty `x.log.1` waits too: it may be a copy about to be
                # written, and there is nothing to read in it yet.)
                os.close(new.fd)
                continue
            if ident in retired:
                old = self._retired[retired[ident]][0]
                if _fingerprint_length(old.fingerprint) > 0 and _fingerprint_matches(new.fd, old.fingerprint):
                    # a finished file the glob also names (an empty fingerprint proves nothing: read it)
                    os.close(new.fd)
                    self._retired[retired[ident]] = (old, now)
                    continue
                del self._retired[retired[ident]]  # inode reused by a new file
                if old.file_key not in self._open:  # (unless its copy is still being drained)
                    out.expired.append(old)
            self._open[new.key] = new
            live.add(ident)
            self._catch_up(path, now)
            more |= self._service(new, now, out)
        self._first_discovery = False
        reason = "; ".join(dict.fromkeys(reasons))[:300]
        if reason and reason != self._down_reason:
            log.warning("source %s is down: %s", self.name, reason)
        elif not reason and self._down_reason:
            log.info("source %s is up again", self.name)
        self._up = not reasons
        self._down_reason = reason
        return more

    def _copy_of_live(self, new: _File) -> bool:
        """Whether `new` (just found by the glob) is named as a rotation of a live file (`x.log.1` next to
        `x.log`) and is empty, starts as that file did when last read, or is a prefix of it: a
        copytruncate copy, complete or still being written. Files under other names are never taken for
        copies, whatever their first bytes (two engines' logs may start alike)."""
        name = Path(new.path)
        base = name.with_name(rotation_base(name.name))
        if base == name:
            return False
        live = [o for o in self._open.values() if o.rotated_at is None and Path(o.path) == base]
        if not live:
            return False
        try:
            head = os.pread(new.fd, FINGERPRINT_BYTES, 0)
        except OSError:
            return False
        if not head:
            return True
        for o in live:
            if o.inode == new.inode or _fingerprint_length(o.fp) == 0:
                continue
            if _fingerprint_matches(new.fd, o.fp):
                return True  # starts as the live file did when last read (it may be truncated by now)
            try:
                current = os.pread(o.fd, FINGERPRINT_BYTES, 0)
            except OSError:
                continue
            if len(head) <= len(current) and current.startswith(head):
                return True  # a copy still being written
        return False

    def _pattern_problems(self, paths: Sequence[str]) -> list[str]:
        return _unmatched_problems(self.pattern) if not paths else []

    def _glob(self) -> list[str]:
        """The paths the pattern names now, in a stable order, compressed rotations left out."""
        paths = glob.glob(self.pattern)  # noqa: PTH207 (an absolute user glob; Path.glob takes relative ones)
        return sorted(p for p in paths if not p.endswith(COMPRESSED_SUFFIXES))

    def _open_at(self, path: str, now: float, key: str | None, offset: int | None) -> _File | None:
        """Open `path` read-only and identify it by fstat; offset None means "at the last complete line"."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if path not in self._failed_paths:  # counted once per failure, retried every poll
                self._count["read_errors"] += 1
                if exc.errno == errno.EMFILE:
                    self._count["emfile"] += 1
            self._failed_paths[path] = exc.strerror or str(exc)
            return None
        self._failed_paths.pop(path, None)
        try:
            st = os.fstat(fd)
            start = self._last_line_end(fd, st.st_size) if offset is None else offset
            fp = fingerprint(fd, FINGERPRINT_BYTES)
        except OSError:
            os.close(fd)
            self._count["read_errors"] += 1
            return None
        f = _File(fd, path, st.st_dev, st.st_ino, key or f"{st.st_dev}:{st.st_ino}:{secrets.token_hex(6)}",
                  fp, start, self._assembler(start), last_growth=now, mtime_ns=st.st_mtime_ns,
                  real=str(Path(path).resolve()))
        with contextlib.suppress(OSError):
            f.near = near_fingerprint(fd, start)
        return f

    def _assembler(self, start: int) -> LineAssembler:
        return LineAssembler(self.options.fmt, self.options.max_line_bytes, self._count, start)

    def _restart_at(self, f: _File, offset: int) -> None:
        """Read `f` from `offset` on, forgetting any unfinished line."""
        f.read_pos = offset
        f.lines = self._assembler(offset)
        try:
            f.near = near_fingerprint(f.fd, offset)
        except OSError:
            f.near = ""

    def _last_line_end(self, fd: int, size: int) -> int:
        """Where a first run starting "at the end" begins: after the last newline, not mid-line."""
        tail_start = max(0, size - READ_CHUNK_BYTES)
        tail = os.pread(fd, size - tail_start, tail_start)
        cut = tail.rfind(b"\n")
        return tail_start + cut + 1 if cut >= 0 else size

    @staticmethod
    def _names_file(path: str, f: _File) -> bool:
        try:
            st = Path(path).stat()
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (f.dev, f.inode)

    @staticmethod
    def _size(f: _File) -> int:
        try:
            return os.fstat(f.fd).st_size
        except OSError:
            return f.read_pos

    # --- reading ------------------------------------------------------------------------------------------

    def _service(self, f: _File, now: float, out: _Out) -> bool:
        """Read `f` up to the per-poll budget; handle truncation, quiet partial lines and finished drains.
        Returns True when bytes remain beyond the budget."""
        try:
            st = os.fstat(f.fd)
            size, length = st.st_size, _fingerprint_length(f.fp)
            rewritten = st.st_mtime_ns != f.mtime_ns and not _near_matches(f.fd, f.read_pos, f.near)
            if size < f.read_pos or rewritten or not _fingerprint_matches(f.fd, f.fp):
                self._truncated(f, now, out)
                size, length = os.fstat(f.fd).st_size, 0
            if length < FINGERPRINT_BYTES and size > length:
                f.fp = fingerprint(f.fd, FINGERPRINT_BYTES)
            got = self._read(f, now, out, size)
            if got < 0:  # truncated and written again while this poll read it: as above, at once
                self._truncated(f, now, out)
                return True
        except OSError:
            self._count["read_errors"] += 1
            return False
        if st.st_mtime_ns != f.mtime_ns and f.rotated_at is None and (got == 0 or length < FINGERPRINT_BYTES):
            # Changed but no bigger, or changed while too short for its fingerprint to notice a rewrite:
            # it may have been written and copytruncated between two polls, leaving bytes we never saw
            # only in a rotated sibling.
            self._catch_up(f.path, now)
        f.mtime_ns = st.st_mtime_ns
        quiet = now - f.last_growth
        if got == 0 and quiet >= self.options.partial_flush_seconds and f.lines.holding():
            self._count["partial_flushes"] += 1
            self._flush(f, out)
        if f.rotated_at is not None and got == 0 and now - max(f.last_growth, f.rotated_at) >= \
                self.options.rotate_wait_seconds:
            self._retire(f, now, out)
        return f.read_pos < size

    def _read(self, f: _File, now: float, out: _Out, size: int) -> int:
        """Read up to this poll's byte and line budgets; return the bytes consumed, or -1 when the file
        was truncated (and maybe written again past our position) between two of its reads.

        `_service` checks the file before reading, but copytruncate can strike between two chunks of one
        read: the next chunk would then come from the new bytes, under the old file key, tearing the
        line that spans the chunk boundary. So every chunk is checked after it is read: the file must
        still start as it did and still hold, just before the chunk, the bytes this tailer read there
        (kept in memory, never read back, so `near` always describes what was delivered). A chunk that
        fails is dropped; the caller finishes the old bytes from the copy."""
        got, line_limit = 0, len(out.lines) + self._line_budget
        before = b""  # the ≤ NEAR_BYTES bytes before f.read_pos as read (checked against f.near first)

        def emit(frame: Frame, offset: int) -> None:
            self._deliver(f, frame, offset, out)

        def stop() -> bool:
            return len(out.lines) >= line_limit

        torn = False
        while got < self._budget and f.read_pos < size and not stop():
            data = os.pread(f.fd, min(READ_CHUNK_BYTES, size - f.read_pos), f.read_pos)
            if not data:
                break
            if not got:
                before = os.pread(f.fd, min(NEAR_BYTES, f.read_pos), f.read_pos - min(NEAR_BYTES, f.read_pos))
                same = _near_hash(before, f.read_pos) == f.near or not f.near
            else:
                same = os.pread(f.fd, len(before), f.read_pos - len(before)) == before
            if not same or not _fingerprint_matches(f.fd, f.fp):
                torn = True
                break
            used = f.lines.feed(data, f.read_pos, emit, stop)
            f.read_pos += used
            got += used
            before = (before + data[:used])[-NEAR_BYTES:]
            if used < len(data):
                break
        if got:
            f.last_growth = now
            self._count["bytes"] += got
            f.near = _near_hash(before, f.read_pos)
        return -1 if torn else got

    def _deliver(self, f: _File, frame: Frame, offset: int, out: _Out) -> None:
        out.lines.append(LogLine(self.name, f.path, offset, frame.text, frame.ts, frame.stream, frame.truncated,
                                 f.key))
        self._count["lines"] += 1
        if frame.truncated:
            self._count["truncated_lines"] += 1

    def _flush(self, f: _File, out: _Out) -> None:
        """Deliver the unfinished line as it is (quiet for long enough, or shutting down)."""
        f.lines.flush(f.read_pos, lambda frame, offset: self._deliver(f, frame, offset, out))

    def _truncated(self, f: _File, now: float, out: _Out) -> None:
        """copytruncate: finish the unread tail from the copy, then read this file again from 0."""
        self._count["truncations"] += 1
        # (no `near`: the bytes before the cursor are gone from this file; the copy is known by its start)
        old = Cursor(self.name, f.real, f.dev, f.inode, f.fp, f.committed(), f.key, now)
        del self._open[f.key]
        f.key = f"{f.dev}:{f.inode}:{secrets.token_hex(6)}"
        self._open[f.key] = f
        if self._recover_from_copy(old, now) is None:
            out.expired.append(old)
            self._catch_up(f.path, now)
        self._restart_at(f, 0)
        f.fp = fingerprint(f.fd, FINGERPRINT_BYTES)
        f.emitted = None

    def _recover_from_copy(self, cursor: Cursor, now: float) -> _File | None:
        """Find the copy copytruncate made of `cursor`'s file (same first bytes, other inode, at least as
        long) and drain it from the cursor, under the same file key, so offsets stay unique."""
        if _fingerprint_length(cursor.fingerprint) == 0:
            return None
        best: tuple[float, str] | None = None
        for entry in _rotated_siblings(cursor.path):
            try:
                st = entry.stat()
            except OSError:
                continue
            if entry.inode() == cursor.inode or st.st_size < cursor.offset:
                continue
            if best is None or st.st_mtime > best[0]:
                try:
                    fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    if _fingerprint_matches(fd, cursor.fingerprint) and _near_matches(fd, cursor.offset, cursor.near):
                        best = (st.st_mtime, entry.path)
                finally:
                    os.close(fd)
        if best is None:
            return None
        copy = self._open_at(best[1], now, key=cursor.file_key, offset=cursor.offset)
        if copy is None:
            return None
        if copy.key in self._open:  # already being drained (found after a restart)
            os.close(copy.fd)
            return self._open[copy.key]
        copy.rotated_at = now
        self._open[copy.key] = copy
        self._retired.pop(copy.key, None)
        return copy

    def _recover_compressed(self, cursor: Cursor, now: float) -> _File | None:
        """Finish a file that was rotated and compressed before it was read to its end (logrotate
        `compress` without `delaycompress`, while the agent was down): decompress the rotation whose
        start and bytes before the cursor match into memory and read it on from the cursor."""
        if _fingerprint_length(cursor.fingerprint) == 0:
            return None
        name = self._watched_name(cursor.path)
        base = Path(name).name
        try:
            entries = sorted(os.scandir(Path(name).parent), key=lambda e: e.name)
        except OSError:
            return None
        for entry in entries:
            suffix = next((s for s in DECOMPRESSED_SUFFIXES if entry.name.endswith(s)), None)
            if suffix is None or not entry.name.startswith((base + ".", base + "-")) \
                    or not entry.is_file(follow_symlinks=False):
                continue
            fd = self._decompress(entry.path, suffix, cursor)
            if fd is None:
                continue
            st = os.fstat(fd)
            f = _File(fd, entry.path, st.st_dev, st.st_ino, cursor.file_key, cursor.fingerprint, cursor.offset,
                      self._assembler(cursor.offset), last_growth=now, mtime_ns=st.st_mtime_ns, real=entry.path,
                      near=cursor.near, rotated_at=now)
            self._open[f.key] = f
            self._retired.pop(f.key, None)
            self._count["decompressed"] += 1
            return f
        return None

    @staticmethod
    def _decompress(path: str, suffix: str, cursor: Cursor) -> int | None:
        """A memory file holding `path`'s decompressed start and everything from just before the cursor
        on (the middle is a hole), or None when it is not the cursor's file."""
        length = _fingerprint_length(cursor.fingerprint)
        keep_from = max(length, cursor.offset - NEAR_BYTES)
        fd = -1
        try:
            with _open_compressed(path, suffix) as src:
                head = src.read(length)
                if f"{len(head)}:{hashlib.blake2b(head, digest_size=8).hexdigest()}" != cursor.fingerprint:
                    return None
                fd = os.memfd_create("deepinfer-rotated", os.MFD_CLOEXEC)
                os.pwrite(fd, head, 0)
                pos = length
                while pos < keep_from:
                    skipped = src.read(min(READ_CHUNK_BYTES * 16, keep_from - pos))
                    if not skipped:
                        break
                    pos += len(skipped)
                while chunk := src.read(READ_CHUNK_BYTES * 16):
                    os.pwrite(fd, chunk, pos)
                    pos += len(chunk)
            if pos < cursor.offset or not _near_matches(fd, cursor.offset, cursor.near):
                os.close(fd)
                return None
            return fd
        except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
            if fd >= 0:
                os.close(fd)
            return None

    def _retire(self, f: _File, now: float, out: _Out) -> None:
        self._flush(f, out)
        self._cursor(f, now, out)
        os.close(f.fd)
        del self._open[f.key]
        self._retired[f.key] = (self._cursor_of(f, now), now)

    def _expire(self, now: float, out: _Out) -> None:
        grace = self.options.cursor_grace_seconds
        for key, (cursor, since) in list(self._retired.items()):
            if (cursor.dev, cursor.inode) in self._named:
                # A finished file the glob still names (`logs/*` with rotated files): forgetting it
                # would read it again from the start.
                self._retired[key] = (cursor, now)
                continue
            if now - since >= grace:
                del self._retired[key]
                out.expired.append(cursor)

    def _cursor(self, f: _File, now: float, out: _Out) -> None:
        state = (f.committed(), f.fp)
        if state != f.emitted:
            f.emitted = state
            out.cursors.append(self._cursor_of(f, now))

    def _cursor_of(self, f: _File, now: float) -> Cursor:
        offset = f.committed()
        try:  # at read_pos, the bytes as read (the file may have been truncated and rewritten since)
            near = f.near if offset == f.read_pos and f.near else near_fingerprint(f.fd, offset)
        except OSError:
            near = ""
        return Cursor(self.name, f.real, f.dev, f.inode, f.fp, offset, f.key, now, near)


def store_files(store_path: str | Path) -> tuple[str, ...]:
    """The agent's own database and the files SQLite keeps beside it: never a log to read."""
    base = str(Path(store_path).expanduser())
    return tuple(base + suffix for suffix in ("", "-wal", "-shm", "-journal"))


def _unmatched_problems(pattern: str) -> list[str]:
    """Why a pattern that names nothing will never name anything (a missing directory, a plain path that
    does not exist or is a dangling symlink); a glob whose directory exists but matches nothing yet is fine."""
    fixed = Path(pattern)
    if not glob.has_magic(pattern):
        return [f"{pattern}: dangling symlink" if fixed.is_symlink() else f"{pattern} does not exist"]
    while glob.has_magic(str(fixed)):
        fixed = fixed.parent
    if not fixed.is_dir():
        return [f"{fixed} " + ("is not a directory" if fixed.exists() else "does not exist")]
    return []


def pattern_problems(pattern: str, exclude: Collection[str] = ()) -> list[str]:
    """What `check` warns about a file source's path before the agent runs: it does not exist, is a
    directory, a dangling symlink, cannot be read, or names the agent's own store (never read)."""
    pattern = str(Path(pattern).expanduser())
    paths = sorted(glob.glob(pattern))  # noqa: PTH207 (an absolute user glob)
    if not paths:
        return _unmatched_problems(pattern)
    own = {os.path.realpath(p) for p in exclude}
    out: list[str] = []
    for path in paths:
        p = Path(path)
        if os.path.realpath(p) in own:
            out.append(f"{path} is the agent's own store: it is never read (narrow the glob)")
        elif not p.exists():
            out.append(f"{path}: dangling symlink")
        elif p.is_dir():
            if not glob.has_magic(pattern):
                out.append(f"{path} is a directory (give a file or a glob such as {path}/*.log)")
        elif not os.access(p, os.R_OK):
            out.append(f"{path}: permission denied (the agent's user must be able to read it)")
    return out


def _rotated_siblings(path: str) -> list[os.DirEntry[str]]:
    """Regular files next to `path` named as its rotations (`x.log.1`, `x.log-20250101`), uncompressed.

    Nothing else in the directory is ever opened: closing any descriptor of a file drops every POSIX
    lock this process holds on it, so opening, say, the agent's own SQLite database here would silently
    break SQLite's locking.
    """
    base = Path(path).name
    prefixes = (base + ".", base + "-")
    try:
        entries = list(os.scandir(Path(path).parent))
    except OSError:
        return []
    return [e for e in entries if e.name.startswith(prefixes) and not e.name.endswith(COMPRESSED_SUFFIXES)
            and e.is_file(follow_symlinks=False)]


def _same_start(f: _File, other: _File | Cursor) -> bool:
    """Whether `f` is another inode starting with the (non-empty) bytes `other` was fingerprinted from."""
    fp = other.fp if isinstance(other, _File) else other.fingerprint
    return other.inode != f.inode and _fingerprint_length(fp) > 0 and _fingerprint_matches(f.fd, fp)


@dataclass
class _Out:
    lines: list[LogLine] = field(default_factory=list)
    cursors: list[Cursor] = field(default_factory=list)
    expired: list[Cursor] = field(default_factory=list)

