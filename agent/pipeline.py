"""The daemon's loop: sources → parsers → records → store + exporter. The only module that wires them.

`run_once(now)` is one deterministic step (tests call it with their own clock; nothing sleeps inside):
poll every log source, feed its lines to the source's parser, poll NVML and the engine scrapers when
they are due, and commit the records together with the cursors of the bytes they came from in one
SQLite transaction. Then the restart-safe counters move and a fresh `Snapshot` replaces the old one for
the exporter's thread. `run_forever` repeats it, sleeping in the waker (inotify) between steps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from agent import __version__
from agent.budget import compute
from agent.config import Config, SourceSection
from agent.errors import AgentError
from agent.journal import JournalSource
from agent.metrics import Snapshot, TargetState
from agent.nvml import GpuPoller
from agent.records import (
    CapacityFact,
    Cursor,
    EventKind,
    GpuProcessSample,
    GpuSample,
    JournalCursor,
    Record,
    Server,
    ServerStats,
)
from agent.scrape import Scraper
from agent.sizing import SizingRequest, resolve
from agent.store import ResilientWriter, Store
from agent.tailer import FileTailer
from agent.wake import Waker
from parsers import Parser, make_parser

log = logging.getLogger("deepinfer.pipeline")

Key = tuple[str, tuple[str, ...]]
PRUNE_EVERY_SECONDS = 60.0

# SourceStats counters → the restart-safe counter each one feeds.
_SOURCE_COUNTERS = {
    "lines_total": "source_lines", "bytes_total": "source_bytes", "rotations_total": "source_rotations",
    "truncations_total": "source_truncations", "read_errors_total": "source_read_errors",
    "partial_flushes_total": "source_partial_flushes", "invalid_utf8_total": "source_invalid_utf8",
    "truncated_lines_total": "source_truncated_lines", "framing_errors_total": "source_framing_errors",
    "restarts_total": "source_restarts",
}


class Totals:
    """Counters that survive restarts: loaded from the store, moved here, written back each step.

    Two kinds of movement: `add` for things counted here (new events), and `observe` for counters a
    live object keeps from zero since it was made (a tailer's lines, NVML's errors): the value is
    the total when that object started plus what it has counted, so a restart continues, not resets.
    """

    def __init__(self, loaded: dict[Key, float]) -> None:
        self.values: dict[Key, float] = dict(loaded)
        self._base: dict[Key, float] = {}
        self.dirty: set[Key] = set()

    def add(self, key: Key, amount: float = 1.0) -> None:
        self.values[key] = self.values.get(key, 0.0) + amount
        self.dirty.add(key)

    def observe(self, key: Key, since_start: float) -> None:
        base = self._base.setdefault(key, self.values.get(key, 0.0))
        if self.values.get(key) != base + since_start:
            self.values[key] = base + since_start
            self.dirty.add(key)

    def rebase(self, metric_names: Iterable[str]) -> None:
        """The objects behind these counters were replaced (a reload): their new zero is today's total."""
        names = set(metric_names)
        for key in [k for k in self._base if k[0] in names]:
            del self._base[key]

    def take_dirty(self) -> dict[Key, float]:
        out = {k: self.values[k] for k in self.dirty}
        self.dirty.clear()
        return out


@dataclass
class _LogSource:
    section: SourceSection
    reader: FileTailer | JournalSource
    parser: Parser

    @property
    def name(self) -> str:
        return self.section.source_name()


@dataclass
class _Latest:
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


