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

This module is the loop (reading, truncation, rotation, cursors); file identities and fingerprints are
in `identity`, the state and file opening in `tailstate` (the tailer's `state`), finding files again after a
restart and among rotation siblings in `refind` (its `refinder`, on the same state), and reading compressed
rotations in `compressed`.
"""

from __future__ import annotations

import glob
import logging
import os
import secrets
import stat
from collections.abc import Collection, Sequence
from pathlib import Path

from agent.bookkeeping import Cursor, SourceBatch, SourceStats
from agent.config import SourceSection
from agent.records import RawLines, log_line
from agent.sources.framing import Frame
from agent.sources.identity import (
    FINGERPRINT_BYTES,
    NEAR_BYTES,
    READ_CHUNK_BYTES,
    TailedFile,
    fingerprint,
    fingerprint_length,
    fingerprint_matches,
    near_fingerprint,
    near_hash,
    near_matches,
    rotation_base,
)
from agent.sources.patterns import unmatched_problems
from agent.sources.refind import Refinder
from agent.sources.tailstate import (
    MAX_BYTES_PER_POLL,
    MAX_LINES_PER_POLL,
    START_MARKER,
    TailerState,
    TailOptions,
    TailOut,
)
from parsers.compiled import active

log = logging.getLogger("deepinfer.tailer")


class FileTailer:
    """Follows one glob; `poll(now)` returns a `SourceBatch` to commit, `stats()` the self-metrics.

    `cursors` are the source's stored cursors (`Store.cursors(name)`); with none, this is the source's
    first run and files already present start at `options.start_at`. Every file found later, and every
    file found after a restart, is read from its beginning. The tailer has its state (`TailerState`) and a
    `Refinder` that finds files again on it.

    `raw` (the daemon) says the caller takes `RawLines` too: with the compiled lane on (parsers/compiled.py),
    a plain file's runs of whole lines are handed on as the bytes read, in order among the `LogLine`s, for
    agent/daemon/lane.py to split next to the parser; cursors, offsets and counters are the same either way.
    """

    def __init__(self, name: str, pattern: str, options: TailOptions, cursors: Sequence[Cursor] = (),
                 exclude: Collection[str] = (), raw: bool = False) -> None:
        self.state = TailerState(name, pattern, options, cursors, exclude)
        self.refinder = Refinder(self.state)
        self.raw = raw and options.fmt == "plain" and active()

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def options(self) -> TailOptions:
        return self.state.options

    @classmethod
    def from_section(cls, section: SourceSection, cursors: Sequence[Cursor] = (),
                     exclude: Collection[str] = (), raw: bool = False) -> FileTailer:
        """The tailer for one `sources:` entry (not journald), resumed from `Store.cursors(name)`."""
        if section.path is None:
            raise ValueError("a file source needs a path")
        return cls(section.source_name(), str(Path(section.path).expanduser()), TailOptions.from_section(section),
                   cursors, exclude, raw)

    # --- the loop -------------------------------------------------------------------------------------

    def poll(self, now: float) -> SourceBatch:
        """One bounded step: read what is new, follow rotations, expire old cursors. Never sleeps or raises
        on I/O errors (they are counted and retried).

        `now` is wall-clock epoch seconds (`time.time()`): besides timing partial-line flushes and rotate
        waits, it is stored in cursors and compared with file modification times after a restart.
        """
        out = TailOut()
        if not self.state.started:
            self.state.started = True
            self.refinder.restore(now)
            if self.state.first_run:
                out.cursors.append(Cursor(self.state.name, self.state.pattern, 0, 0, "0:", 0, START_MARKER, now))
        more = False
        share = max(1, len(self.state.files))
        self.state.budget = max(READ_CHUNK_BYTES, MAX_BYTES_PER_POLL // share)
        self.state.line_budget = max(100, MAX_LINES_PER_POLL // share)
        out.expired.extend(self.state.drop)
        self.state.drop.clear()
        for f in list(self.state.files.values()):
            more |= self._service(f, now, out)
        more |= self._discover(now, out)
        self._expire(now, out)
        self.state.lag = sum(self.state.size(f) - f.read_pos for f in self.state.files.values())
        for f in self.state.files.values():
            self._cursor(f, now, out)
        self.state.last_now = now
        return SourceBatch(tuple(out.lines), tuple(out.cursors), tuple(out.expired), more)

    def close(self, now: float) -> SourceBatch:
        """Flush held partial lines (shutdown) and close every file; commit the returned batch."""
        out = TailOut()
        for f in list(self.state.files.values()):
            self._flush(f, out)
            self._cursor(f, now, out)
            os.close(f.fd)
        self.state.files.clear()
        return SourceBatch(tuple(out.lines), tuple(out.cursors))

    def stats(self) -> SourceStats:
        """The self-metrics snapshot the metrics module exports (`deepinfer_source_*`)."""
        state, c = self.state, self.state.count
        return SourceStats(state.name, state.up, len(state.files), c["lines"], c["bytes"], c["rotations"],
                           c["truncations"], c["read_errors"], c["partial_flushes"], c["invalid_utf8"],
                           c["truncated_lines"], c["framing_errors"], 0, state.lag, state.down_reason,
                           c["emfile"])

    def watch_dirs(self) -> set[str]:
        """Directories whose changes should wake the loop: the glob's fixed part and every open file's."""
        fixed = Path(self.state.pattern)
        while glob.has_magic(str(fixed)):
            fixed = fixed.parent
        dirs = {fixed if fixed.is_dir() else fixed.parent}
        for f in self.state.files.values():
            dirs.add(Path(f.path).parent)
            dirs.add(Path(f.path).resolve().parent)
        return {str(d) for d in dirs if d.is_dir()}

    # --- finding files ------------------------------------------------------------------------------------

    def _discover(self, now: float, out: TailOut) -> bool:
        """Notice rotations of live files, then open (and read) files the glob names that are not open yet;
        True when a new file has more to read than one poll's budget."""
        for f in list(self.state.files.values()):
            if f.rotated_at is None and not self.state.names_file(f.path, f):
                f.rotated_at = now
                self.state.count["rotations"] += 1
        live = {(f.dev, f.inode) for f in self.state.files.values()}
        retired = {(c.dev, c.inode): key for key, (c, _) in self.state.retired.items()}
        more = False
        self.state.named = set()
        paths = self.state.glob()
        reasons = self._pattern_problems(paths)
        own = self.state.own_ids()
        for path in paths:
            if os.path.realpath(path) in self.state.exclude:
                reasons.append(f"{path} is the agent's own store: not read")
                continue
            try:
                st = Path(path).stat()
            except OSError as exc:
                reasons.append(f"{path}: " + ("dangling symlink" if Path(path).is_symlink()
                                              else exc.strerror or str(exc)))
                continue
            if (st.st_dev, st.st_ino) in own:  # a hard link to the store or its -wal
                reasons.append(f"{path} is the agent's own store (a hard link to it): not read")
                continue
            if not stat.S_ISREG(st.st_mode):
                if not glob.has_magic(self.state.pattern):
                    reasons.append(f"{path} is " + ("a directory" if stat.S_ISDIR(st.st_mode)
                                                    else "not a regular file"))
                continue
            ident = (st.st_dev, st.st_ino)
            self.state.named.add(ident)
            if ident in live:
                continue
            at_end = self.state.first_run and self.state.first_discovery and self.state.options.start_at == "end"
            offset = None if at_end else 0
            new = self.state.open_at(path, now, key=None, offset=offset)
            if new is None:
                reasons.append(f"{path}: {self.state.failed_paths.get(path) or 'cannot open'}")
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
                old = self.state.retired[retired[ident]][0]
                if fingerprint_length(old.fingerprint) > 0 and fingerprint_matches(new.fd, old.fingerprint):
                    # a finished file the glob also names (an empty fingerprint proves nothing: read it)
                    os.close(new.fd)
                    self.state.retired[retired[ident]] = (old, now)
                    continue
                del self.state.retired[retired[ident]]  # inode reused by a new file
                if old.file_key not in self.state.files:  # (unless its copy is still being drained)
                    out.expired.append(old)
            self.state.files[new.key] = new
            self.refinder.catch_up(path, now)
            # (catch_up may have resumed a finished sibling the glob names too: it is live now, not retired)
            live = {(f.dev, f.inode) for f in self.state.files.values()}
            retired = {(c.dev, c.inode): key for key, (c, _) in self.state.retired.items()}
            more |= self._service(new, now, out)
        self.state.first_discovery = False
        reason = "; ".join(dict.fromkeys(reasons))[:300]
        if reason and reason != self.state.down_reason:
            log.warning("source %s is down: %s", self.state.name, reason)
        elif not reason and self.state.down_reason:
            log.info("source %s is up again", self.state.name)
        self.state.up = not reasons
        self.state.down_reason = reason
        return more

    def _copy_of_live(self, new: TailedFile) -> bool:
        """Whether `new` (just found by the glob) is named as a rotation of a live file (`x.log.1` next to
        `x.log`) and is empty, starts as that file did when last read, or is a prefix of it: a
        copytruncate copy, complete or still being written. Files under other names are never taken for
        copies, whatever their first bytes (two engines' logs may start alike)."""
        name = Path(new.path)
        base = name.with_name(rotation_base(name.name))
        if base == name:
            return False
        live = [o for o in self.state.files.values() if o.rotated_at is None and Path(o.path) == base]
        if not live:
            return False
        try:
            head = os.pread(new.fd, FINGERPRINT_BYTES, 0)
        except OSError:
            return False
        if not head:
            return True
        for o in live:
            if o.inode == new.inode or fingerprint_length(o.fp) == 0:
                continue
            if fingerprint_matches(new.fd, o.fp):
                return True  # starts as the live file did when last read (it may be truncated by now)
            try:
                current = os.pread(o.fd, FINGERPRINT_BYTES, 0)
            except OSError:
                continue
            if len(head) <= len(current) and current.startswith(head):
                return True  # a copy still being written
        return False

    def _pattern_problems(self, paths: Sequence[str]) -> list[str]:
        return unmatched_problems(self.state.pattern) if not paths else []

    # --- reading ------------------------------------------------------------------------------------------

    def _service(self, f: TailedFile, now: float, out: TailOut) -> bool:
        """Read `f` up to the per-poll budget; handle truncation, quiet partial lines and finished drains.
        Returns True when bytes remain beyond the budget."""
        try:
            st = os.fstat(f.fd)
            size, length = st.st_size, fingerprint_length(f.fp)
            rewritten = st.st_mtime_ns != f.mtime_ns and not near_matches(f.fd, f.read_pos, f.near)
            if size < f.read_pos or rewritten or not fingerprint_matches(f.fd, f.fp):
                self._truncated(f, now, out)
                size, length = os.fstat(f.fd).st_size, 0
            if length < FINGERPRINT_BYTES and size > length:
                f.fp = fingerprint(f.fd, FINGERPRINT_BYTES)
            got = self._read(f, now, out, size)
            if got < 0:  # truncated and written again while this poll read it: as above, at once
                self._truncated(f, now, out)
                return True
        except OSError:
            self.state.count["read_errors"] += 1
            return False
        if st.st_mtime_ns != f.mtime_ns and f.rotated_at is None and (got == 0 or length < FINGERPRINT_BYTES):
            # Changed but no bigger, or changed while too short for its fingerprint to notice a rewrite:
            # it may have been written and copytruncated between two polls, leaving bytes we never saw
            # only in a rotated sibling.
            self.refinder.catch_up(f.path, now)
        f.mtime_ns = st.st_mtime_ns
        quiet = now - f.last_growth
        if got == 0 and quiet >= self.state.options.partial_flush_seconds and f.lines.holding():
            self.state.count["partial_flushes"] += 1
            self._flush(f, out)
        if f.rotated_at is not None and got == 0 and now - max(f.last_growth, f.rotated_at) >= \
                self.state.options.rotate_wait_seconds:
            self._retire(f, now, out)
        return f.read_pos < size

    def _read(self, f: TailedFile, now: float, out: TailOut, size: int) -> int:
        """Read up to this poll's byte and line budgets; return the bytes consumed, or -1 when the file
        was truncated (and maybe written again past our position) between two of its reads.

        `_service` checks the file before reading, but copytruncate can strike between two chunks of one
        read: the next chunk would then come from the new bytes, under the old file key, tearing the
        line that spans the chunk boundary. So every chunk is checked after it is read: the file must
        still start as it did and still hold, just before the chunk, the bytes this tailer read there
        (kept in memory, never read back, so `near` always describes what was delivered). A chunk that
        fails is dropped; the caller finishes the old bytes from the copy."""
        got, line_limit = 0, out.delivered + self.state.line_budget
        before = b""  # the ≤ NEAR_BYTES bytes before f.read_pos as read (checked against f.near first)

        def emit(frame: Frame, offset: int) -> None:
            self._deliver(f, frame, offset, out)

        def emit_plain(texts: list[str], offsets: list[int]) -> None:
            name, path, key = self.state.name, f.path, f.key
            out.lines.extend([log_line(name, path, offset, text, None, None, False, key)
                              for text, offset in zip(texts, offsets, strict=True)])
            out.delivered += len(texts)
            self.state.count["lines"] += len(texts)

        def emit_raw(data: bytes, offset: int, lines: int) -> None:
            out.lines.append(RawLines(self.state.name, f.path, offset, data, lines, f.key))
            out.delivered += lines
            self.state.count["lines"] += lines

        torn = False
        while got < self.state.budget and f.read_pos < size and out.delivered < line_limit:
            data = os.pread(f.fd, min(READ_CHUNK_BYTES, size - f.read_pos), f.read_pos)
            if not data:
                break
            if not got:
                before = os.pread(f.fd, min(NEAR_BYTES, f.read_pos), f.read_pos - min(NEAR_BYTES, f.read_pos))
                same = near_hash(before, f.read_pos) == f.near or not f.near
            else:
                same = os.pread(f.fd, len(before), f.read_pos - len(before)) == before
            if not same or not fingerprint_matches(f.fd, f.fp):
                torn = True
                break
            used = (f.lines.feed(data, f.read_pos, emit, line_limit - out.delivered, emit_raw=emit_raw) if self.raw
                    else f.lines.feed(data, f.read_pos, emit, line_limit - out.delivered, emit_plain))
            f.read_pos += used
            got += used
            before = (before + data[:used])[-NEAR_BYTES:]
            if used < len(data):
                break
        if got:
            f.last_growth = now
            self.state.count["bytes"] += got
            f.near = near_hash(before, f.read_pos)
        return -1 if torn else got

    def _deliver(self, f: TailedFile, frame: Frame, offset: int, out: TailOut) -> None:
        out.lines.append(log_line(self.state.name, f.path, offset, frame.text, frame.ts, frame.stream, frame.truncated,
                                  f.key))
        out.delivered += 1
        self.state.count["lines"] += 1
        if frame.truncated:
            self.state.count["truncated_lines"] += 1

    def _flush(self, f: TailedFile, out: TailOut) -> None:
        """Deliver the unfinished line as it is (quiet for long enough, or shutting down)."""
        f.lines.flush(f.read_pos, lambda frame, offset: self._deliver(f, frame, offset, out))

    def _truncated(self, f: TailedFile, now: float, out: TailOut) -> None:
        """copytruncate: finish the unread tail from the copy, then read this file again from 0. A file cut in
        place below the cursor (no copy, same first bytes) is read on from its new end: it kept lines read."""
        self.state.count["truncations"] += 1
        # (no `near`: the bytes before the cursor are gone from this file; the copy is known by its start)
        old = Cursor(self.state.name, f.real, f.dev, f.inode, f.fp, f.committed(), f.key, now)
        size = self.state.size(f)
        cut_in_place = (FINGERPRINT_BYTES <= size < f.read_pos and fingerprint_length(f.fp) == FINGERPRINT_BYTES
                        and fingerprint_matches(f.fd, f.fp))
        del self.state.files[f.key]
        f.key = f"{f.dev}:{f.inode}:{secrets.token_hex(6)}"
        self.state.files[f.key] = f
        start = 0
        if self.refinder.recover_from_copy(old, now) is None:
            out.expired.append(old)
            self.refinder.catch_up(f.path, now)
            start = size if cut_in_place else 0  # (a line the cut ended in was delivered whole before)
        self.state.restart_at(f, start)
        f.fp = fingerprint(f.fd, FINGERPRINT_BYTES)
        f.emitted = None


    def _retire(self, f: TailedFile, now: float, out: TailOut) -> None:
        self._flush(f, out)
        self._cursor(f, now, out)
        os.close(f.fd)
        del self.state.files[f.key]
        self.state.retired[f.key] = (self._cursor_of(f, now), now)

    def _expire(self, now: float, out: TailOut) -> None:
        grace = self.state.options.cursor_grace_seconds
        for key, (cursor, since) in list(self.state.retired.items()):
            if (cursor.dev, cursor.inode) in self.state.named:
                # A finished file the glob still names (`logs/*` with rotated files): forgetting it
                # would read it again from the start.
                self.state.retired[key] = (cursor, now)
                continue
            if now - since >= grace:
                del self.state.retired[key]
                out.expired.append(cursor)

    def _cursor(self, f: TailedFile, now: float, out: TailOut) -> None:
        state = (f.committed(), f.fp)
        if state != f.emitted:
            f.emitted = state
            out.cursors.append(self._cursor_of(f, now))

    def _cursor_of(self, f: TailedFile, now: float) -> Cursor:
        offset = f.committed()
        try:  # at read_pos, the bytes as read (the file may have been truncated and rewritten since)
            near = f.near if offset == f.read_pos and f.near else near_fingerprint(f.fd, offset)
        except OSError:
            near = ""
        return Cursor(self.state.name, f.real, f.dev, f.inode, f.fp, offset, f.key, now, near)
