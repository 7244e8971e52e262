"""The store's file on disk and what to tell an operator when SQLite fails on it: no sqlite_utils here, only
the file system and SQLite's result codes, so the permissions and the hints are read (and tested) apart from
the schema and the writes."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from agent.errors import StoreError

# SQLite's primary result codes (the sqlite3 module names them only from Python 3.11).
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_NOTADB = 5, 6, 11, 13, 26


def failure_hint(exc: BaseException) -> str:
    """What an operator should do about a store failure: the cause in words and the fix."""
    cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ is not None else exc
    code = getattr(cause, "sqlite_errorcode", 0) & 0xFF  # the primary code (Python 3.11+; text otherwise)
    text = str(cause).lower()
    if code == _SQLITE_FULL or "full" in text:
        return ("the disk (or the store's size cap) is full: free space on that filesystem or lower "
                "store.retention_days / store.max_bytes")
    if code in (_SQLITE_BUSY, _SQLITE_LOCKED) or "locked" in text:
        return "another process holds the store's write lock: is a second agent using the same store.path?"
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "malformed" in text or "not a database" in text:
        return ("the store file is corrupt: move it aside with its -wal and -shm files (the agent creates a "
                "new one and writes what it buffered); `sqlite3 FILE .recover` may save the old data")
    return "see the SQLite error; the agent keeps buffering and retrying"


def create_store_file(path: Path) -> None:
    """Create the database file 0640 (SQLite gives its -wal and -shm the same mode) in directories made
    0750: the store holds log excerpts, readable by the agent's group (operators running `status`), not
    by everyone, whatever the umask. A symlink at the path (or at its -wal, -shm or -journal) is refused,
    never followed: a planted link would make the agent write its database wherever it points."""
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o750)
            directory.chmod(0o750)  # exactly 0750, as the file is exactly 0640, whatever the umask
    for candidate in (path, *(Path(f"{path}{suffix}") for suffix in ("-wal", "-shm", "-journal"))):
        if candidate.is_symlink():
            raise StoreError(f"{candidate} is a symlink: refusing to follow it (point store.path at the real file)")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o640)
    except FileExistsError:
        try:  # an existing file: still no symlink (it could have been swapped in since the check above)
            os.close(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC))
        except OSError as exc:
            raise StoreError(f"{path}: cannot open without following a symlink: {exc.strerror or exc}") from exc
        return
    try:
        os.fchmod(fd, 0o640)  # the umask may have taken bits away; it must not add any either
    finally:
        os.close(fd)
