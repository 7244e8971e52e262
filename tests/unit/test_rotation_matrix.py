"""Rotation matrix: writer {keeps file open, reopens per line} × every logrotate style × {inotify, polling}.

Each case writes numbered lines before, across and after a rotation, with lines still unread at the
moment of rotation, and asserts the exact multiset delivered to the store: nothing lost, nothing twice.
With inotify, every step must also wake the loop (so the daemon reacts without waiting a poll interval).
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.sinks.store import Store
from agent.sources.tailer import TailOptions
from agent.sources.wake import Waker
from tests.conftest import Follow

ROTATIONS = ["rename_create", "copytruncate", "create_from_temp", "delete_recreate", "symlink_swap"]


class Writer:
    """Appends numbered lines to `path`, either through one long-lived handle or opening per line."""

    def __init__(self, path: Path, keep_open: bool) -> None:
        self.path = path
        self.keep_open = keep_open
        self.fd: int | None = None
        self.next = 0

    def write(self, count: int) -> None:
        for _ in range(count):
            data = f"line-{self.next:05d}\n".encode()
            self.next += 1
            if self.keep_open:
                if self.fd is None:
                    self.reopen()
                assert self.fd is not None
                os.write(self.fd, data)
            else:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                os.write(fd, data)
                os.close(fd)

    def reopen(self) -> None:
        """What a server does on SIGHUP (or logrotate's postrotate): close and open the path again."""
        if self.fd is not None:
            os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def rotate(style: str, path: Path, generation: int) -> None:
    """Rotate `path` the way logrotate (or a server) does for `style`."""
    rotated = path.with_name(f"{path.name}.{generation}")
    if style == "rename_create":
        path.rename(rotated)
        path.touch()
    elif style == "copytruncate":
        shutil.copyfile(path, rotated)
        os.truncate(path, 0)
    elif style == "create_from_temp":  # logrotate's `create`: the new file appears under its name at once
        temp = path.with_name(f".{path.name}.tmp")
        temp.touch()
        path.rename(rotated)
        temp.replace(path)
    elif style == "delete_recreate":
        path.unlink()
        path.touch()
    elif style == "symlink_swap":
        target = path.parent / "targets" / f"app-{generation}.log"
        target.touch()
        link = path.with_name(".link.tmp")
        link.symlink_to(target)
        link.replace(path)


@pytest.fixture(params=["inotify", "polling"])
def waker(request: pytest.FixtureRequest) -> Iterator[Waker]:
    w = Waker(use_inotify=request.param == "inotify")
    yield w
    w.close()


@pytest.mark.parametrize("keep_open", [True, False], ids=["keeps_open", "reopens"])
@pytest.mark.parametrize("style", ROTATIONS)
def test_rotation_delivers_every_line_once(tmp_path: Path, store: Store, waker: Waker, style: str,
                                          keep_open: bool) -> None:
    path = tmp_path / "app.log"
    if style == "symlink_swap":
        (tmp_path / "targets").mkdir()
        (tmp_path / "targets" / "app-0.log").touch()
        path.symlink_to(tmp_path / "targets" / "app-0.log")
    follow = Follow(store, str(path), TailOptions(start_at="beginning", rotate_wait_seconds=5.0))
    writer = Writer(path, keep_open)
    clock = iter(range(1000))

    def step() -> None:
        if waker.inotify:
            assert waker.wait(timeout=10.0), "a file change did not wake the loop"
        follow.step(next(clock))
        waker.watch(follow.tailer.watch_dirs())  # as the daemon does after every poll

    follow.step(next(clock))
    waker.watch(follow.tailer.watch_dirs())
    for generation in range(1, 4):
        writer.write(10)
        step()
        writer.write(10)  # still unread when the rotation happens
        rotate(style, path, generation)
        writer.write(5)  # a long-lived handle still writes to the old file (or copytruncate's truncated one)
        step()
        if keep_open:
            writer.reopen()
        writer.write(5)
        step()
    writer.close()
    for _ in range(10):  # let rotate_wait pass so drained files are closed
        follow.step(next(clock))

    delivered = Counter(follow.texts())
    expected = Counter(f"line-{n:05d}" for n in range(writer.next))
    assert delivered == expected
    stats = follow.tailer.stats()
    if style == "copytruncate":
        assert stats.truncations_total == 3
    else:
        assert stats.rotations_total == 3


@pytest.mark.parametrize("style", [s for s in ROTATIONS if s != "delete_recreate"])
def test_rotation_while_the_agent_is_down_loses_nothing(tmp_path: Path, store: Store, style: str) -> None:
    """The agent crashes with lines unread; the file is rotated (twice) before it comes back.

    delete + recreate is left out: a file deleted while no one holds it open is gone for every tool. A
    symlink is swapped once: a target created and swapped away while the agent was down is not next to
    anything the agent knows, so nothing can find it.
    """
    path = tmp_path / "app.log"
    if style == "symlink_swap":
        (tmp_path / "targets").mkdir()
        (tmp_path / "targets" / "app-0.log").touch()
        path.symlink_to(tmp_path / "targets" / "app-0.log")
    follow = Follow(store, str(path), TailOptions(start_at="beginning", rotate_wait_seconds=5.0))
    writer = Writer(path, keep_open=False)
    writer.write(10)
    follow.step(0)
    writer.write(10)  # unread when the agent dies
    follow.tailer.close(0)  # a crash: nothing it still held is committed
    for generation in (1,) if style == "symlink_swap" else (1, 2):
        rotate(style, path, generation)
        writer.write(10)
    follow.restart()
    for now in range(1, 12):
        follow.step(now)
    assert Counter(follow.texts()) == Counter(f"line-{n:05d}" for n in range(writer.next))
