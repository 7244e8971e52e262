"""The SQLite store: the only module that imports sqlite_utils.

Exactly-once delivery rests on one rule: the records parsed from some bytes and the cursor saying those
bytes were read are written in **one transaction** (`Store.commit`). A `kill -9` then either keeps both
or neither; a restart resumes from the cursor. The unique key (file_key, offset) on stored lines makes
any replay (a `scan` re-read, a cursor that lagged) insert nothing twice.

`lines` is the raw-line journal: every delivered line, kept for exactly-once verification and for
`scan`-style replays through newer parsers. The daemon adds its own record types (events, stats) by
registering a table in `_TABLES` and a migration; `commit` takes a mixed batch of any registered type.
WAL with synchronous=NORMAL is durable across process crashes (what the agent must survive); a power
loss may drop the last transactions, and then records and cursors go back together, still consistent.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlite_utils import Database, Migrations

from agent.errors import StoreError
from agent.records import Cursor, JournalCursor, LogLine

# sqlite-utils' Migrations records each applied step in `_sqlite_migrations` and runs it in a
# transaction with that record. Append new steps; never edit one that has shipped.
MIGRATIONS = Migrations("deepinfer-agent")


@MIGRATIONS(name="0001_lines_and_cursors")
def _lines_and_cursors(db: Database) -> None:
    db.execute("""CREATE TABLE lines (
        file_key TEXT NOT NULL, offset INTEGER NOT NULL, source TEXT NOT NULL, path TEXT NOT NULL,
        text TEXT NOT NULL, ts REAL, stream TEXT, truncated INTEGER NOT NULL,
        PRIMARY KEY (file_key, offset))""")
    db.execute("CREATE INDEX lines_source ON lines (source)")
    db.execute("""CREATE TABLE cursors (
        source TEXT NOT NULL, file_key TEXT NOT NULL, path TEXT NOT NULL, dev INTEGER NOT NULL,
        inode INTEGER NOT NULL, fingerprint TEXT NOT NULL, offset INTEGER NOT NULL, seen_seconds REAL NOT NULL,
        PRIMARY KEY (source, file_key))""")
    db.execute("CREATE TABLE journal_cursors (source TEXT PRIMARY KEY, cursor TEXT NOT NULL)")


KNOWN_MIGRATIONS = ("0001_lines_and_cursors",)
SCHEMA_VERSION = len(KNOWN_MIGRATIONS)


def _line_row(line: LogLine) -> tuple[Any, ...]:
    # Lines from a source without file identity fall back to the path, which is then their only key.
    return (line.file_key or line.path, line.offset, line.source, line.path, line.text, line.ts, line.stream,
            int(line.truncated))


# record type → (INSERT OR IGNORE statement, row builder). The daemon registers its record types here.
_TABLES: dict[type, tuple[str, Callable[[Any], tuple[Any, ...]]]] = {
    LogLine: ("INSERT OR IGNORE INTO lines (file_key, offset, source, path, text, ts, stream, truncated) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _line_row),
}


class Store:
    """One SQLite database (a path or `:memory:`), migrated to the current schema on open."""

    def __init__(self, db: Database, name: str) -> None:
        self._db = db
        self._name = name

    @classmethod
    def open(cls, path: Path | str) -> Store:
        """Open (creating if needed) and migrate; raise StoreError naming the file on failure."""
        name = str(path)
        try:
            if name == ":memory:":
                db = Database(memory=True)
            else:
                Path(name).parent.mkdir(parents=True, exist_ok=True)
                db = Database(name)
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=5000")
            store = cls(db, name)
            store._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"{name}: cannot open the store: {exc}") from exc
        return store

    def _migrate(self) -> None:
        """Apply pending migrations under a write lock, so two processes opening a new file at once
        (the daemon and a CLI command) do not both create the tables."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            unknown = [m.name for m in MIGRATIONS.applied(self._db) if m.name not in KNOWN_MIGRATIONS]
            if unknown:
                raise StoreError(f"{self._name}: the schema has migrations this agent does not know "
                                 f"({', '.join(unknown)}): it was written by a newer agent; upgrade the agent")
            MIGRATIONS.apply(self._db)
        except BaseException:
            self._db.rollback()
            raise
        self._db.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        """How many schema migrations this database has had (SCHEMA_VERSION once opened)."""
        return len(MIGRATIONS.applied(self._db))

    def commit(self, records: Iterable[object], cursors: Iterable[Cursor | JournalCursor] = (),
               expired: Iterable[Cursor] = ()) -> int:
        """Write records, cursors and cursor expiries in one transaction; return how many records were new.

        A record whose key is already stored (a replay) is skipped, not an error. A record type with no
        table is a programming error and raises StoreError before anything is written.
        """
        grouped: dict[type, list[tuple[Any, ...]]] = {}
        for record in records:
            entry = _TABLES.get(type(record))
            if entry is None:
                raise StoreError(f"{self._name}: no table for record type {type(record).__name__}")
            grouped.setdefault(type(record), []).append(entry[1](record))
        try:
            with self._db.atomic():
                conn = self._db.conn
                before = conn.total_changes
                for kind, rows in grouped.items():
                    conn.executemany(_TABLES[kind][0], rows)
                inserted = conn.total_changes - before
                # Expiries first: a cursor both expired and refreshed in one batch stays.
                conn.executemany("DELETE FROM cursors WHERE source = ? AND file_key = ?",
                                 [(c.source, c.file_key) for c in expired])
                for cursor in cursors:
                    self._put_cursor(conn, cursor)
        except sqlite3.Error as exc:
            raise StoreError(f"{self._name}: cannot write: {exc}") from exc
        return inserted

    @staticmethod
    def _put_cursor(conn: sqlite3.Connection, cursor: Cursor | JournalCursor) -> None:
        if isinstance(cursor, JournalCursor):
            conn.execute("INSERT OR REPLACE INTO journal_cursors (source, cursor) VALUES (?, ?)",
                         (cursor.source, cursor.cursor))
            return
        conn.execute("INSERT OR REPLACE INTO cursors (source, file_key, path, dev, inode, fingerprint, offset, "
                     "seen_seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (cursor.source, cursor.file_key, cursor.path, cursor.dev, cursor.inode, cursor.fingerprint,
                      cursor.offset, cursor.seen_seconds))

    def cursors(self, source: str) -> list[Cursor]:
        """Every stored file cursor of one source."""
        rows = self._query("SELECT source, path, dev, inode, fingerprint, offset, file_key, seen_seconds "
                           "FROM cursors WHERE source = ? ORDER BY seen_seconds", (source,))
        return [Cursor(*row) for row in rows]

    def journal_cursor(self, source: str) -> str | None:
        """The journald cursor a journal source resumes after, None before its first entry."""
        rows = self._query("SELECT cursor FROM journal_cursors WHERE source = ?", (source,))
        return str(rows[0][0]) if rows else None

    def lines(self, source: str | None = None) -> Iterator[LogLine]:
        """Stored lines in insertion order (for verification, replays and tests)."""
        sql = "SELECT source, path, offset, text, ts, stream, truncated, file_key FROM lines"
        params: tuple[Any, ...] = ()
        if source is not None:
            sql, params = sql + " WHERE source = ?", (source,)
        for row in self._db.execute(sql + " ORDER BY rowid", params):
            yield LogLine(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]), row[7])

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
