"""How far reading and writing got, and how each part is doing: cursors, one poll's batch, self-metrics.

These cross module boundaries as records do (a source's cursors are committed with the records of the
bytes they cover; its self-metrics reach the exporter), but they describe the agent, not the engines it
watches — that vocabulary is agent/records.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.records import Event, LogLine, RawLines


@dataclass(frozen=True)
class Cursor:
    """How far a source has read one file incarnation: persisted with the lines read from it.

    The identity is (dev, inode) from `os.fstat` on the open handle plus `fingerprint`, a hash of the
    first bytes written as `"<length>:<hex>"`, so a reused inode with new content is a new file.
    `offset` is the first byte not yet delivered (a held partial line is re-read after a restart).
    `path` is the resolved path the file was opened under (a symlink's target), where a restart looks
    first before searching that directory by inode. A cursor with an empty `file_key` is a file
    source's start marker (it has run before; `seen_seconds` is when).
    `seen_seconds` is when the tailer produced this cursor (wall clock), used after a restart to tell
    rotated files written while the agent was down from ones it had already finished.
    `near` is a fingerprint of the bytes just before `offset` (same `"<length>:<hex>"` form; empty at 0):
    a file truncated in place and regrown past the cursor while the agent was down keeps its first
    bytes, but not these.
    """

    source: str
    path: str
    dev: int
    inode: int
    fingerprint: str
    offset: int
    file_key: str
    seen_seconds: float
    near: str = ""


@dataclass(frozen=True)
class JournalCursor:
    """The journald cursor (`__CURSOR`) of the last entry a journal source delivered."""

    source: str
    cursor: str


@dataclass(frozen=True)
class SourceBatch:
    """What one `poll(now)` of a source produced: commit all of it with `Store.commit` in one transaction.

    `cursors` say how far the lines were read; `expired` are cursors of files gone for longer than the
    grace period, to delete. `more` is True when a backlog remains (the source stopped at its per-poll
    byte budget), so the caller should poll again at once instead of waiting.
    """

    lines: tuple[LogLine | RawLines, ...] = ()
    cursors: tuple[Cursor | JournalCursor, ...] = ()
    expired: tuple[Cursor, ...] = ()
    more: bool = False


@dataclass(frozen=True)
class SourceStats:
    """A snapshot of one source's self-metrics; counters only grow while the source lives.

    `lag_bytes` is the sum over open files of size − read position; `up` is False while the source
    cannot read (permission denied, journalctl died) and True again once it can. Each field `x` is
    exported as `deepinfer_source_x` with a `source` label (docs/sources.md lists them).
    """

    source: str
    up: bool = True
    files: int = 0
    lines_total: int = 0
    bytes_total: int = 0
    rotations_total: int = 0
    truncations_total: int = 0
    read_errors_total: int = 0
    partial_flushes_total: int = 0
    invalid_utf8_total: int = 0
    truncated_lines_total: int = 0
    framing_errors_total: int = 0
    restarts_total: int = 0
    lag_bytes: int = 0
    down_reason: str = ""  # why `up` is False, in words (a missing path, a directory, permission denied)
    emfile_total: int = 0  # opens refused with EMFILE (the process ran out of file descriptors)


@dataclass(frozen=True)
class CommitResult:
    """What one store write actually added: `inserted` new rows, and the events among them.

    A replayed record (its key already stored) is in neither, so counting `new_events` never counts a
    line twice. `ResilientWriter` returns the sum over every buffered batch that landed in the call.
    """

    inserted: int = 0
    new_events: tuple[Event, ...] = ()

    def __add__(self, other: CommitResult) -> CommitResult:
        return CommitResult(self.inserted + other.inserted, self.new_events + other.new_events)

    def event_counts(self) -> dict[tuple[str, str, str], int]:
        """New events by (source, server, kind), as the lowercase strings the store and labels use."""
        counts: dict[tuple[str, str, str], int] = {}
        for event in self.new_events:
            key = (event.source, event.server.value, event.kind.value)
            counts[key] = counts.get(key, 0) + 1
        return counts


@dataclass(frozen=True)
class StoreStats:
    """A snapshot of the store writer's self-metrics (docs/store.md); counters only grow while it lives.

    `up` is False from a failed write until one succeeds; `buffered_records` are held in memory waiting
    for the store; `dropped_records_total` counts records given up because the buffer was full;
    `db_bytes` is the database file's size (None while the store cannot be opened).
    """

    up: bool = False
    write_errors_total: int = 0
    dropped_records_total: int = 0
    buffered_records: int = 0
    pruned_rows_total: int = 0
    db_bytes: int | None = None
    last_error: str | None = None
