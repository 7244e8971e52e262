"""What a file source's path names, apart from reading it: the agent's own store (never a log), and why a
pattern names nothing or something unreadable (what `check` warns about before the agent runs)."""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Collection
from pathlib import Path

STORE_SUFFIXES = ("", "-wal", "-shm", "-journal")  # SQLite's database and its companion files


def store_files(db_path: str | Path) -> set[str]:
    """The files SQLite writes for a database at `db_path`: absolute paths, as given and with links resolved
    (a watch reports a path under the directory as it was watched)."""
    path = Path(db_path).expanduser()
    given, resolved = path.absolute(), path.resolve()
    return {f"{base}{suffix}" for base in (given, resolved) for suffix in STORE_SUFFIXES}


def unmatched_problems(pattern: str) -> list[str]:
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
        return unmatched_problems(pattern)
    own = {os.path.realpath(p) for p in exclude}
    own_ids = set()
    for name in exclude:
        with contextlib.suppress(OSError):
            st = Path(name).stat()
            own_ids.add((st.st_dev, st.st_ino))
    out: list[str] = []
    for path in paths:
        p = Path(path)
        try:
            st = p.stat()
            ident = (st.st_dev, st.st_ino)
        except OSError:
            ident = None
        if os.path.realpath(p) in own or ident in own_ids:  # by name, or a hard link to it
            out.append(f"{path} is the agent's own store: it is never read (narrow the glob)")
        elif not p.exists():
            out.append(f"{path}: dangling symlink")
        elif p.is_dir():
            if not glob.has_magic(pattern):
                out.append(f"{path} is a directory (give a file or a glob such as {path}/*.log)")
        elif not os.access(p, os.R_OK):
            out.append(f"{path}: permission denied (the agent's user must be able to read it)")
    return out
