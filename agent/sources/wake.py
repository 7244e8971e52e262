"""Wake the source loop when a watched directory changes: the only module that imports watchdog.

The tailer never depends on this for correctness: it finds everything by polling. inotify only cuts the
latency from "up to one poll interval" to a few milliseconds. When inotify cannot be used (network
filesystems, the per-user watch limit, `use_inotify: false`), `wait` is a plain timeout and the loop
polls at its interval.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch


class _Signal(FileSystemEventHandler):
    """Sets the loop's event on a change, except one that only touches ignored files (the agent's own store,
    which its every commit writes) or only says the watched directory itself changed (every file event in
    it comes with one; the file event is the one that counts)."""

    def __init__(self, event: threading.Event, ignored: frozenset[str]) -> None:
        self._event = event
        self._ignored = ignored

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory and event.event_type == "modified":
            return
        paths = {os.fsdecode(event.src_path)}
        if getattr(event, "dest_path", ""):
            paths.add(os.fsdecode(event.dest_path))
        if paths <= self._ignored:
            return
        self._event.set()


class Waker:
    """`wait(timeout)` returns early (True) when a file under a watched directory changes."""

    def __init__(self, use_inotify: bool = True, ignore: Iterable[str] = ()) -> None:
        self._event = threading.Event()
        self._ignored = frozenset(str(Path(path).absolute()) for path in ignore)
        self._observer: BaseObserver | None = None
        self._watches: dict[str, ObservedWatch] = {}
        self.watch_errors_total = 0
        if use_inotify:
            observer = Observer()
            observer.daemon = True
            try:
                observer.start()
            except OSError:
                self.watch_errors_total += 1
            else:
                self._observer = observer

    @property
    def inotify(self) -> bool:
        """Whether file events wake the loop (False: polling only)."""
        return self._observer is not None

    def watch(self, directories: Iterable[str]) -> None:
        """Watch exactly these directories from now on (new ones added, vanished ones dropped)."""
        if self._observer is None:
            return
        wanted = set(directories)
        for gone in set(self._watches) - wanted:
            with contextlib.suppress(KeyError, OSError):  # the directory may be gone already
                self._observer.unschedule(self._watches.pop(gone))
        for directory in wanted - set(self._watches):
            try:
                self._watches[directory] = self._observer.schedule(_Signal(self._event, self._ignored), directory,
                                                                   recursive=False)
            except OSError:  # vanished meanwhile, or out of inotify watches: polling covers it
                self.watch_errors_total += 1

    def wake(self) -> None:
        """End the current `wait` now (a signal asked the loop to stop or reload)."""
        self._event.set()

    def wait(self, timeout: float) -> bool:
        """Block until a change or `timeout` seconds; True when woken by a change."""
        woken = self._event.wait(timeout)
        self._event.clear()
        return woken

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join()
            self._observer = None
