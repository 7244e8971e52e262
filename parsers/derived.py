"""A disk copy of what the parsers derive from their own pattern texts at import: each signature's required
literals (parsers.needles) and each pre-filter's trie pattern (parsers.signature).

Both are pure functions of a text, and deriving them again in every process was a third of `scan`'s start-up
(parsing ~300 pattern texts with `re`'s parser, folding ~10,000 literal characters into tries). The copy maps
each text to what was derived from it, so a changed pattern is simply a new key; the file's name carries a
digest of the code that derives (needles.py, signature.py, this file) and of the Python version (whose `re`
parser it reads), so a change to either starts a new copy instead of trusting an old one. A copy that is
missing, unreadable or of another shape is ignored; a new one is written whole (a temporary file renamed) at
exit, only when something was derived that it did not hold, and never by a process that cannot write there.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, TypeVar

from parsers.cachedir import user_cache_dir, write_copy

T = TypeVar("T")

_HERE = Path(__file__).resolve().parent
_CODE = ("needles.py", "signature.py", "derived.py")
_memo: dict[str, dict[str, Any]] | None = None
_dirty = False
_path: Path | None = None


def table(kind: str) -> dict[str, Any]:
    """The copy's table for one kind of derivation (`needles`, `trie`), text → what was derived from it; an
    entry added with `keep` is written at exit."""
    global _memo
    if _memo is None:
        _memo = _load()
    return _memo.setdefault(kind, {})


def keep(kind: str, key: str, value: T) -> T:
    """Record a derivation the copy did not hold, and return it."""
    global _dirty
    if not _dirty:
        _dirty = True
        atexit.register(_save)
    table(kind)[key] = value
    return value


def _copy_path() -> Path | None:
    cache = user_cache_dir()
    if cache is None:
        return None
    digest = hashlib.sha256(sys.version.encode())
    for name in _CODE:
        digest.update(b"\0" + (_HERE / name).read_bytes())
    return cache / f"derived-{digest.hexdigest()[:32]}.json"


def _load() -> dict[str, dict[str, Any]]:
    global _path
    try:
        _path = _copy_path()
        held = json.loads(_path.read_text(encoding="utf-8")) if _path is not None else {}
    except (OSError, ValueError):
        return {}
    if not isinstance(held, dict) or not all(isinstance(v, dict) for v in held.values()):
        return {}
    return held


def _save() -> None:
    if _path is None or _memo is None:
        return
    write_copy(_path, json.dumps(_memo, ensure_ascii=False), "derived-*.json")
