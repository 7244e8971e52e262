"""What the loop keeps per log source and of the latest samples, between steps.

A `LogStream` pairs one source's reader with its parsers — one per engine instance, so each file a
glob matches (a container, a pod) is its own engine with its own name and open tracebacks — and
decides how far the cursor may be persisted while a parser still holds lines back (an open traceback);
`NewestSamples` holds the newest sample of everything for the exporter and `status`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from agent.bookkeeping import Cursor, JournalCursor
from agent.config import SourceSection
from agent.daemon.lane import feed_raw
from agent.records import (
    CapacityFact,
    Event,
    GpuProcessSample,
    GpuSample,
    LogLine,
    RawLines,
    Record,
    RequestSample,
    Server,
    ServerStats,
    event_with,
)
from agent.sources.engines import engine_name
from agent.sources.journal import JournalSource
from agent.sources.nvml_model import GpuHealth
from agent.sources.tailer import FileTailer
from parsers import Parser, make_parser

# `_locate` builds a ServerStats by position (its last four fields): tests/unit/test_record_layouts.py holds them.
MAX_REMEMBERED_FILES = 1000  # file incarnations whose path a stream remembers (rotations since it started)


@dataclass
class LogStream:
    section: SourceSection
    reader: FileTailer | JournalSource
    server: Server
    ref_time: float
    last_line_at: float = 0.0
    flushed: bool = True
    parsers: dict[str, Parser] = field(default_factory=dict)  # engine → its parser
    paths: dict[str, str] = field(default_factory=dict)  # file_key → the path its lines were read under
    held_back: dict[str, Cursor] = field(default_factory=dict)  # file_key → true cursor not yet persisted
    by_path: dict[str, Parser] = field(default_factory=dict)  # path → its engine's parser (`parser_for`'s memo)

    @property
    def name(self) -> str:
        return self.section.source_name()

    def parser_for(self, path: str) -> Parser:
        """The parser of the engine `path` belongs to: the source's own, or one per file of a glob (asked for
        every line, so remembered per path)."""
        parser = self.by_path.get(path)
        if parser is not None:
            return parser
        engine = engine_name(self.name, self.section.path, path)
        parser = self.parsers.get(engine)
        if parser is None:
            parser = self.parsers[engine] = make_parser(self.server, engine, self.ref_time)
        if len(self.by_path) >= MAX_REMEMBERED_FILES:
            self.by_path.clear()
        self.by_path[path] = parser
        return parser

    @property
    def parse_errors(self) -> int:
        return sum(p.parse_errors for p in self.parsers.values())

    def flush(self) -> list[Record]:
        """What the parsers still hold (an open traceback), located like `feed`'s records."""
        return [self._locate(r) for p in self.parsers.values() for r in p.flush()]

    def held_offsets(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.parsers.values():
            out.update(p.held_offsets())
        return out

    def feed(self, lines: Iterable[LogLine | RawLines]) -> list[Record]:
        """Parse lines. The parser is told each line's file identity (`file_key`) as its location, so what
        it holds back and what it emits is tied to that file incarnation, never to a name that rotation
        gives to the next file; records leave with both the path (for people) and the file key (the key).
        A plain file's `RawLines` (the compiled lane's, agent/daemon/lane.py) are parsed in their place."""
        records: list[Record] = []
        locate = self._locate
        run: list[LogLine] = []  # consecutive lines of one file without an envelope time
        for line in lines:
            if isinstance(line, RawLines):
                if run:
                    records += map(locate, self._feed_run(run))
                    run = []
                records += map(locate, feed_raw(self._where(line), line, line.file_key or line.path))
                continue
            if run and (line.path is not run[0].path or line.file_key is not run[0].file_key or line.ts is not None):
                records += map(locate, self._feed_run(run))
                run = []
            if line.ts is None:
                run.append(line)
            elif found := self._where(line).feed(line.text, line.ts, line.file_key or line.path, line.offset):
                records += map(locate, found)
        if run:
            records += map(locate, self._feed_run(run))
        if len(self.paths) > MAX_REMEMBERED_FILES:
            held = set(self.held_offsets())
            recent = dict(list(self.paths.items())[-(MAX_REMEMBERED_FILES // 2):])
            self.paths = {k: p for k, p in self.paths.items() if k in held} | recent
        return records

    def _where(self, line: LogLine | RawLines) -> Parser:
        """The parser of a line's file, remembering the path its file key was read under."""
        if line.file_key:
            self.paths[line.file_key] = line.path
        return self.parser_for(line.path)

    def _feed_run(self, run: list[LogLine]) -> list[Record]:
        """Lines of one file, read in one call (`Parser.feed_batch`): the same records as one by one."""
        first = run[0]
        return self._where(first).feed_batch([line.text for line in run], [line.offset for line in run],
                                              first.file_key or first.path)

    def _locate(self, record: Record) -> Record:
        if isinstance(record, Event) and record.path in self.paths:
            return event_with(record, path=self.paths[record.path], file_key=record.path)
        if isinstance(record, ServerStats | RequestSample) and record.path in self.paths:
            return record._replace(path=self.paths[record.path], file_key=record.path)
        return record

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
        limits = self.held_offsets()  # by file_key (what `feed` gave the parsers as the location)
        self.held_back = {}
        for key, cursor in pending.items():
            limit = limits.get(key)
            if limit is not None and limit < cursor.offset:
                # (`near` fingerprints the bytes before the true offset, not these: leave it out)
                out.append(replace(cursor, offset=limit, near=""))
                self.held_back[key] = cursor
            else:
                out.append(cursor)
        return out


_GAUGES = ("running", "waiting", "swapped", "kv_usage_ratio", "prompt_tps", "gen_tps", "prefix_hit_ratio",
           "kv_used_tokens")


@dataclass
class NewestSamples:
    """What the exporter and `status` show: the newest sample of everything."""

    servers: dict[str, ServerStats] = field(default_factory=dict)
    facts: dict[str, dict[str, float | str]] = field(default_factory=dict)
    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[GpuProcessSample, ...] = ()
    health: tuple[GpuHealth, ...] = ()  # clocks, throttling, ECC: shown, never stored

    def take(self, records: Iterable[Record]) -> None:
        for r in records:
            if isinstance(r, ServerStats):
                held = self.servers.get(r.source)
                if held is None:
                    self.servers[r.source] = r
                else:
                    # Two witnesses of one engine (its log and its /metrics) each report what the other may
                    # not (a V0 log has swapped requests, a scrape may not): the newer sample wins, and a
                    # gauge it lacks keeps the value the older one gave.
                    # (Only gauges the older one has: a V1 log's samples all lack `swapped`, and a copy of a
                    # sample per sample to fill None with None was most of this loop's cost under a storm.)
                    new, old = (r, held) if (r.ts or 0) >= (held.ts or 0) else (held, r)
                    missing = {f: v for f in _GAUGES if getattr(new, f) is None and (v := getattr(old, f)) is not None}
                    self.servers[r.source] = new._replace(**missing) if missing else new
            elif isinstance(r, CapacityFact):
                self.facts.setdefault(r.source, {})[r.name] = r.value
