"""What the loop keeps per log source and of the latest samples, between steps.

A `LogStream` pairs one source's reader with its parser and decides how far the cursor may be
persisted while the parser still holds lines back (an open traceback); `Latest` holds the newest
sample of everything for the exporter and `status`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from agent.config import SourceSection
from agent.records import CapacityFact, Cursor, GpuProcessSample, GpuSample, JournalCursor, LogLine, Record, ServerStats
from agent.sources.journal import JournalSource
from agent.sources.tailer import FileTailer
from parsers import Parser


@dataclass
class LogStream:
    section: SourceSection
    reader: FileTailer | JournalSource
    parser: Parser
    last_line_at: float = 0.0
    flushed: bool = True
    file_keys: dict[str, str] = field(default_factory=dict)  # path → file_key of the lines fed from it
    held_back: dict[str, Cursor] = field(default_factory=dict)  # file_key → true cursor not yet persisted

    @property
    def name(self) -> str:
        return self.section.source_name()

    def feed(self, lines: Iterable[LogLine]) -> list[Record]:
        records: list[Record] = []
        for line in lines:
            records.extend(self.parser.feed(line.text, line.ts, line.path, line.offset))
            self.file_keys[line.path] = line.file_key
        return records

    def persistable(self, fresh: Iterable[Cursor | JournalCursor]) -> list[Cursor | JournalCursor]:
        """The cursors to commit now: never past the first line of something the parser still holds.

        An open traceback is one event emitted when it ends; its first lines are already read. Were the
        cursor persisted past them, a crash now would leave the restarted agent only the traceback's
        tail. So the cursor waits at the block's first line, and the true one is committed once the
        block is out (a replay of the lines in between stores nothing twice: records are unique)."""
        pending = dict(self.held_back)
        out: list[Cursor | JournalCursor] = []
        for cursor in fresh:
            if isinstance(cursor, Cursor):
                pending[cursor.file_key] = cursor
            else:
                out.append(cursor)
        limits = {self.file_keys.get(path): offset for path, offset in self.parser.held_offsets().items()}
        self.held_back = {}
        for key, cursor in pending.items():
            limit = limits.get(key)
            if limit is not None and limit < cursor.offset:
                out.append(replace(cursor, offset=limit))
                self.held_back[key] = cursor
            else:
                out.append(cursor)
        return out


@dataclass
class Latest:
    """What the exporter and `status` show: the newest sample of everything."""

    servers: dict[str, ServerStats] = field(default_factory=dict)
    facts: dict[str, dict[str, float | str]] = field(default_factory=dict)
    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[GpuProcessSample, ...] = ()

    def take(self, records: Iterable[Record]) -> None:
        for r in records:
            if isinstance(r, ServerStats):
                held = self.servers.get(r.source)
                if held is None or (r.ts or 0) >= (held.ts or 0):
                    self.servers[r.source] = r
            elif isinstance(r, CapacityFact):
                self.facts.setdefault(r.source, {})[r.name] = r.value
