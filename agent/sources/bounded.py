"""Saved logs opened so that reading them is bounded: no line costs more than MAX_LINE_BYTES of memory,
and opening one never blocks.

A copytruncate whose writer does not use O_APPEND leaves a hole of NULs as long as the old file (gigabytes,
without a newline), and a device such as /dev/zero never ends: read a line at a time, either one is a single
line that would be held whole. `BoundedLines` hands a longer line over in pieces of MAX_LINE_BYTES (each
read as a line of its own, its bytes all counted, so offsets and line numbers stay exact), as the daemon
keeps at most `max_line_bytes` of a line. `open_saved` refuses devices (their reading would not end) and
opens a FIFO without waiting for a writer: one that has none reads as empty instead of hanging the command.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO

MAX_LINE_BYTES = 1 << 20  # the daemon's default `max_line_bytes`
READ_BYTES = 1 << 16


class BoundedLines(io.BufferedReader):
    """A buffered reader whose lines (`readline`, iteration, `readlines`) are at most MAX_LINE_BYTES long;
    `cut` counts the pieces that ended without a newline, so a caller can count physical lines."""

    cut = 0

    def readline(self, size: int | None = -1) -> bytes:
        limit = MAX_LINE_BYTES if size is None or size < 0 else min(size, MAX_LINE_BYTES)
        line = super().readline(limit)
        if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
            self.cut += 1
        return line

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __iter__(self) -> BoundedLines:
        return self

    def readlines(self, hint: int | None = -1) -> list[bytes]:
        out: list[bytes] = []
        total = 0
        readline = self.readline
        while line := readline():
            out.append(line)
            total += len(line)
            if hint is not None and 0 < hint <= total:
                break
        return out


def open_saved(path: str | Path) -> BoundedLines:
    """`path` opened for reading, bounded: a regular file or a FIFO (never waiting for its writer); a
    directory or a device is an OSError that says so."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise OSError(errno.ENODEV, "a device, not a saved log (its reading would not end)", str(path))
        os.set_blocking(fd, True)  # a FIFO: reads now wait for data, and end when its writer leaves
        return BoundedLines(io.FileIO(fd, "rb", closefd=True), READ_BYTES)
    except BaseException:
        os.close(fd)
        raise


MAX_TEXT_FILE_BYTES = 16 << 20  # a config, a rule file, a model's config.json, a load-test payload


def read_small_text(path: str | Path, limit: int = MAX_TEXT_FILE_BYTES) -> str:
    """A small text file read whole (UTF-8; UnicodeDecodeError as `bytes.decode` raises it): only a regular
    file of at most `limit` bytes — a FIFO would wait for a writer for ever and a device never end, so
    both are an OSError that says so, as is a directory or a bigger file. `-` is standard input (to its end, at
    most `limit` bytes)."""
    if str(path) == "-":
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB: not a file of settings", "-")
        return data.decode("utf-8")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO or a device cannot be read whole)", str(path))
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB: not a file of settings", str(path))
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB: not a file of settings", str(path))
    return data.decode("utf-8")


def bounded(stream: BinaryIO) -> BoundedLines:
    """An already open stream (standard input) read through `BoundedLines`."""
    raw: Any = getattr(stream, "raw", stream)  # a buffered stream's raw one; else the stream itself
    return BoundedLines(raw, READ_BYTES)
