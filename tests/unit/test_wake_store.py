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


def test_wake_ends_a_wait_and_a_removed_directory_wakes_and_unwatches(tmp_path: Path) -> None:
    import time

    waker = Waker(use_inotify=True)
    try:
        started = time.monotonic()
        waker.wake()
        assert waker.wait(5) and time.monotonic() - started < 1, "wake() ends the wait at once"
        assert not waker.wait(0.05), "one wake is consumed by one wait"
        if not waker.inotify:
            return
        logs = tmp_path / "logs"
        logs.mkdir()
        waker.watch([str(logs)])
        logs.rmdir()
        assert waker.wait(5), "the watched directory went away: the loop must look"
        waker.watch([])  # the watch is gone already; dropping it again is no error
    finally:
        waker.close()


def test_many_appends_between_two_waits_are_one_wake(tmp_path: Path) -> None:
    waker = Waker(use_inotify=True)
    try:
        if not waker.inotify:
            return
        waker.watch([str(tmp_path)])
        with (tmp_path / "vllm.log").open("a") as handle:
            for i in range(2000):
                handle.write(f"line {i}\n")
                handle.flush()
        assert waker.wait(5)
        assert not waker.wait(0.05), "the 2,000 appends were read as one batch, nothing is left over"
    finally:
        waker.close()


def test_a_hard_link_to_the_store_or_its_wal_in_a_watched_glob_is_never_read(tmp_path: Path) -> None:
    """The own-store exclusion compares (device, inode), not names: links named like logs are the store."""
    import sqlite3
    import time

    from agent.config import load_config
    from agent.daemon.loop import Daemon

    logs = tmp_path / "logs"
    logs.mkdir()
    written = [f"(APIServer pid=1) INFO 11-29 09:00:{i % 60:02d} [api.py:1] line {i}" for i in range(40)]
    (logs / "vllm.log").write_text("".join(line + "\n" for line in written[:20]))
    config = tmp_path / "config.yaml"
    config.write_text(f"sources: [{{path: '{logs}/*', server: vllm, name: vllm, start_at: beginning}}]\n"
                      f"nvml: {{enabled: false}}\nstore: {{path: {tmp_path / 'agent.db'}}}\n")
    daemon = Daemon(load_config(config))
    now = time.time()
    daemon.start(now)
    daemon.run_once(now)
    wal = tmp_path / "agent.db-wal"
    (logs / "store.log").hardlink_to(tmp_path / "agent.db")
    if wal.exists():
        (logs / "wal.log").hardlink_to(wal)
    with (logs / "vllm.log").open("a") as out:
        out.write("".join(line + "\n" for line in written[20:]))
    for step in range(1, 6):
        daemon.run_once(now + step)
    snap = daemon.snapshot()
    daemon.close(now + 7)
    assert snap.totals[("source_lines_total", ("vllm",))] == 40
    with sqlite3.connect(tmp_path / "agent.db") as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
