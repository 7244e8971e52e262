"""Finishing a rotation that was compressed before it was read to its end (logrotate `compress`
without `delaycompress`, while the agent was down): its start and everything from just before the
cursor on, decompressed into a memory file the tailer reads like any other."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import os
import zlib

from agent.bookkeeping import Cursor
from agent.sources.identity import NEAR_BYTES, READ_CHUNK_BYTES, fingerprint_length, near_matches

# The compressions a rotated file may be finished from (logrotate `compress` without `delaycompress`).
DECOMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2")


def _open_compressed(path: str, suffix: str) -> io.BufferedIOBase:
    if suffix == ".gz":
        return gzip.GzipFile(path, "rb")
    return lzma.LZMAFile(path, "rb") if suffix == ".xz" else bz2.BZ2File(path, "rb")


def decompress(path: str, suffix: str, cursor: Cursor) -> int | None:
    """A memory file holding `path`'s decompressed start and everything from just before the cursor
    on (the middle is a hole), or None when it is not the cursor's file."""
    length = fingerprint_length(cursor.fingerprint)
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
        if pos < cursor.offset or not near_matches(fd, cursor.offset, cursor.near):
            os.close(fd)
            return None
        return fd
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        if fd >= 0:
            os.close(fd)
        return None
