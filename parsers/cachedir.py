"""The user's cache directory, where the parsers keep copies of what every start would otherwise rebuild (the
catalogue's validated sources, the literals and tries derived from the patterns), and the one way a copy is
written there: whole or not at all, older copies of the same kind removed, a directory that cannot be written
costing only the copy."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def user_cache_dir() -> Path | None:
    """$XDG_CACHE_HOME/deepinfer-agent, else ~/.cache/deepinfer-agent; None for a user without a home."""
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deepinfer-agent"
    except RuntimeError:
        return None


def write_copy(copy: Path, text: str, older: str) -> None:
    """Write `text` to `copy` through a temporary file renamed over it, then remove the files of the same
    directory that match the glob `older` (earlier copies of the same kind); errors are swallowed."""
    temporary = copy.with_name(f".{copy.name}.{os.getpid()}.tmp")
    try:
        copy.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(copy)
        for old in copy.parent.glob(older):
            if old != copy:
                old.unlink(missing_ok=True)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
