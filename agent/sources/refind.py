"""Finding files again: stored cursors reattached after a restart (by inode, wherever the file was
renamed, or from its copytruncate copy or compressed rotation when it was rewritten), and rotated
siblings written while the agent was down or between two polls read too."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import secrets
from pathlib import Path

from agent.bookkeeping import Cursor
from agent.sources.compressed import DECOMPRESSED_SUFFIXES, decompress
from agent.sources.identity import (
    FINGERPRINT_BYTES,
    TailedFile,
    fingerprint,
    fingerprint_length,
    fingerprint_matches,
    near_matches,
    rotated_siblings,
    rotation_base,
    same_start,
)
from agent.sources.tailstate import TailerState


class Refinder:
    """Reattaching cursors and catching up on rotations, for a `FileTailer`, on the state it shares with it."""

    def __init__(self, state: TailerState) -> None:
        self.state = state

    def restore(self, now: float) -> None:
        """Reattach stored cursors to files (by inode, wherever they were renamed) and read what was
        rotated while the agent was down."""
        live: dict[tuple[int, int], str] = {}
        for path in self.state.glob():
            with contextlib.suppress(OSError):
                st = Path(path).stat()
                live.setdefault((st.st_dev, st.st_ino), path)
        # Where a file may have gone since its cursor was written: any glob match, and any rotation of a
        # watched name (logrotate may have shifted `x.log.1` to `x.log.2` while the agent was down).
        family: dict[tuple[int, int], str] = {}
        for name in {*live.values(), *(self._watched_name(c.path) for c in self.state.restored)}:
            for entry in rotated_siblings(name):
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    family.setdefault((st.st_dev, st.st_ino), entry.path)
        # The surest identities first: a long fingerprint cannot be mistaken for a reused inode.
        for cursor in sorted(self.state.restored, key=lambda c: -fingerprint_length(c.fingerprint)):
            f = self._reattach(cursor, live, family, now)
            if f is None:
                self.state.retired[cursor.file_key] = (cursor, now)
        for path in {self._watched_name(c.path) for c in self.state.restored}:
            self.catch_up(path, now)

    def _watched_name(self, path: str) -> str:
        """The name the glob watches that `path` is, or was rotated from (`x.log.2` → `x.log`)."""
        if fnmatch.fnmatchcase(path, self.state.pattern):
            return path
        return str(Path(path).with_name(rotation_base(Path(path).name)))

    def _reattach(self, cursor: Cursor, live: dict[tuple[int, int], str], family: dict[tuple[int, int], str],
                  now: float) -> TailedFile | None:
        candidates = [cursor.path]
        if fingerprint_length(cursor.fingerprint) > 0:  # an empty file's inode may be anyone's now
            ident = (cursor.dev, cursor.inode)
            candidates += [p for p in (live.get(ident), family.get(ident)) if p is not None and p != cursor.path]
        for path in candidates:
            f = self.state.open_at(path, now, key=cursor.file_key, offset=cursor.offset)
            if f is None:
                continue
            if (f.dev, f.inode) != (cursor.dev, cursor.inode) or f.key in self.state.files:
                os.close(f.fd)
                continue
            if not fingerprint_matches(f.fd, cursor.fingerprint):
                # Same inode, other first bytes: truncated and rewritten (or the inode was reused).
                os.close(f.fd)
                return self.recover_from_copy(cursor, now) or self._recover_compressed(cursor, now)
            if self.state.size(f) >= cursor.offset and not near_matches(f.fd, cursor.offset, cursor.near):
                # Same first bytes, other bytes before the cursor: truncated in place and written again
                # past the cursor while the agent was down. Finish the old bytes from a copy if one was
                # made (copytruncate), and read this file again from its start as a new incarnation.
                self.state.count["truncations"] += 1
                self.state.drop.append(cursor)
                self.recover_from_copy(cursor, now)
                f.key = f"{f.dev}:{f.inode}:{secrets.token_hex(6)}"
                self.state.restart_at(f, 0)
                f.fp = fingerprint(f.fd, FINGERPRINT_BYTES)
                if (f.dev, f.inode) in live:
                    f.path = live[(f.dev, f.inode)]
                self.state.files[f.key] = f
                return f
            f.fp, f.emitted = cursor.fingerprint, (cursor.offset, cursor.fingerprint)
            f.near = cursor.near
            if (f.dev, f.inode) in live:
                f.path = live[(f.dev, f.inode)]  # the name the glob knows it by (a symlink, say)
            else:  # renamed, replaced or unlinked from the glob while the agent was down
                f.rotated_at = now
                self.state.count["rotations"] += 1
            self.state.files[f.key] = f
            return f
        return self.recover_from_copy(cursor, now) or self._recover_compressed(cursor, now)

    def catch_up(self, live_path: str, now: float) -> None:
        """Read rotated siblings of `live_path` (`x.log.1`, `x.log-20250101`) that the tailer never saw:
        written and rotated away between two polls, or while the agent was down.

        Only files modified since the previous poll (or the last stored cursor) qualify, so old rotated
        files whose cursors have expired are not read again.
        """
        if self.state.last_now is None:
            return
        known = {(f.dev, f.inode) for f in self.state.files.values()}
        for entry in rotated_siblings(live_path):
            try:
                st = entry.stat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in known or st.st_mtime < self.state.last_now - 1.0:
                continue
            f = self.state.open_at(entry.path, now, key=None, offset=0)
            if f is None:
                continue
            if any(same_start(f, o) for o in self.state.files.values()):
                os.close(f.fd)  # a copy of a file still being read: truncation recovery will drain it
                continue
            # An empty fingerprint identifies nothing (the inode may have been reused by a copy).
            finished = next((c for c, _ in self.state.retired.values() if (c.dev, c.inode) == (f.dev, f.inode)
                             and fingerprint_length(c.fingerprint) > 0
                             and fingerprint_matches(f.fd, c.fingerprint)), None)
            copy_of = next((c for c, _ in self.state.retired.values() if same_start(f, c)), None)
            if finished is not None and finished.file_key in self.state.files:
                os.close(f.fd)  # its bytes are being read through another name already
                continue
            if finished is not None:  # a file read before: resume it (it may have grown since)
                del self.state.retired[finished.file_key]
                f.key, f.fp, f.emitted = finished.file_key, finished.fingerprint, None
                self.state.restart_at(f, finished.offset)
            elif copy_of is not None:  # a copytruncate copy of bytes already read: start where they ended
                self.state.restart_at(f, min(copy_of.offset, self.state.size(f)))
            f.rotated_at = now
            self.state.files[f.key] = f
            known.add((f.dev, f.inode))
            if finished is None:
                self.state.count["rotations"] += 1

    def recover_from_copy(self, cursor: Cursor, now: float) -> TailedFile | None:
        """Find the copy copytruncate made of `cursor`'s file (same first bytes, other inode, at least as
        long) and drain it from the cursor, under the same file key, so offsets stay unique."""
        if fingerprint_length(cursor.fingerprint) == 0:
            return None
        best: tuple[float, str] | None = None
        for entry in rotated_siblings(cursor.path):
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
                    if fingerprint_matches(fd, cursor.fingerprint) and near_matches(fd, cursor.offset, cursor.near):
                        best = (st.st_mtime, entry.path)
                finally:
                    os.close(fd)
        if best is None:
            return None
        copy = self.state.open_at(best[1], now, key=cursor.file_key, offset=cursor.offset)
        if copy is None:
            return None
        if copy.key in self.state.files:  # already being drained (found after a restart)
            os.close(copy.fd)
            return self.state.files[copy.key]
        copy.rotated_at = now
        self.state.files[copy.key] = copy
        self.state.retired.pop(copy.key, None)
        return copy

    def _recover_compressed(self, cursor: Cursor, now: float) -> TailedFile | None:
        """Finish a file that was rotated and compressed before it was read to its end (logrotate
        `compress` without `delaycompress`, while the agent was down): decompress the rotation whose
        start and bytes before the cursor match into memory and read it on from the cursor."""
        if fingerprint_length(cursor.fingerprint) == 0:
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
            fd = decompress(entry.path, suffix, cursor)
            if fd is None:
                continue
            st = os.fstat(fd)
            f = TailedFile(fd, entry.path, st.st_dev, st.st_ino, cursor.file_key, cursor.fingerprint, cursor.offset,
                      self.state.assembler(cursor.offset), last_growth=now, mtime_ns=st.st_mtime_ns, real=entry.path,
                      near=cursor.near, rotated_at=now)
            self.state.files[f.key] = f
            self.state.retired.pop(f.key, None)
            self.state.count["decompressed"] += 1
            return f
        return None