class Daemon:
    """The long-running agent. Build it, `start(now)`, then `run_once(now)` or `run_forever(stop)`."""

    def __init__(self, config: Config, store: Store, *, nvml_library: str | None = None,
                 load_config: Callable[[], Config] | None = None) -> None:
        self.config = config
        self._store = store
        self._writer = ResilientWriter(store)
        self._load_config = load_config
        self._nvml_library = nvml_library
        self._sources: list[_LogSource] = []
        self._scrapers: list[Scraper] = []
        self._nvml: GpuPoller | None = None
        self._nvml_due = 0.0
        self._prune_due = 0.0
        self._latest = _Latest()
        self.totals = Totals(store.load_totals())
        self._started_at = time.time()
        self._snapshot = Snapshot(version=__version__, started_at=self._started_at)
        self._snapshot_lock = threading.Lock()
        self._budget: dict[str, float] = {}
        self._reload_ok = True
        self.waker = Waker(use_inotify=any(s.use_inotify for s in config.sources))

    # ---- building -------------------------------------------------------------------------------
    def start(self, now: float) -> None:
        """Open sources at their stored cursors, NVML and scrapers; compute the budget from the config."""
        self._build(self.config, now)
        self._latest.facts.update({k: dict(v) for k, v in self._store.latest_facts().items()})
        self._publish(now)

    def _build(self, config: Config, now: float) -> None:
        self._sources = [self._open_source(section, now) for section in config.sources]
        self._scrapers = [Scraper.from_target(target) for target in config.scrape]
        if config.nvml.enabled and self._nvml is None:
            self._nvml = GpuPoller(library_path=self._nvml_library)
        elif not config.nvml.enabled and self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        self._budget = _budget_of(config)

    def _open_source(self, section: SourceSection, now: float) -> _LogSource:
        name = section.source_name()
        reader: FileTailer | JournalSource
        if section.format == "journald":
            reader = JournalSource.from_section(section, self._store.journal_cursor(name))
        else:
            reader = FileTailer.from_section(section, self._store.cursors(name))
        server = section.server
        if section.format == "journald" and section.kernel and server is Server.AUTO:
            server = Server.KERNEL
        return _LogSource(section, reader, make_parser(server, name, now))

    def describe(self) -> list[str]:
        """What this agent watches, one line each, for the start-up log and `status`."""
        lines = [f"source {s.name}: {s.section.format} {s.section.path or s.section.unit or 'kernel log'}, "
                 f"server {s.section.server.value}" for s in self._sources]
        lines += [f"scrape {t.url} every {t.interval_seconds:g}s ({t.server.value})" for t in self.config.scrape]
        nvml = f"every {self.config.nvml.interval_seconds:g}s" if self._nvml else "off"
        lines.append(f"nvml: {nvml}")
        if self._budget:
            lines.append(f"budget: max concurrency {int(self._budget['max_concurrency'])} "
                         f"({int(self._budget['tokens_per_request'])} tokens per request)")
        else:
            lines.append("budget: not computed (config lacks model / gpu.vram_gib)")
        return lines

    # ---- the step -------------------------------------------------------------------------------
    def run_once(self, now: float) -> bool:
        """One step; True when a source stopped at its read budget and more is waiting."""
        records: list[Record] = []
        cursors: list[Cursor | JournalCursor] = []
        expired: list[Cursor] = []
        more = False
        for src in self._sources:
            batch = src.reader.poll(now)
            for line in batch.lines:
                records.extend(src.parser.feed(line.text, line.ts, line.path, line.offset))
            cursors.extend(batch.cursors)
            expired.extend(batch.expired)
            more = more or batch.more
        records.extend(self._poll_nvml(now))
        for scraper in self._scrapers:
            records.extend(scraper.poll(now))
        self._commit(records, cursors, expired, now)
        if now >= self._prune_due:
            self._prune_due = now + PRUNE_EVERY_SECONDS
            self._writer.prune(now)
        self._publish(now)
        return more

    def _poll_nvml(self, now: float) -> list[Record]:
        if self._nvml is None or now < self._nvml_due:
            return []
        self._nvml_due = now + self.config.nvml.interval_seconds
        result = self._nvml.poll(now)
        self._latest.gpus, self._latest.processes = result.gpus, result.processes
        return [*result.gpus, *result.processes, *result.events]

    def _commit(self, records: Sequence[Record | GpuSample | GpuProcessSample],
                cursors: Sequence[Cursor | JournalCursor], expired: Sequence[Cursor], now: float) -> None:
        self._observe_counters()
        result = self._writer.commit(records, cursors, expired, self.totals.take_dirty())
        for event in result.new_events:
            self.totals.add(("events", (event.source, event.server.value, event.kind.value)))
            if event.kind in (EventKind.XID, EventKind.GPU_LOST) and "xid" in event.fields:
                gpu = event.fields.get("gpu", event.fields.get("pci_bus", "unknown"))
                self.totals.add(("gpu_xid_errors", (str(gpu), str(event.fields["xid"]))))
        self._latest.take(r for r in records if isinstance(r, ServerStats | CapacityFact))

    def _observe_counters(self) -> None:
        for src in self._sources:
            stats = src.reader.stats()
            for attr, metric in _SOURCE_COUNTERS.items():
                self.totals.observe((metric, (src.name,)), getattr(stats, attr))
            self.totals.observe(("parse_errors", (src.name,)), src.parser.parse_errors)
        if self._nvml is not None:
            for call, count in self._nvml.errors_by_call.items():
                self.totals.observe(("nvml_errors", (call,)), count)
        for scraper in self._scrapers:
            stats = scraper.stats()
            self.totals.observe(("scrapes", (stats.target,)), stats.scrapes_total)
            self.totals.observe(("scrape_errors", (stats.target,)), stats.errors_total)
        self.totals.observe(("store_write_errors", ()), self._writer.write_errors_total)
        self.totals.observe(("store_dropped_records", ()), self._writer.dropped_records_total)

    def _publish(self, now: float) -> None:
        snapshot = Snapshot(
            version=__version__, started_at=self._started_at, totals=dict(self.totals.values),
            sources=[s.reader.stats() for s in self._sources], servers=dict(self._latest.servers),
            facts={k: dict(v) for k, v in self._latest.facts.items()}, gpus=self._latest.gpus,
            gpu_processes=self._latest.processes, nvml_enabled=self._nvml is not None,
            nvml_up=self._nvml.up if self._nvml else False,
            targets=[TargetState(t.target, t.up, t.last_duration_seconds) for t in (s.stats() for s in self._scrapers)],
            store_up=self._writer.up, store_buffered_records=self._writer.buffered_records,
            store_size_bytes=self._writer.db_bytes(), budget=dict(self._budget),
            configured=_configured(self.config), config_last_reload_ok=self._reload_ok,
        )
        with self._snapshot_lock:
            self._snapshot = snapshot

    def snapshot(self) -> Snapshot:
        with self._snapshot_lock:
            return self._snapshot

    # ---- lifecycle ------------------------------------------------------------------------------
    def reload(self, now: float) -> bool:
        """Re-read the config (SIGHUP). A bad file keeps the running config, counted and logged."""
        self.totals.add(("config_reloads", ()))
        if self._load_config is None:
            return False
        try:
            config = self._load_config()
        except AgentError as exc:
            self._reload_ok = False
            self.totals.add(("config_reload_errors", ()))
            log.error("config reload rejected; keeping the running config: %s", exc)
            return False
        self._close_sources(now)
        self.totals.rebase([*_SOURCE_COUNTERS.values(), "parse_errors", "scrapes", "scrape_errors"])
        self.config = config
        self._build(config, now)
        self._reload_ok = True
        log.info("config reloaded: %s", "; ".join(self.describe()))
        return True

    def _close_sources(self, now: float) -> None:
        """Flush what sources and parsers hold (partial lines, open tracebacks) and commit it."""
        records: list[Record] = []
        cursors: list[Cursor | JournalCursor] = []
        for src in self._sources:
            if isinstance(src.reader, FileTailer):
                batch = src.reader.close(now)
                for line in batch.lines:
                    records.extend(src.parser.feed(line.text, line.ts, line.path, line.offset))
                cursors.extend(batch.cursors)
            else:
                src.reader.close()
            records.extend(src.parser.flush())
        self._commit(records, cursors, (), now)

    def close(self, now: float) -> None:
        """Flush and commit everything held, then release NVML, the waker and the store."""
        self._close_sources(now)
        self._sources = []
        if self._nvml is not None:
            self._nvml.close()
        self._writer.commit([], [], [], self.totals.take_dirty())
        self.waker.close()

    def wait_interval(self) -> float:
        """How long the loop may sleep when nothing woke it: the shortest poll interval due."""
        intervals = [s.section.poll_interval_seconds for s in self._sources]
        intervals += [t.interval_seconds for t in self.config.scrape]
        if self._nvml is not None:
            intervals.append(self.config.nvml.interval_seconds)
        return min([*intervals, 5.0])

    def watch_dirs(self) -> set[str]:
        dirs: set[str] = set()
        for src in self._sources:
            if isinstance(src.reader, FileTailer) and src.section.use_inotify:
                dirs |= src.reader.watch_dirs()
        return dirs


