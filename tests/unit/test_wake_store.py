"""The daemon's own store files never wake its loop: every commit writes them, and a store kept in the
log directory would otherwise wake the loop after each of its own writes."""

from __future__ import annotations

from pathlib import Path

from agent.sources.patterns import store_files
from agent.sources.wake import Waker


def test_store_writes_do_not_wake_but_a_log_line_does(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    waker = Waker(use_inotify=True, ignore=store_files(str(db)))
    if not waker.inotify:
        waker.close()
        return  # no inotify here: the loop polls, and nothing wakes it
    try:
        waker.watch([str(tmp_path)])
        waker.wait(0.2)
        for suffix in ("", "-wal", "-shm", "-journal"):
            path = tmp_path / f"agent.db{suffix}"
            path.write_bytes(b"x" * 100)
            with path.open("ab") as handle:
                handle.write(b"more")
        (tmp_path / "agent.db-journal").unlink()
        assert not waker.wait(0.5)
        with (tmp_path / "vllm.log").open("a") as handle:
            handle.write("INFO line\n")
        assert waker.wait(5)
    finally:
        waker.close()


def test_store_files_name_the_companions_as_given_and_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    files = store_files(str(tmp_path / "link" / "a.db"))
    assert str(tmp_path / "link" / "a.db-wal") in files and str(real.resolve() / "a.db-shm") in files
