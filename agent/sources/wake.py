"""Wake the source loop when a watched directory changes: the only module that imports inotify_simple.

The tailer never depends on this for correctness: it finds everything by polling. inotify only cuts the
latency from "up to one poll interval" to a few milliseconds. When inotify cannot be used (not Linux,
network filesystems, the per-user watch limit, `use_inotify: false`), `wait` is a plain timeout and the
loop polls at its interval.

No thread reads the events: `wait` blocks in `select` on the inotify descriptor (and on a pipe that `wake`
writes to), and reads whatever the kernel queued only then. While the loop works, the kernel merges each
new event with an identical unread one, so a file appended to 5,000 times between two steps costs one
event, not 5,000 (a reader thread draining the queue as it fills turned every append into Python objects).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import time
from collections.abc import Iterable
from pathlib import Path

from inotify_simple import INotify, flags

log = logging.getLogger(__name__)

# What changes a log directory: a file written, truncated, created, renamed in or out, deleted; the
# directory itself deleted or moved away. IN_ATTRIB is left out (a chmod or touch changes no content).
_MASK = (flags.MODIFY | flags.CLOSE_WRITE | flags.CREATE | flags.DELETE | flags.MOVED_FROM | flags.MOVED_TO
         | flags.DELETE_SELF | flags.MOVE_SELF)


class Waker:
    """`wait(timeout)` returns early (True) when a file under a watched directory changes."""

    def __init__(self, use_inotify: bool = True, ignore: Iterable[str] = ()) -> None:
        self._ignored = frozenset(str(Path(path).absolute()) for path in ignore)
        self._inotify: INotify | None = None
        self._dirs: dict[str, int] = {}  # watched directory → watch descriptor
        self._by_wd: dict[int, str] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._told = False  # a failure to watch is logged once: the loop polls, nothing is lost
        if use_inotify:
            try:
                self._inotify = INotify(nonblocking=True)
            except OSError as exc:  # no inotify here (or the instance limit is reached): polling covers it
                self._polling_only(f"inotify is unavailable ({exc.strerror or exc})")

    @property
    def inotify(self) -> bool:
        """Whether file events wake the loop (False: polling only)."""
        return self._inotify is not None

    def watch(self, directories: Iterable[str]) -> None:
        """Watch exactly these directories from now on (new ones added, vanished ones dropped)."""
        if self._inotify is None:
            return
        wanted = set(directories)
        for gone in set(self._dirs) - wanted:
            wd = self._dirs.pop(gone)
            self._by_wd.pop(wd, None)
            with contextlib.suppress(OSError):  # the directory may be gone already (its watch with it)
                self._inotify.rm_watch(wd)
        for directory in wanted - set(self._dirs):
            try:
                wd = self._inotify.add_watch(directory, _MASK)
            except OSError as exc:  # vanished meanwhile, or out of inotify watches: polling covers it
                self._polling_only(f"cannot watch {directory} ({exc.strerror or exc})")
                continue
            self._dirs[directory] = wd
            self._by_wd[wd] = directory

    def _polling_only(self, why: str) -> None:
        if not self._told:
            self._told = True
            log.info("%s: changes are found by polling at the source's poll interval instead (if the "
                     "watch limit was hit, raise fs.inotify.max_user_watches)", why)

    def wake(self) -> None:
        """End the current `wait` now (a signal asked the loop to stop or reload); safe in a signal handler."""
        with contextlib.suppress(BlockingIOError):  # a wake-up is already pending: one is enough
            os.write(self._wake_w, b"\0")

    def wait(self, timeout: float) -> bool:
        """Block until a change or `timeout` seconds; True when woken by a change (or by `wake`)."""
        deadline = time.monotonic() + timeout
        readable = [self._wake_r] + ([self._inotify.fileno()] if self._inotify is not None else [])
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                ready, _, _ = select.select(readable, [], [], remaining)
            except InterruptedError:  # a signal arrived: its handler calls wake() if it matters
                continue
            if not ready:
                return False
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
                return True
            if self._changed():
                return True
            if remaining <= 0:
                return False

    def _changed(self) -> bool:
        """Read the queued events; True unless every one only touched ignored files (the agent's own store,
        which its every commit writes)."""
        assert self._inotify is not None
        changed = False
        for event in self._inotify.read(timeout=0):
            if event.mask & flags.IGNORED:  # the directory went away: its watch is gone too
                self._dirs.pop(self._by_wd.pop(event.wd, ""), None)
                changed = True
                continue
            directory = self._by_wd.get(event.wd)
            if directory is None or not event.name or event.mask & flags.Q_OVERFLOW:
                changed = True  # the directory itself, an unknown watch, or events lost: look
                continue
            if os.path.join(directory, event.name) not in self._ignored:  # noqa: PTH118 (hot path)
                changed = True
        return changed

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