def _budget_of(config: Config) -> dict[str, float]:
    """The budget the config implies, or {} when it lacks the inputs (the agent still watches)."""
    try:
        budget = compute(resolve(SizingRequest(), config).inputs)
    except AgentError:
        return {}
    return {"max_concurrency": budget.max_concurrency, "usable_kv_bytes": budget.usable_kv_bytes,
            "kv_bytes_per_token": budget.kv_bytes_per_token,
            "tokens_per_request": budget.inputs.tokens_per_request}


def _configured(config: Config) -> dict[str, float]:
    values = {"max_num_seqs": config.server.max_num_seqs, "max_queue_size": config.server.max_queue_size,
              "max_model_len": config.server.max_model_len}
    return {k: float(v) for k, v in values.items() if v is not None}


def run_forever(daemon: Daemon, stop: threading.Event, reload: threading.Event,
                on_tick: Callable[[], None] | None = None) -> None:
    """Step until `stop` is set; `reload` (SIGHUP) re-reads the config between steps."""
    while not stop.is_set():
        now = time.time()
        if reload.is_set():
            reload.clear()
            daemon.reload(now)
        more = daemon.run_once(now)
        daemon.waker.watch(daemon.watch_dirs())
        if on_tick is not None:
            on_tick()
        if not more and not stop.is_set():
            daemon.waker.wait(daemon.wait_interval())
    daemon.close(time.time())
