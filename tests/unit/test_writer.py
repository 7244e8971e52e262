"""The daemon's write path against real SQLite failures: a full file, a held write lock, a corrupt file.

Each condition is produced by the real engine (SQLite's own max_page_count gives a real SQLITE_FULL; a
second real connection holds the lock; a file of garbage is really not a database). After it clears,
everything buffered lands exactly once, with its cursors.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from agent.bookkeeping import Cursor
from agent.errors import StoreError
from agent.records import CapacityFact, Event, EventKind, Phase, Server, Severity
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.sinks.writer import ResilientWriter

PATH = "/var/log/vllm.log"


def event(offset: int) -> Event:
    return Event(float(offset), "vllm", Server.VLLM, EventKind.PREEMPTION, Severity.WARNING, Phase.RUNTIME,
                 "preempted " + "x" * 200, {"n": offset}, PATH, offset)


def cursor(offset: int) -> Cursor:
    return Cursor("vllm", PATH, 1, 2, "8:00", offset, "1:2:ab", float(offset))


def batch(start: int, n: int) -> tuple[list[object], list[Cursor]]:
    """n events at offsets start.. and the cursor after them, as one tick of the loop produces."""
    return [event(o) for o in range(start, start + n)], [cursor(start + n)]


def stored_offsets(db: Path) -> list[int]:
    with Store.open_readonly(db) as store:
        return sorted(e.offset or 0 for e in Queries(store).recent_events(100_000))


def stored_cursor(db: Path) -> int:
    with Store.open_readonly(db) as store:
        return store.cursors("vllm")[0].offset


def test_a_full_store_buffers_and_everything_lands_once_when_room_is_made(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "agent.db"
    cap: list[int | None] = [200_000]  # a few pages over the empty schema
    writer = ResilientWriter(lambda: Store.open(db, hard_max_bytes=cap[0]), max_buffered_records=100_000)
    counted = 0
    now, offset = 0.0, 0
    with caplog.at_level(logging.WARNING, logger="agent.sinks.writer"):
        while writer.stats().up or offset == 0:  # fill until the real engine says SQLITE_FULL
            records, cursors = batch(offset, 50)
            counted += len(writer.commit(records, cursors, now=now).new_events)
            now, offset = now + 60.0, offset + 50
        assert "full" in (writer.stats().last_error or "")
        for _ in range(3):  # still full: buffered, retried, logged once
            records, cursors = batch(offset, 50)
            counted += len(writer.commit(records, cursors, now=now).new_events)
            now, offset = now + 60.0, offset + 50
        stats = writer.stats()
        assert (stats.up, stats.write_errors_total, stats.dropped_records_total) == (False, 4, 0)
        assert stats.buffered_records >= 200
        cap[0] = None  # the operator freed space
        records, cursors = batch(offset, 50)
        counted += len(writer.commit(records, cursors, now=now).new_events)
        offset += 50
    stats = writer.stats()
    assert (stats.up, stats.buffered_records, stats.last_error) == (True, 0, None)
    assert counted == offset  # every event reported new exactly once
    writer.close()
    assert stored_offsets(db) == list(range(offset))
    assert stored_cursor(db) == offset
    with Store.open_readonly(db) as store:
        assert store.load_totals() == {("events_total", ("vllm", "vllm", "preemption")): float(offset)}
    failures = [r for r in caplog.records if "store write failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.ERROR
    assert [r.levelno for r in caplog.records if "writable again" in r.getMessage()] == [logging.WARNING]


def test_a_write_lock_held_elsewhere_buffers_with_back_off_and_lands_once_released(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    writer = ResilientWriter(lambda: Store.open(db, busy_timeout_ms=20), retry_seconds=(5.0, 30.0))
    assert writer.open(0.0)
    writer.commit(*batch(0, 10), now=0.0)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # a second real connection holds the write lock
    try:
        assert writer.commit(*batch(10, 10), now=1.0).inserted == 0
        stats = writer.stats()
        assert not stats.up and "locked" in (stats.last_error or "") and stats.buffered_records == 10
        writer.commit(*batch(20, 10), now=2.0)  # inside the back-off: not even tried
        assert writer.stats().write_errors_total == 1 and writer.stats().buffered_records == 20
        writer.commit(*batch(30, 10), now=6.0)  # tried again, still locked; the back-off doubles
        writer.commit(*batch(40, 10), now=10.0)
        assert writer.stats().write_errors_total == 2
    finally:
        other.execute("COMMIT")
        other.close()
    result = writer.commit(*batch(50, 10), now=16.0)
    assert result.inserted == 50 and [e.offset for e in result.new_events] == list(range(10, 60))
    assert writer.stats().up and writer.stats().buffered_records == 0
    writer.close()
    assert stored_offsets(db) == list(range(60)) and stored_cursor(db) == 60


def test_a_corrupt_file_is_reported_and_buffered_until_it_is_moved_aside(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    db.write_bytes(b"this is not an SQLite database\n" * 200)
    writer = ResilientWriter(lambda: Store.open(db), retry_seconds=(1.0, 1.0))
    assert not writer.open(0.0) and writer.store is None
    assert "corrupt" in (writer.stats().last_error or "")
    writer.commit(*batch(0, 10), now=1.0)
    writer.commit(*batch(10, 10), now=2.0)
    assert writer.stats().buffered_records == 20 and writer.stats().write_errors_total == 3
    db.rename(tmp_path / "agent.db.corrupt")  # what the hint tells the operator to do
    writer.commit(*batch(20, 10), now=3.0)
    assert writer.stats().up and writer.store is not None
    # The file is replaced under the running writer: it notices, reopens, and buffers until it is usable.
    for suffix in ("", "-wal", "-shm"):  # a WAL left behind would belong to the next file at this path
        Path(f"{db}{suffix}").rename(tmp_path / f"good.db{suffix}")
    db.write_bytes(b"garbage" * 1000)
    writer.commit(*batch(30, 10), now=4.0)
    assert not writer.stats().up and writer.stats().buffered_records == 10
    db.unlink()
    writer.commit([], [], now=5.0)
    writer.close()
    assert stored_offsets(tmp_path / "good.db") == list(range(30))
    assert stored_offsets(db) == list(range(30, 40)) and stored_cursor(db) == 40


def test_a_full_buffer_drops_the_oldest_records_and_keeps_their_cursors(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "agent.db"
    writer = ResilientWriter(lambda: Store.open(db, busy_timeout_ms=0), max_buffered_records=25,
                             retry_seconds=(1.0, 1.0))
    writer.open(0.0)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with caplog.at_level(logging.ERROR, logger="agent.sinks.writer"):
        for i in range(4):
            writer.commit(*batch(i * 10, 10), now=float(i))
        writer.commit([], [cursor(45)], now=4.0)  # a tick that read nothing new but moved its cursor
    stats = writer.stats()
    assert (stats.buffered_records, stats.dropped_records_total) == (25, 15)
    assert len([r for r in caplog.records if "buffer full" in r.getMessage()]) == 1
    other.execute("COMMIT")
    other.close()
    writer.flush(10.0)
    writer.close()
    assert stored_offsets(db) == list(range(15, 40))  # the newest survive
    assert stored_cursor(db) == 45  # and the cursor moved on past the dropped span: never behind stored data


def test_a_record_type_with_no_table_raises_at_once_and_buffers_nothing(tmp_path: Path) -> None:
    writer = ResilientWriter(lambda: Store.open(tmp_path / "agent.db"))
    with pytest.raises(StoreError, match="no table for record type str"):
        writer.commit(["not a record"], [cursor(1)], now=0.0)
    assert writer.stats().buffered_records == 0 and writer.stats().write_errors_total == 0


def test_totals_wait_in_the_buffer_and_the_latest_value_lands(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    writer = ResilientWriter(lambda: Store.open(db, busy_timeout_ms=0), retry_seconds=(1.0, 1.0))
    writer.open(0.0)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    writer.commit([], totals={("lines_total", ("vllm",)): 5.0}, now=1.0)
    writer.commit([], totals={("lines_total", ("vllm",)): 9.0}, now=3.0)
    other.execute("COMMIT")
    other.close()
    writer.commit([], now=5.0)
    assert writer.store is not None and writer.store.load_totals() == {("lines_total", ("vllm",)): 9.0}
    writer.close()


def test_prune_failures_are_counted_not_raised(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    writer = ResilientWriter(lambda: Store.open(db, busy_timeout_ms=0, retention_days=1.0))
    writer.commit(*batch(0, 10), now=0.0)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    assert writer.prune(10 * 86400.0) == 0
    other.execute("COMMIT")
    other.close()
    assert writer.stats().write_errors_total == 1 and not writer.stats().up
    writer.commit([], [cursor(10)], now=20 * 86400.0)
    assert writer.prune(20 * 86400.0) == 10 and writer.stats().pruned_rows_total == 10
    writer.close()


def test_a_batch_sqlite_cannot_bind_is_dropped_and_counted_not_retried_forever(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    writer = ResilientWriter(lambda: Store.open(db))
    bad = CapacityFact(1.0, "vllm", "model", [1, 2])  # type: ignore[arg-type]  # a parser bug: not a value
    writer.commit([event(0), bad], [cursor(1)], now=0.0)
    writer.commit(*batch(1, 5), now=1.0)
    stats = writer.stats()
    assert (stats.up, stats.dropped_records_total, stats.buffered_records) == (True, 2, 0)
    writer.close()
    assert stored_offsets(db) == [1, 2, 3, 4, 5] and stored_cursor(db) == 6


def test_stats_are_a_snapshot_with_the_file_size(tmp_path: Path) -> None:
    writer = ResilientWriter(lambda: Store.open(tmp_path / "agent.db"))
    assert writer.stats().db_bytes is None and not writer.stats().up
    writer.commit(*batch(0, 100), now=0.0)
    assert (writer.stats().db_bytes or 0) >= (tmp_path / "agent.db").stat().st_size > 0
    writer.close()


def test_batches_sooner_than_the_spacing_are_held_and_land_together_with_their_cursors(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    writer = ResilientWriter(lambda: Store.open(db), commit_seconds=1.0, commit_records=1000)
    assert writer.commit(*batch(0, 10), now=0.0).inserted == 10  # after a quiet spell: at once
    assert writer.held_for(0.0) is None
    assert writer.commit(*batch(10, 10), now=0.3).inserted == 0  # 0.3 s after the last write: held
    assert writer.commit(*batch(20, 10), now=0.6).inserted == 0
    assert writer.held_for(0.6) == pytest.approx(0.4)  # the loop wakes then even if nothing is written
    assert writer.stats().buffered_records == 20
    # A crash now loses nothing acknowledged: the stored cursor is still where the stored records end.
    assert stored_offsets(db) == list(range(10)) and stored_cursor(db) == 10
    result = writer.commit(*batch(30, 10), now=1.0)  # the spacing has passed: everything held lands
    assert [e.offset for e in result.new_events] == list(range(10, 40))
    assert stored_offsets(db) == list(range(40)) and stored_cursor(db) == 40
    assert writer.held_for(1.0) is None and writer.stats().buffered_records == 0
    writer.close()


def test_enough_held_records_are_written_at_once_and_flush_writes_the_rest(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    writer = ResilientWriter(lambda: Store.open(db), commit_seconds=5.0, commit_records=25)
    writer.commit(*batch(0, 10), now=0.0)
    assert writer.commit(*batch(10, 10), now=0.1).inserted == 0
    assert writer.commit(*batch(20, 15), now=0.2).inserted == 25  # 10 + 15 held ≥ 25: written, spacing or not
    assert writer.commit(*batch(35, 5), now=0.3).inserted == 0
    assert writer.flush(0.4).inserted == 5  # shutdown: at once
    writer.close()
    assert stored_offsets(db) == list(range(40)) and stored_cursor(db) == 40


def test_held_batches_wait_out_a_locked_store_and_land_once(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    writer = ResilientWriter(lambda: Store.open(db, busy_timeout_ms=0), retry_seconds=(1.0, 1.0),
                             commit_seconds=0.5)
    writer.commit(*batch(0, 10), now=0.0)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    writer.commit(*batch(10, 10), now=0.6)  # due, but locked: kept, retried after the back-off
    writer.commit(*batch(20, 10), now=0.9)
    assert writer.held_for(0.9) == pytest.approx(0.7) and not writer.stats().up
    other.execute("COMMIT")
    other.close()
    assert writer.commit(*batch(30, 10), now=1.6).inserted == 30
    writer.close()
    assert stored_offsets(db) == list(range(40)) and stored_cursor(db) == 40


def test_a_held_batch_sqlite_cannot_bind_is_dropped_and_the_batches_around_it_land(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    writer = ResilientWriter(lambda: Store.open(db), commit_seconds=1.0)
    writer.commit(*batch(0, 5), now=0.0)
    writer.commit(*batch(5, 5), now=0.2)  # held
    bad = CapacityFact(1.0, "vllm", "model", [1, 2])  # type: ignore[arg-type]  # a parser bug: not a value
    writer.commit([event(10), bad], [cursor(11)], now=0.4)  # held
    result = writer.commit(*batch(11, 5), now=1.0)  # due: the transaction fails on `bad`, then one by one
    assert [e.offset for e in result.new_events] == [*range(5, 10), *range(11, 16)]
    stats = writer.stats()
    assert (stats.up, stats.dropped_records_total, stats.buffered_records) == (True, 2, 0)
    writer.close()
    assert stored_offsets(db) == [*range(10), *range(11, 16)] and stored_cursor(db) == 16
