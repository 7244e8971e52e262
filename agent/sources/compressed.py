"""Finishing a rotation that was compressed before it was read to its end (logrotate `compress`
without `delaycompress`, while the agent was down): its start and everything from just before the
cursor on, decompressed into a memory file the tailer reads like any other.

Bounded, because the archive is read in the daemon's loop and a compressed file can expand a
thousandfold (4 MB of gzip is 4 GiB of zeros): at most MAX_RATIO times the archive's size and at most
MAX_DECOMPRESSED_BYTES are decompressed in all (about a second of the loop), and at most MAX_TAIL_BYTES
are kept after the cursor (the memory file is in RAM). What lies beyond is not read; a warning says so.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import logging
import lzma
import os
import zlib
from pathlib import Path

from agent.bookkeeping import Cursor
from agent.sources.identity import NEAR_BYTES, READ_CHUNK_BYTES, fingerprint_length, near_matches

# The compressions a rotated file may be finished from (logrotate `compress` without `delaycompress`).
DECOMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2")
MAX_RATIO = 200  # text logs compress 10–30×; zeros 1000×
MAX_DECOMPRESSED_BYTES = 512 << 20
MAX_TAIL_BYTES = 64 << 20

log = logging.getLogger("deepinfer.tailer")


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
        budget = min(MAX_DECOMPRESSED_BYTES, MAX_RATIO * max(Path(path).stat().st_size, 1 << 16))
        if cursor.offset > budget:
            log.warning("%s: not finished from the archive: the cursor (%d bytes in) lies beyond what is "
                        "decompressed at most (%d bytes)", path, cursor.offset, budget)
            return None
        end = min(budget, keep_from + MAX_TAIL_BYTES)
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
            while pos < end and (chunk := src.read(min(READ_CHUNK_BYTES * 16, end - pos))):
                os.pwrite(fd, chunk, pos)
                pos += len(chunk)
            if pos >= end and src.read(1):
                log.warning("%s: finished from the archive up to byte %d only: the rest (it expands more than "
                            "%d× or past %d MiB after the cursor) is not read", path, pos, MAX_RATIO,
                            MAX_TAIL_BYTES >> 20)
        if pos < cursor.offset or not near_matches(fd, cursor.offset, cursor.near):
            os.close(fd)
            return None
        return fd
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        if fd >= 0:
            os.close(fd)
        return None
