"""The SQLite store: the only module that imports sqlite_utils.

Exactly-once delivery rests on one rule: the records parsed from some bytes and the cursor saying those
bytes were read are written in **one transaction** (`Store.commit`). A `kill -9` then either keeps both
or neither; a restart resumes from the cursor. Every record table has a unique key, so any replay (a
`scan` re-read, a cursor that lagged) inserts nothing twice, and `commit` reports only what was new, so
counters built from it never count a replay.

Tables (docs/store.md has the full schema): `events`, `server_stats`, `capacity_facts` (history) with
`facts_latest` (the newest value per source and name, never pruned: start-up facts are printed once),
`histogram_windows`, `gpu_samples`, `gpu_process_samples`, `totals`, `cursors` and `journal_cursors`.
Raw lines are never stored (they may hold prompts): only redacted records leave the parsers.

A record from a file is keyed by the file's identity (`file_key`) and the offset of its first line,
never by the file's name. Each time-series row has `ts` (the record's own time, NULL when the line
carried none) and `at` (`ts`, or the commit's clock when `ts` is NULL) on which windows and retention work.

WAL with synchronous=NORMAL is durable across process crashes (what the agent must survive); a power
loss may drop the last transactions, and then records and cursors go back together, still consistent.
Readers (`Store.open_readonly`) never block the writer and the writer never blocks them (WAL).
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlite_utils import Database, Migrations

from agent.bookkeeping import CommitResult, Cursor, JournalCursor
from agent.errors import StoreError, StoreVersionError
from agent.records import Event, EventKind
from agent.sinks.rows import TABLES
from agent.sinks.schema import MIGRATIONS as SCHEMA
from agent.sinks.schema import PRUNED
from agent.sinks.storefile import create_store_file
from agent.verdicts import StoredRecord

# sqlite-utils' Migrations records each applied step in `_sqlite_migrations` and runs it in a
# transaction with that record; the steps themselves are SQL in schema.py.
MIGRATIONS = Migrations("deepinfer-agent")


def _step(sql: str) -> Callable[[Database], None]:
    # Statement by statement: executescript() would COMMIT first and break the step's transaction.
    def apply(db: Database) -> None:
        for statement in sql.split(";\n"):
            if statement.strip():
                db.execute(statement)
    return apply


for _name, _sql in SCHEMA:
    MIGRATIONS(name=_name)(_step(_sql))


KNOWN_MIGRATIONS = tuple(name for name, _ in SCHEMA)
SCHEMA_VERSION = len(KNOWN_MIGRATIONS)


TotalsKey = tuple[str, tuple[str, ...]]
# One commit's worth: records, cursors, cursor expiries, and the `now` stored as `at` for records without a time.
Batch = tuple[Iterable[StoredRecord], Iterable[Cursor | JournalCursor], Iterable[Cursor], float]


def occurrences(event: Event) -> int:
    """How many occurrences one event stands for: its `count` field (a stats line's preemptions, a scrape's
    rejections since the last one), 1 when it has none. Counters, totals and reports add this, never rows."""
    count = event.fields.get("count")
    if isinstance(count, bool) or not isinstance(count, int | float) or count < 0:
        return 1
    return int(count)


def event_counters(event: Event) -> Iterable[tuple[TotalsKey, int]]:
    """The one place that decides which counters a newly stored event moves, and by how much (its
    occurrences): events by (source, server, kind), and Xid errors by GPU and code (the GPU's index from
    NVML, else the PCI bus from the kernel line). `Store.commit` runs it inside the commit's transaction,
    so stored counters always agree with stored events, and the loop runs it on the commit's new events to
    mirror them in memory."""
    n = occurrences(event)
    yield ("events_total", (event.source, event.server.value, event.kind.value)), n
    if event.kind in (EventKind.XID, EventKind.GPU_LOST) and "xid" in event.fields:
        gpu = event.fields.get("gpu", event.fields.get("pci_bus", "unknown"))
        yield ("gpu_xid_errors_total", (str(gpu), str(event.fields["xid"]))), n


def _counted(events: Iterable[Event]) -> dict[TotalsKey, int]:
    """How much each counter moves for these new events."""
    out: dict[TotalsKey, int] = {}
    for event in events:
        for key, n in event_counters(event):
            out[key] = out.get(key, 0) + n
    return out


_ADD_TOTAL = ("INSERT INTO totals (metric, labels, value) VALUES (?, ?, ?) "
              "ON CONFLICT (metric, labels) DO UPDATE SET value = value + excluded.value")
_SET_TOTAL = ("INSERT INTO totals (metric, labels, value) VALUES (?, ?, ?) "
              "ON CONFLICT (metric, labels) DO UPDATE SET value = excluded.value")

def _labels(labels: Sequence[str]) -> str:
    return json.dumps(list(labels), separators=(",", ":"))


class Store:
    """One SQLite database (a path or `:memory:`), migrated to the current schema on open.

    Use from one thread. Retention (`retention_days`, `max_bytes`) applies when the caller runs `prune`.
    """

    def __init__(self, db: Database, name: str, *, readonly: bool = False, retention_days: float | None = None,
                 max_bytes: int | None = None, prune_batch_rows: int = 5000) -> None:
        self._db = db
        self._name = name
        self._readonly = readonly
        self._retention_days = retention_days
        self._max_bytes = max_bytes
        self._prune_batch_rows = prune_batch_rows
        self._identity = self._file_identity()

    @classmethod
    def open(cls, path: Path | str, *, retention_days: float | None = None, max_bytes: int | None = None,
             hard_max_bytes: int | None = None, busy_timeout_ms: int = 5000, prune_batch_rows: int = 5000) -> Store:
        """Open for writing (creating the file 0640 if needed) and migrate; raise StoreError naming the file.

        `hard_max_bytes` caps the main file (SQLite's max_page_count): past it a write fails with
        SQLITE_FULL as on a full disk, instead of filling the filesystem. Each *new* event bumps its
        `event_counters` totals inside the commit's transaction, so stored counters agree with stored events.
        """
        name = str(path)
        try:
            if name == ":memory:":
                db = Database(memory=True)
            else:
                create_store_file(Path(name))
                db = Database(name)
                # first: switching to WAL takes a lock, and a second process creating the store at the same
                # moment must wait for it, not fail with "database is locked" (the default timeout is 0)
                db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA journal_size_limit=16777216")  # keep a checkpointed WAL from staying huge
            db.execute("PRAGMA synchronous=NORMAL")
            if hard_max_bytes is not None:
                page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
                db.execute(f"PRAGMA max_page_count={max(1, hard_max_bytes // page_size)}")
            store = cls(db, name, retention_days=retention_days, max_bytes=max_bytes,
                        prune_batch_rows=prune_batch_rows)
            store._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"{name}: cannot open the store: {exc}") from exc
        return store

    @classmethod
    def open_readonly(cls, path: Path | str, *, busy_timeout_ms: int = 5000) -> Store:
        """Open an existing store for reading only (`status`, `report`): never migrates, never writes, and
        in WAL mode neither blocks the daemon's writes nor waits for them."""
        file = Path(path)
        if not file.is_file():
            raise StoreError(f"{file}: no store there: the agent creates it on its first run (see store.path)")
        try:
            conn = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            store = cls(Database(conn), str(file), readonly=True)
            applied = {m.name for m in MIGRATIONS.applied(store._db)}
        except sqlite3.Error as exc:
            raise StoreError(f"{file}: cannot open the store: {exc}") from exc
        unknown = sorted(applied - set(KNOWN_MIGRATIONS))
        if unknown:
            store.close()
            raise StoreVersionError(f"{file}: the store was written by a newer agent (its schema has "
                                    f"{', '.join(unknown)}): read it with that agent's version or newer")
        missing = [m for m in KNOWN_MIGRATIONS if m not in applied]
        if missing:
            store.close()
            raise StoreError(f"{file}: the store predates this agent (lacks {', '.join(missing)}): "
                             f"start the agent once to upgrade it")
        return store

    def _migrate(self) -> None:
        """Apply pending migrations under a write lock, so two processes opening a new file at once
        (the daemon and a CLI command) do not both create the tables. An up-to-date store takes no lock."""
        unknown = [m.name for m in MIGRATIONS.applied(self._db) if m.name not in KNOWN_MIGRATIONS]
        if unknown:
            raise StoreVersionError(f"{self._name}: the schema has migrations this agent does not know "
                                    f"({', '.join(unknown)}): it was written by a newer agent; upgrade the agent")
        if not MIGRATIONS.pending(self._db):
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            MIGRATIONS.apply(self._db)
        except BaseException:
            self._db.rollback()
            raise
        self._db.execute("COMMIT")

    @property
    def name(self) -> str:
        return self._name

    @property
    def schema_version(self) -> int:
        """How many schema migrations this database has had (SCHEMA_VERSION once opened)."""
        return len(MIGRATIONS.applied(self._db))

    def _file_identity(self) -> tuple[int, int] | None:
        if self._name == ":memory:":
            return None
        try:
            st = Path(self._name).stat()
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def replaced(self) -> bool:
        """Whether the path no longer names the file this store has open (moved aside, deleted, replaced):
        writes would then go to a file nobody will read, so the writer reopens."""
        return self._identity is not None and self._file_identity() != self._identity

    # -- writing ----------------------------------------------------------------------------------

    @staticmethod
    def check(records: Iterable[StoredRecord]) -> None:
        """Raise StoreError for a record type with no table (a programming error, never buffered)."""
        for record in records:
            if type(record) not in TABLES:
                raise StoreError(f"no table for record type {type(record).__name__}")

    def commit(self, records: Iterable[StoredRecord], cursors: Iterable[Cursor | JournalCursor] = (),
               expired: Iterable[Cursor] = (), *, totals: Mapping[TotalsKey, float] | None = None,
               now: float | None = None) -> CommitResult:
        """Write records, cursors, cursor expiries and totals in one transaction; return what was new.

        A record whose key is already stored (a replay) is skipped, not an error, and is not in the
        result. New events bump their `event_counters` totals in the same transaction; `totals` sets
        (metric, labels) → value for other counters (do not pass keys `event_counters` maintains).
        `now` (default: the wall clock) is stored as `at` for records without a time of their own.
        A record type with no table raises StoreError before anything is written.
        """
        at = time.time() if now is None else now
        return self.commit_batches([(records, cursors, expired, at)], totals=totals)

    def commit_batches(self, batches: Sequence[Batch], *, totals: Mapping[TotalsKey, float] | None = None,
                       ) -> CommitResult:
        """Several batches (records, cursors, expiries, the `now` of their `at`) in one transaction, as if
        committed one after the other: the writer's held steps land together, paying one commit.

        Each batch keeps its own `at` for records without a time; cursor writes apply in batch order.
        """
        prepared = [(self._rows(records, at), tuple(cursors), tuple(expired)) for records, cursors, expired, at
                    in batches]
        try:
            with self._db.atomic():
                conn = self._db.conn
                inserted = 0
                new_events: list[Event] = []
                for grouped, cursors, expired in prepared:
                    inserted += self._insert(conn, grouped, new_events)
                    # Expiries first: a cursor both expired and refreshed in one batch stays.
                    conn.executemany("DELETE FROM cursors WHERE source = ? AND file_key = ?",
                                     [(c.source, c.file_key) for c in expired])
                    for cursor in cursors:
                        self._put_cursor(conn, cursor)
                counts = _counted(new_events)
                conn.executemany(_ADD_TOTAL, [(m, _labels(labels), n) for (m, labels), n in counts.items()])
                if totals:
                    conn.executemany(_SET_TOTAL, [(m, _labels(labels), float(v))
                                                  for (m, labels), v in totals.items()])
        except sqlite3.Error as exc:
            raise StoreError(f"{self._name}: cannot write: {exc}") from exc
        return CommitResult(inserted, tuple(new_events))

    def _rows(self, records: Iterable[StoredRecord], at: float) -> dict[type, list[tuple[Any, tuple[Any, ...]]]]:
        """Records grouped by type with their rows; a record type with no table raises StoreError."""
        grouped: dict[type, list[tuple[Any, tuple[Any, ...]]]] = {}
        for record in records:
            entry = TABLES.get(type(record))
            if entry is None:
                raise StoreError(f"{self._name}: no table for record type {type(record).__name__}")
            grouped.setdefault(type(record), []).append((record, entry.row(record, at)))
        return grouped

    @staticmethod
    def _insert(conn: sqlite3.Connection, grouped: Mapping[type, list[tuple[Any, tuple[Any, ...]]]],
                new_events: list[Event]) -> int:
        """Insert one batch's rows; append the events that were new to `new_events`; return rows inserted."""
        inserted = 0
        for kind, pairs in grouped.items():
            table = TABLES[kind]
            if kind is Event:  # row by row: the caller needs to know which events were new
                for event, row in pairs:
                    if conn.execute(table.insert, row).rowcount > 0:
                        new_events.append(event)
                        inserted += 1
                continue
            rows = [row for _, row in pairs]
            before = conn.total_changes
            conn.executemany(table.insert, rows)
            inserted += conn.total_changes - before
            if table.then is not None:
                conn.executemany(table.then, rows)
        return inserted

    @staticmethod
    def _put_cursor(conn: sqlite3.Connection, cursor: Cursor | JournalCursor) -> None:
        if isinstance(cursor, JournalCursor):
            conn.execute("INSERT OR REPLACE INTO journal_cursors (source, cursor) VALUES (?, ?)",
                         (cursor.source, cursor.cursor))
            return
        conn.execute("INSERT OR REPLACE INTO cursors (source, file_key, path, dev, inode, fingerprint, offset, "
                     "seen_seconds, near) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (cursor.source, cursor.file_key, cursor.path, cursor.dev, cursor.inode, cursor.fingerprint,
                      cursor.offset, cursor.seen_seconds, cursor.near))

    def prune(self, now: float) -> int:
        """Delete at most `prune_batch_rows` time-series rows, oldest first; return how many went.

        First rows older than `retention_days`, then — while the live data (pages in use, not the file:
        SQLite reuses freed pages rather than shrinking the file) exceeds `max_bytes` — the oldest rows
        of every table in proportion to its size. Cursors, totals and facts_latest are never pruned.
        Call it every so often; when it returns the full batch, more is due.
        """
        budget = self._prune_batch_rows
        deleted = 0
        try:
            with self._db.atomic():
                conn = self._db.conn
                if self._retention_days is not None:
                    cutoff = now - self._retention_days * 86400.0
                    for table, column in PRUNED:
                        deleted += self._delete_oldest(conn, table, column, budget - deleted, cutoff)
                used = self.used_bytes()
                if self._max_bytes is not None and deleted < budget and used > self._max_bytes:
                    sizes = {t: self._approx_rows(conn, t) for t, _ in PRUNED}
                    total = sum(sizes.values()) or 1
                    # About as many rows as the excess holds (at the average row size), at most the batch.
                    share = min(budget - deleted, math.ceil((used - self._max_bytes) * total / used))
                    for table, column in PRUNED:
                        if sizes[table]:
                            quota = math.ceil(share * sizes[table] / total)
                            deleted += self._delete_oldest(conn, table, column, min(quota, budget - deleted))
        except sqlite3.Error as exc:
            raise StoreError(f"{self._name}: cannot prune: {exc}") from exc
        return deleted

    @staticmethod
    def _delete_oldest(conn: sqlite3.Connection, table: str, column: str, limit: int,
                       before: float | None = None) -> int:
        if limit <= 0:
            return 0
        where = f"WHERE {column} < ?" if before is not None else ""
        params: tuple[Any, ...] = (before, limit) if before is not None else (limit,)
        cur = conn.execute(f"DELETE FROM {table} WHERE rowid IN "  # names from PRUNED, never input
                           f"(SELECT rowid FROM {table} {where} ORDER BY {column} LIMIT ?)", params)
        return max(cur.rowcount, 0)

    @staticmethod
    def _approx_rows(conn: sqlite3.Connection, table: str) -> int:
        # Rows are appended with growing rowids and pruned oldest first: the rowid span is a good,
        # O(log n) estimate of the row count where count(*) would read the whole table.
        low, high = conn.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
        return 0 if low is None else int(high) - int(low) + 1

    # -- reading ----------------------------------------------------------------------------------

    def cursors(self, source: str) -> list[Cursor]:
        """Every stored file cursor of one source."""
        rows = self._query("SELECT source, path, dev, inode, fingerprint, offset, file_key, seen_seconds, near "
                           "FROM cursors WHERE source = ? ORDER BY seen_seconds", (source,))
        return [Cursor(*row) for row in rows]

    def journal_cursor(self, source: str) -> str | None:
        """The journald cursor a journal source resumes after, None before its first entry."""
        rows = self._query("SELECT cursor FROM journal_cursors WHERE source = ?", (source,))
        return str(rows[0][0]) if rows else None

    def load_totals(self) -> dict[TotalsKey, float]:
        """Every stored counter: (metric, labels) → value, to start the in-memory counters from after a restart."""
        rows = self._query("SELECT metric, labels, value FROM totals", ())
        return {(row[0], tuple(json.loads(row[1]))): float(row[2]) for row in rows}

    def db_bytes(self) -> int:
        """The main database file's size (page_count × page_size; the -wal file is bounded apart)."""
        return self._pragma("page_count") * self._pragma("page_size")

    def used_bytes(self) -> int:
        """Bytes of pages holding data (the file minus its free pages): what `max_bytes` bounds."""
        return (self._pragma("page_count") - self._pragma("freelist_count")) * self._pragma("page_size")

    def _pragma(self, name: str) -> int:
        return int(self._query(f"PRAGMA {name}", ())[0][0])

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of one read statement; a failure is a StoreError naming the file (queries.py reads here)."""
        return self._query(sql, params)

    def _query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            return list(self._db.execute(sql, params).fetchall())
        except sqlite3.Error as exc:
            raise StoreError(f"{self._name}: cannot read: {exc}") from exc

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
