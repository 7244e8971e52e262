"""`scan`'s progress bar: bytes read of a large file, on stderr, only when stderr is a terminal.

stdout carries the report (or the JSON lines), so the bar never goes there; a pipe, a redirected stderr,
stdin and files under `PROGRESS_MIN_BYTES` get none (a small file is read before a bar would help).
`rich` is imported only when a bar is drawn, and the bar is redrawn by the reader (at most ten times a
second, once per megabyte read at most), not by a thread: `--jobs` forks after it starts.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from agent.sources.bounded import BoundedLines

PROGRESS_MIN_BYTES = 64 << 20
READ_BYTES = 1 << 20  # the reader's buffer: progress is told once per refill

Progress = Callable[[int], None]  # bytes of the file read so far


def wants_progress(size: int | None, tty: bool, min_bytes: int = PROGRESS_MIN_BYTES) -> bool:
    """A bar for a file of `size` bytes (None: stdin or not a regular file) when stderr is a terminal."""
    return tty and size is not None and size >= min_bytes


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


@contextmanager
def progress_bar(label: str, size: int | None, stream: IO[str], tty: bool | None = None,
                 min_bytes: int = PROGRESS_MIN_BYTES) -> Iterator[Progress | None]:
    """A `Progress` callback drawing a bar on `stream` (None when `wants_progress` says no); `tty` overrides
    `stream.isatty()` (tests). The bar is removed when done, so the terminal keeps only the report."""
    if not wants_progress(size, _isatty(stream) if tty is None else tty, min_bytes):
        yield None
        return
    assert size is not None
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn
    from rich.progress import Progress as Bar

    console = Console(file=stream, force_terminal=True, stderr=True)
    with Bar(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
             TimeRemainingColumn(), console=console, transient=True, auto_refresh=False) as bar:
        task = bar.add_task(label, total=size)
        last = 0.0

        def tell(done: int) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= 0.1 or done >= size:
                last = now
                bar.update(task, completed=min(done, size), refresh=True)
        yield tell


class _Counted(io.RawIOBase):
    """A raw file that tells `progress` how many bytes it has given (per buffer refill, not per line)."""

    def __init__(self, raw: Any, progress: Progress) -> None:
        super().__init__()
        self._raw = raw
        self._progress = progress
        self._done = 0

    def readinto(self, buffer: Any) -> int | None:
        n: int | None = self._raw.readinto(buffer)
        if n:
            self._done += n
            self._progress(self._done)
        return n

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return bool(self._raw.seekable())

    def seek(self, offset: int, whence: int = 0) -> int:
        at: int = self._raw.seek(offset, whence)
        self._done = at
        return at

    def tell(self) -> int:
        at: int = self._raw.tell()
        return at

    def fileno(self) -> int:
        fd: int = self._raw.fileno()
        return fd


def counted(handle: io.BufferedReader, progress: Progress) -> io.BufferedReader:
    """`handle` read through a buffer that tells `progress` the bytes read (close `handle` itself)."""
    return BoundedLines(_Counted(handle.raw, progress), READ_BYTES)
