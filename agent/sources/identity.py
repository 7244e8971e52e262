"""Knowing a file again, whatever it is called now: the tailer's file identities.

A file is (device, inode) plus a fingerprint of its first bytes (inodes are reused); a cursor also
keeps a fingerprint of the bytes just before it, which must still be there when it is resumed. Rotated
files are named after the live one (`x.log.1`, `x.log-20250101`, `x.log.2.gz`). `TailedFile` is one
open incarnation of a file and the line being assembled from it.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from agent.bookkeeping import Cursor
from agent.sources.lines import LineAssembler

FINGERPRINT_BYTES = 128
NEAR_BYTES = 64  # the bytes before a cursor that must still be there when it is resumed
READ_CHUNK_BYTES = 64 * 1024
COMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2", ".zst", ".lz4", ".zip")
# A rotation suffix: `.1`, `-20250101`, `.2025-01-01`, `-1701234567`, optionally compressed.
_ROTATION_SUFFIX = re.compile(r"(?:[.-]\d[\w-]*)+(?:\.(?:gz|xz|bz2|zst|lz4|zip))?$")


def fingerprint(fd: int, length: int) -> str:
    """`"<n>:<hash>"` of the first n ≤ `length` bytes readable through `fd` (n is what the file holds)."""
    head = os.pread(fd, length, 0)
    return f"{len(head)}:{hashlib.blake2b(head, digest_size=8).hexdigest()}"


def fingerprint_length(stored: str) -> int:
    return int(stored.split(":", 1)[0])


def fingerprint_matches(fd: int, stored: str) -> bool:
    """Whether the file behind `fd` starts with the bytes `stored` was taken from."""
    return fingerprint(fd, fingerprint_length(stored)) == stored


def near_fingerprint(fd: int, offset: int) -> str:
    """`"<n>:<hash>"` of the n ≤ NEAR_BYTES bytes before `offset` ("" at offset 0)."""
    start = max(0, offset - NEAR_BYTES)
    if offset <= 0:
        return ""
    return near_hash(os.pread(fd, offset - start, start), offset)


def near_hash(data: bytes, offset: int) -> str:
    """near_fingerprint of `data`, the bytes just before `offset`."""
    return f"{len(data)}:{hashlib.blake2b(data, digest_size=8).hexdigest()}" if offset > 0 else ""


def near_matches(fd: int, offset: int, stored: str) -> bool:
    """Whether the bytes before `offset` are still those `stored` was taken from (True when unknown)."""
    return not stored or near_fingerprint(fd, offset) == stored


def rotation_base(name: str) -> str:
    """The live name a rotated file was shifted from: `vllm.log.2.gz` → `vllm.log`."""
    base = _ROTATION_SUFFIX.sub("", name)
    return base or name


@dataclass
class TailedFile:
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


def rotated_siblings(path: str) -> list[os.DirEntry[str]]:
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


def same_start(f: TailedFile, other: TailedFile | Cursor) -> bool:
    """Whether `f` is another inode starting with the (non-empty) bytes `other` was fingerprinted from."""
    fp = other.fp if isinstance(other, TailedFile) else other.fingerprint
    return other.inode != f.inode and fingerprint_length(fp) > 0 and fingerprint_matches(f.fd, fp)
