"""The daemon's write path to the store: never raise, buffer a bounded amount, retry, count, log once.

A full disk, a write lock held by another process or a corrupt file must not stop the agent: tailing,
NVML and the metrics go on. `ResilientWriter.commit` keeps every batch it could not write — records and
the cursors of the bytes they came from, still applied together, in order — and retries with back-off.
Before each retry it reopens the store, so a corrupt file that the operator moved aside, or a path that
now names another file, is replaced by a fresh store and what was buffered lands there, exactly once
(the store's unique keys make a retried batch idempotent).

When the buffer holds more than `max_buffered_records`, the oldest *records* are dropped and counted
(`dropped_records_total`); their cursors are kept and merged into the next batch. So the stored cursor
still moves forward with the tailer: the dropped lines are lost (counted, logged), never re-read as a
surprise after a restart, and no later batch can write a cursor behind data it already stored. Holding
the cursors back instead would re-read the dropped span only if the daemon happened to restart while
the rotated file still existed, and would make every later cursor wait on it.

Commits are spaced (`commit_seconds`, `commit_records`): a batch arriving at least `commit_seconds` after the
last write is written at once (an append after a quiet spell reaches the store and the counters with no added
delay); one arriving sooner is held, with its cursors, until that much time has passed or the held batches
carry `commit_records` records, and then the held batches are written together, records and cursors in **one**
transaction as before (transactions of at most `commit_records` records, or one batch: so is a buffer that
filled while the store was down). What was read but not yet written has not moved a stored cursor, so a crash
loses nothing: the restarted agent reads those bytes again. `flush` (shutdown, reload) writes at once.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from agent.bookkeeping import CommitResult, Cursor, JournalCursor, StoreStats
from agent.errors import StoreError, StoreVersionError
from agent.sinks.store import Batch, Store, TotalsKey
from agent.sinks.storefile import failure_hint
from agent.verdicts import StoredRecord

log = logging.getLogger(__name__)

CursorKey = tuple[str, str, str]

# SQLite errors that come from the batch itself, not from the database's state: retrying cannot help.
_BAD_BATCH = (sqlite3.ProgrammingError, sqlite3.InterfaceError, sqlite3.DataError)


def _key(cursor: Cursor | JournalCursor) -> CursorKey:
    if isinstance(cursor, JournalCursor):
        return ("journal", cursor.source, "")
    return ("file", cursor.source, cursor.file_key)


@dataclass
class _Batch:
    records: list[StoredRecord]
    cursors: tuple[Cursor | JournalCursor, ...]
    expired: tuple[Cursor, ...]
    now: float


def _merge(first: _Batch, second: _Batch, records: list[StoredRecord], now: float) -> _Batch:
    """One batch carrying `records` whose cursor writes equal applying `first`'s then `second`'s.

    Records and cursors live in different tables, so cursor writes may move past records; only the
    order of the cursor writes themselves matters.

    A commit deletes its expiries before writing its cursors; a cursor `second` expires (and does not
    refresh) must not survive from `first`.
    """
    cursors = {_key(c): c for c in first.cursors}
    for gone in second.expired:
        cursors.pop(_key(gone), None)
    cursors.update({_key(c): c for c in second.cursors})
    expired = {_key(c): c for c in (*first.expired, *second.expired)}
    return _Batch(records, tuple(cursors.values()), tuple(expired.values()), now)


class ResilientWriter:
    """Writes batches through `opener()`'s store; on failure keeps them (bounded) and retries later.

    `opener` opens the store (e.g. `functools.partial(Store.open, path, retention_days=…)`); it is called
    lazily and again before every retry. `store` is the open store for in-process reads, None while it
    cannot be opened. Use from the loop's thread; pass the loop's clock as `now`.
    """

    def __init__(self, opener: Callable[[], Store], max_buffered_records: int = 100_000, *,
                 retry_seconds: tuple[float, float] = (1.0, 30.0), commit_seconds: float = 0.0,
                 commit_records: int = 10_000) -> None:
        self._opener = opener
        self._max = max_buffered_records
        self._spacing = commit_seconds
        self._enough = commit_records
        self._written_at = float("-inf")  # the last successful write (the spacing runs from it)
        self._first_delay, self._max_delay = retry_seconds
        self._store: Store | None = None
        self._pending: deque[_Batch] = deque()
        self._totals: dict[TotalsKey, float] = {}
        self._buffered = 0
        self._up = False
        self._write_errors = 0
        self._dropped = 0
        self._pruned = 0
        self._db_bytes: int | None = None
        self._last_error: str | None = None
        self._failing = False  # inside a failure episode (logged once at its start)
        self._dropping = False  # the buffer overflowed in this episode (logged once)
        self._episode_errors = 0
        self._retry_at = float("-inf")
        self._delay = self._first_delay

    @property
    def store(self) -> Store | None:
        return self._store

    def open(self, now: float) -> bool:
        """Open the store now (at start-up, to report a problem at once); True when it is usable."""
        try:
            self._db_bytes = self._ensure_store().db_bytes()
        except StoreVersionError:
            raise  # a newer agent's store: waiting cannot fix it
        except StoreError as exc:
            self._fail(exc, now)
            return False
        self._recovered()
        return True

    def commit(self, records: Iterable[StoredRecord], cursors: Iterable[Cursor | JournalCursor] = (),
               expired: Iterable[Cursor] = (), *, totals: Mapping[TotalsKey, float] | None = None,
               now: float) -> CommitResult:
        """Write this batch after any buffered ones; return what landed in this call (new rows and events).

        Never raises for a store failure: the batch is kept and retried on a later call once the back-off
        has passed. A record type with no table is a bug and raises StoreError at once, unbuffered.
        `totals` are kept until written (a later value of a key replaces an earlier one). Within
        `commit_seconds` of the last write the batch is held (see the module's docstring) and nothing lands.
        """
        batch = _Batch(list(records), tuple(cursors), tuple(expired), now)
        Store.check(batch.records)
        if not batch.records and self._pending:
            # Cursors alone join the last buffered batch, so ticks that read nothing new add no batches.
            last = self._pending[-1]
            self._pending[-1] = _merge(last, batch, last.records, last.now)
        elif batch.records or batch.cursors or batch.expired:
            self._pending.append(batch)
            self._buffered += len(batch.records)
        if totals:
            self._totals.update(totals)
        result = self._drain(now) if now >= self._retry_at and self._due(now) else CommitResult()
        self._bound()
        return result

    def _due(self, now: float) -> bool:
        return now - self._written_at >= self._spacing or self._buffered >= self._enough

    def held_for(self, now: float) -> float | None:
        """Seconds until the held batches are due to be written (0: now), None when nothing is held: the loop
        must not sleep past it, or a quiet log would leave its last lines unwritten."""
        if not self._pending and not self._totals:
            return None
        return max(0.0, self._retry_at - now, self._written_at + self._spacing - now)

    def flush(self, now: float) -> CommitResult:
        """Try to write everything buffered now, ignoring the back-off (at shutdown)."""
        return self._drain(now)

    def prune(self, now: float) -> int:
        """Run the store's retention once; a failure is counted like a write failure, never raised."""
        if self._store is None or now < self._retry_at:
            return 0
        try:
            deleted = self._store.prune(now)
            self._db_bytes = self._store.db_bytes()
        except StoreError as exc:
            self._fail(exc, now)
            return 0
        self._pruned += deleted
        return deleted

    def stats(self) -> StoreStats:
        """A snapshot of the writer's self-metrics (see docs/store.md). Does no I/O, so the exporter may
        call it from its own thread; `db_bytes` is as of the last write or prune."""
        return StoreStats(up=self._up, write_errors_total=self._write_errors, dropped_records_total=self._dropped,
                          buffered_records=self._buffered, pruned_rows_total=self._pruned,
                          db_bytes=self._db_bytes if self._store is not None else None,
                          last_error=self._last_error)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- internals --------------------------------------------------------------------------------

    def _ensure_store(self) -> Store:
        if self._store is not None and self._store.replaced():
            log.warning("the store %s was deleted or replaced while the agent ran: opening the file now at that "
                        "path (a new one starts empty; the rows written before are in the old file, if kept)",
                        self._store.name)
            self.close()
        if self._store is None:
            self._store = self._opener()
        return self._store

    def _drain(self, now: float) -> CommitResult:
        result = CommitResult()
        if not self._pending and not self._totals:
            return result
        try:
            store = self._ensure_store()
            while self._pending or self._totals:
                held = self._front()
                batches: list[Batch] = [(b.records, b.cursors, b.expired, b.now) for b in held] or [((), (), (), now)]
                try:
                    result = result + store.commit_batches(batches, totals=self._totals or None)
                except StoreError as exc:
                    if not isinstance(exc.__cause__, _BAD_BATCH) or not any(b.records for b in held):
                        raise
                    result = result + self._drain_one_by_one(store)  # find the batch that can never be written
                    continue
                self._totals = {}
                for batch in held:
                    self._pending.popleft()
                    self._buffered -= len(batch.records)
            self._db_bytes = store.db_bytes()
        except StoreVersionError:
            raise
        except StoreError as exc:
            self._fail(exc, now)
            return result
        self._written_at = now
        self._recovered()
        return result

    def _front(self) -> list[_Batch]:
        """The oldest held batches that make one transaction: at most `commit_records` records (or the first
        batch, whatever its size), so a buffer that filled during a failure lands in bounded transactions,
        and a store with room for part of it takes that part."""
        out: list[_Batch] = []
        records = 0
        for batch in self._pending:
            if out and records + len(batch.records) > self._enough:
                break
            out.append(batch)
            records += len(batch.records)
        return out

    def _drain_one_by_one(self, store: Store) -> CommitResult:
        """The held batches one transaction each, so the one SQLite refuses as such is told apart and given
        up (`_reject`) instead of holding up everything behind it; raises on any other failure."""
        result = CommitResult()
        while self._pending:
            batch = self._pending[0]
            try:
                result = result + store.commit(batch.records, batch.cursors, batch.expired,
                                               totals=self._totals or None, now=batch.now)
            except StoreError as exc:
                if not isinstance(exc.__cause__, _BAD_BATCH) or not batch.records:
                    raise
                self._reject(batch, exc)  # this batch can never be written: retrying would block the rest
                continue
            self._totals = {}
            self._pending.popleft()
            self._buffered -= len(batch.records)
        return result

    def _reject(self, batch: _Batch, exc: StoreError) -> None:
        """Give up a batch's records that SQLite refuses as such (a value it cannot bind: a bug upstream),
        keeping its cursors; counted as dropped, logged every time (it should never happen)."""
        self._write_errors += 1
        self._dropped += len(batch.records)
        self._buffered -= len(batch.records)
        log.error("store refused a batch of %d records, dropped: %s", len(batch.records), exc)
        batch.records.clear()

    def _fail(self, exc: StoreError, now: float) -> None:
        self._write_errors += 1
        self._episode_errors += 1
        self._up = False
        self._last_error = f"{exc} ({failure_hint(exc)})"
        self.close()  # reopened before the next try: the file may be moved aside or replaced meanwhile
        if not self._failing:
            self._failing = True
            log.error("store write failed: %s; buffering up to %d records and retrying", self._last_error, self._max)
        self._retry_at = now + self._delay
        self._delay = min(self._delay * 2, self._max_delay)

    def _recovered(self) -> None:
        if self._failing:
            log.warning("store writable again after %d failed attempt(s); %d record(s) dropped so far",
                        self._episode_errors, self._dropped)
        self._up = True
        self._failing = self._dropping = False
        self._episode_errors = 0
        self._last_error = None
        self._retry_at = float("-inf")
        self._delay = self._first_delay

    def _bound(self) -> None:
        """Drop the oldest buffered records beyond the bound, keeping (merging) their cursors."""
        excess = self._buffered - self._max
        while excess > 0:
            batch = next(b for b in self._pending if b.records)
            cut = min(excess, len(batch.records))
            del batch.records[:cut]
            self._buffered -= cut
            self._dropped += cut
            excess -= cut
            if not self._dropping:
                self._dropping = True
                log.error("store buffer full (%d records): dropping the oldest records, counted in "
                          "dropped_records_total", self._max)
        while len(self._pending) > 1 and not self._pending[0].records:
            first = self._pending.popleft()
            self._pending[0] = _merge(first, self._pending[0], self._pending[0].records, self._pending[0].now)
