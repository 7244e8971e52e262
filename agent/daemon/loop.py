"""The daemon's loop: sources → parsers → records → store + exporter. The only module that wires them.

`run_once(now)` is one deterministic step (tests call it with their own clock; nothing sleeps inside):
poll every log source, feed its lines to the source's parser, poll NVML and the engine scrapers when
they are due, and commit the records together with the cursors of the bytes they came from in one
SQLite transaction. Then the restart-safe counters move and a fresh `Snapshot` replaces the old one for
the exporter's thread. `service.run_forever` repeats it, sleeping in the waker (inotify) between steps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agent import __version__
from agent.bookkeeping import CommitResult, Cursor, JournalCursor
from agent.buildinfo import read_build_info
from agent.capacity.budget import Budget
from agent.capacity.capacity import Capacity, budget_or_reason, capacity_of, paper_budget
from agent.config import Config, SourceSection, shipped_rules_dir
from agent.daemon.streams import LogStream, NewestSamples
from agent.daemon.totals import Totals
from agent.daemon.witnesses import counted_once
from agent.errors import AgentError
from agent.judge.advisor import Advisor, engine_config, knobs_of
from agent.judge.precedence import reconcile
from agent.judge.rules import RuleError, load_rules
from agent.records import CapacityFact, Server, ServerStats
from agent.sinks.exporter import Snapshot, TargetState
from agent.sinks.queries import Queries
from agent.sinks.store import Store, event_counters
from agent.sinks.writer import ResilientWriter
from agent.sources.journal import JournalSource
from agent.sources.nvml import GpuPoller
from agent.sources.patterns import store_files
from agent.sources.scrape import Scraper
from agent.sources.tailer import FileTailer
from agent.sources.wake import Waker
from agent.verdicts import Finding, StoredRecord

log = logging.getLogger("deepinfer.pipeline")

PRUNE_EVERY_SECONDS = 60.0
# A parser holds an open traceback (and auto-detection holds its first lines) until a line shows it
# ended; a stream that went quiet — the engine died mid-traceback — is flushed after this long.
QUIET_FLUSH_SECONDS = 1.0

# SourceStats counters → the restart-safe counter each one feeds.
_SOURCE_COUNTERS = {attr: f"source_{attr}" for attr in (
    "lines_total", "bytes_total", "rotations_total", "truncations_total", "read_errors_total",
    "partial_flushes_total", "invalid_utf8_total", "truncated_lines_total", "framing_errors_total", "emfile_total",
    "restarts_total")}


@dataclass
class IngestResult:
    """What one ingest stage read: records, the cursors of their bytes, cursors to expire, more waiting."""

    records: list[StoredRecord] = field(default_factory=list)
    cursors: list[Cursor | JournalCursor] = field(default_factory=list)
    expired: list[Cursor] = field(default_factory=list)
    more: bool = False


class Daemon:
    """The long-running agent. Build it, `start(now)`, then `run_once(now)` steps (or `service.run_forever`)."""

    def __init__(self, config: Config, *, nvml_library: str | None = None,
                 load_config: Callable[[], Config] | None = None) -> None:
        self.config = config
        self._load_config = load_config
        self._nvml_library = nvml_library
        self._writer = ResilientWriter(self._open_store, commit_seconds=config.store.commit_seconds,
                                       commit_records=config.store.commit_records)
        self._sources: list[LogStream] | None = None  # built once the store (and its cursors) is readable
        self._scrapers: list[Scraper] = []
        self._nvml: GpuPoller | None = None
        self._nvml_due = 0.0
        self._prune_due = 0.0
        self._latest = NewestSamples()
        self.totals = Totals({})
        self._started_at = time.time()
        self._build_info = read_build_info()
        self._snapshot = Snapshot(version=__version__, started_at=self._started_at, build=self._build_info)
        self._snapshot_lock = threading.Lock()
        self._budget: Budget | None = None
        self._reload_ok = True
        self._pending_findings: list[Finding] = []
        self.advisor = Advisor((), config.rules.interval_seconds, knobs_of(config))
        self._rules_loaded = False
        self._restored = False
        self.rule_errors: list[str] = []
        # its own store's writes (db, -wal, -shm, -journal) never wake it, even kept beside the logs
        self.waker = Waker(use_inotify=any(s.use_inotify for s in config.sources),
                           ignore=store_files(str(config.store.path)))

    def _open_store(self) -> Store:
        store = self.config.store
        return Store.open(store.path, retention_days=store.retention_days, max_bytes=store.max_bytes)

    # ---- building -------------------------------------------------------------------------------
    def start(self, now: float) -> None:
        """Open the store, then sources at their stored cursors, NVML and scrapers; compute the budget.

        If the store cannot be opened (full disk, corrupt file, permissions), nothing is read yet —
        reading without knowing the cursors would repeat or skip lines — and every step retries."""
        self._writer.open(now)
        self._build(self.config, now)
        self.publish(now)

    def _build(self, config: Config, now: float) -> None:
        self._scrapers = [Scraper.from_target(target) for target in config.scrape]
        if config.nvml.enabled and self._nvml is None:
            self._nvml = GpuPoller(library_path=self._nvml_library)
        elif not config.nvml.enabled and self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        self._budget = paper_budget(config)
        self._sources = None
        self.load_rules(config)
        self._open_sources(now)

    def _open_sources(self, now: float) -> None:
        store = self._writer.store
        if self._sources is not None or store is None:
            return
        if not self.totals.values:
            self.totals = Totals(store.load_totals())
        self._latest.facts.update({k: dict(v) for k, v in Queries(store).latest_facts().items()})
        if not self._restored:
            self.advisor.restore(Queries(store).findings(active_only=True))
            self._restored = True
        self._sources = [self._open_source(store, section, now) for section in self.config.sources]

    def _open_source(self, store: Store, section: SourceSection, now: float) -> LogStream:
        name = section.source_name()
        reader: FileTailer | JournalSource
        if section.format == "journald":
            reader = JournalSource.from_section(section, store.journal_cursor(name))
        else:
            # never the agent's own database: reading it would feed the agent its own writes
            reader = FileTailer.from_section(section, store.cursors(name), store_files(str(self.config.store.path)),
                                             raw=True)
        server = section.server
        if section.format == "journald" and section.kernel and server is Server.AUTO:
            server = Server.KERNEL
        return LogStream(section, reader, server, now)

    def describe(self) -> list[str]:
        """What this agent watches, one line each, for the start-up log."""
        lines = [f"source {s.source_name()}: {s.format} {s.path or s.unit or 'kernel log'}, server {s.server.value}"
                 for s in self.config.sources]
        lines += [f"scrape {t.url} every {t.interval_seconds:g}s ({t.server.value})" for t in self.config.scrape]
        nvml = f"every {self.config.nvml.interval_seconds:g}s" if self._nvml else "off"
        lines.append(f"nvml: {nvml}")
        if self._budget is not None:
            lines.append(f"budget: max concurrency {self._budget.max_concurrency} "
                         f"({self._budget.inputs.tokens_per_request} tokens per request)")
        else:
            lines.append(f"budget: not computed ({budget_or_reason(self.config)[1]}); the engine's own figures "
                         "govern once it reports them")
        stats = self._writer.stats()
        lines.append(f"store: {self.config.store.path}" + ("" if stats.up else f" (DOWN: {stats.last_error})"))
        return lines

    # ---- the step -------------------------------------------------------------------------------
    def run_once(self, now: float) -> bool:
        """One step, the four stages in order; True when a source stopped at its read budget and more is
        waiting (the caller polls again at once instead of sleeping)."""
        ingested = self.ingest(now)
        self.commit(ingested, now)
        self.commit_findings(self.judge(now), now)
        self.publish(now)
        return ingested.more

    def ingest(self, now: float) -> IngestResult:
        """Stage 1: poll the scrapers, read and parse every source (counts: one witness, witnesses.py), NVML."""
        self._open_sources(now)
        ingested = IngestResult()
        for scraper in self._scrapers:  # first, so a log does not count again what its engine's scrape counts
            ingested.records.extend(scraper.poll(now))
        scraped = {s.source: s.counted() for s in self._scrapers}
        for src in self._sources or ():
            batch = src.reader.poll(now)
            ingested.records.extend(counted_once(src.feed(batch.lines), scraped))
            if batch.lines:
                src.last_line_at, src.flushed = now, False
            elif not src.flushed and now - src.last_line_at >= QUIET_FLUSH_SECONDS:
                ingested.records.extend(counted_once(src.flush(), scraped))
                src.flushed = True
            ingested.cursors.extend(src.persistable(batch.cursors))
            ingested.expired.extend(batch.expired)
            ingested.more = ingested.more or batch.more
        ingested.records.extend(self._poll_nvml(now))
        return ingested

    def commit(self, ingested: IngestResult, now: float) -> CommitResult:
        """Stage 2: records with the cursors of their bytes in one transaction; counters follow what was new."""
        result = self._commit(ingested.records, ingested.cursors, ingested.expired, now)
        if now >= self._prune_due:
            self._prune_due = now + PRUNE_EVERY_SECONDS
            self._writer.prune(now)
        return result

    def load_rules(self, config: Config) -> bool:
        """(Re)load the shipped rules and `rules.dirs`; a broken file keeps the last good set, counted and
        logged once per load with every problem (file:line: rule: field: expected)."""
        try:
            ruleset = load_rules([shipped_rules_dir(), *config.rules.dirs])
        except RuleError as exc:
            self.rule_errors = exc.problems
            self.totals.add(("rule_load_errors_total", ()))
            kept = "the last good rule set" if self._rules_loaded else "no rules"
            log.error("rule files rejected; keeping %s:\n%s", kept, "\n".join(exc.problems))
            return False
        self.rule_errors = []
        self._rules_loaded = True
        self.advisor.interval = config.rules.interval_seconds
        self.advisor.config = knobs_of(config)
        self._pending_findings.extend(self.advisor.replace_rules(ruleset.rules))
        return True

    def judge(self, now: float) -> list[Finding]:
        """Stage 3: the advisor's turn — rules over the stored windows against the capacity (agent/judge/).

        Returns the findings that changed state this step (new, changed or cleared), to be stored."""
        out, self._pending_findings = self._pending_findings, []
        store = self._writer.store
        if not self.config.rules.enabled or store is None or not self.advisor.due(now):
            return out
        queries = Queries(store)
        return out + self.advisor.step(now, queries, self.capacities(), queries.engines(),
                                       engine_config(self._latest.facts))

    def commit_findings(self, findings: Sequence[Finding], now: float) -> None:
        if findings:
            self._commit(findings, (), (), now)

    def _poll_nvml(self, now: float) -> list[StoredRecord]:
        if self._nvml is None or now < self._nvml_due:
            return []
        self._nvml_due = now + self.config.nvml.interval_seconds
        result = self._nvml.poll(now)
        self._latest.gpus, self._latest.processes, self._latest.health = result.gpus, result.processes, result.health
        return [*result.gpus, *result.processes, *result.events]

    def _commit(self, records: Sequence[StoredRecord], cursors: Sequence[Cursor | JournalCursor],
                expired: Sequence[Cursor], now: float) -> CommitResult:
        self._observe_counters()
        result = self._writer.commit(records, cursors, expired, totals=self.totals.take_dirty(), now=now)
        for event in result.new_events:
            for key, n in event_counters(event):
                self.totals.absorb(key, float(n))
        self._observe_store()  # this very commit may have failed: show it now, persist it with the next
        self._latest.take(r for r in records if isinstance(r, ServerStats | CapacityFact))
        return result

    def _observe_counters(self) -> None:
        for src in self._sources or ():
            stats = src.reader.stats()
            for attr, metric in _SOURCE_COUNTERS.items():
                self.totals.observe((metric, (src.name,)), getattr(stats, attr))
            self.totals.observe(("parse_errors_total", (src.name,)), src.parse_errors)
        if self._nvml is not None:
            for call, count in self._nvml.errors_by_call.items():
                self.totals.observe(("nvml_errors_total", (call,)), count)
        for scraper in self._scrapers:
            target = scraper.stats()
            self.totals.observe(("scrapes_total", (target.target,)), target.scrapes_total)
            self.totals.observe(("scrape_errors_total", (target.target,)), target.errors_total)
        self._observe_store()

    def _observe_store(self) -> None:
        store = self._writer.stats()
        self.totals.observe(("store_write_errors_total", ()), store.write_errors_total)
        self.totals.observe(("store_dropped_records_total", ()), store.dropped_records_total)

    def publish(self, now: float) -> None:
        """Stage 4: a fresh snapshot for the exporter's thread (and `status`) replaces the old one."""
        store = self._writer.stats()
        snapshot = Snapshot(
            version=__version__, started_at=self._started_at, totals=dict(self.totals.values),
            sources=[s.reader.stats() for s in self._sources or ()], servers=dict(self._latest.servers),
            facts={k: dict(v) for k, v in self._latest.facts.items()}, gpus=self._latest.gpus,
            gpu_processes=self._latest.processes, gpu_health=self._latest.health, nvml_enabled=self._nvml is not None,
            nvml_up=self._nvml.up if self._nvml else False,
            targets=[TargetState(t.target, t.up, t.last_duration_seconds) for t in (s.stats() for s in self._scrapers)],
            store_up=store.up, store_buffered_records=store.buffered_records, store_size_bytes=store.db_bytes,
            budget=_budget_gauges(self._budget), capacities=self.capacities(),
            configured=_configured(self.config), config_last_reload_ok=self._reload_ok,
            findings=self.advisor.active(),
            governing=tuple(r.governs for r in reconcile(self.advisor.active())), build=self._build_info,
            histograms={(h.source, h.signal): h for s in self._scrapers for h in s.histograms_since_start(now)},
        )
        with self._snapshot_lock:
            self._snapshot = snapshot

    def capacities(self) -> dict[str, Capacity]:
        """Each engine instance's capacity: the paper budget, and its own start-up figures once it printed them."""
        engines = set(self._latest.facts) | set(self._latest.servers)
        return {name: capacity_of(self._budget, self._latest.facts.get(name), name) for name in sorted(engines)}

    def snapshot(self) -> Snapshot:
        with self._snapshot_lock:
            return self._snapshot

    # ---- lifecycle ------------------------------------------------------------------------------
    def reload(self, now: float) -> bool:
        """Re-read the config (SIGHUP). A bad file keeps the running config, counted and logged."""
        self.totals.add(("config_reloads_total", ()))
        if self._load_config is None:
            return self.load_rules(self.config)
        try:
            config = self._load_config()
        except AgentError as exc:
            self._reload_ok = False
            self.totals.add(("config_reload_errors_total", ()))
            log.error("config reload rejected; keeping the running config: %s", exc)
            self.load_rules(self.config)  # the rule files may have changed on their own
            return False
        self._close_sources(now)
        self.totals.rebase([*_SOURCE_COUNTERS.values(), "parse_errors_total", "scrapes_total",
                            "scrape_errors_total"])
        self.config = config
        self._build(config, now)
        self._reload_ok = True
        log.info("config reloaded: %s", "; ".join(self.describe()))
        return True

    def _close_sources(self, now: float) -> None:
        """Flush what sources and parsers hold (partial lines, open tracebacks) and commit it."""
        records: list[StoredRecord] = []
        cursors: list[Cursor | JournalCursor] = []
        for src in self._sources or ():
            fresh: tuple[Cursor | JournalCursor, ...] = ()
            if isinstance(src.reader, FileTailer):
                batch = src.reader.close(now)
                records.extend(src.feed(batch.lines))
                fresh = batch.cursors
            else:
                src.reader.close()
            records.extend(src.flush())
            cursors.extend(src.persistable(fresh))  # nothing is held any more: the true cursors
        self._commit(records, cursors, (), now)
        # Written now, not when the spacing has passed: the sources built next resume from the stored cursors.
        self._flush(now)
        self._sources = None

    def _flush(self, now: float) -> None:
        """Write what the writer holds at once (shutdown, reload), its new events counted as `_commit` does."""
        for event in self._writer.flush(now).new_events:
            for key, n in event_counters(event):
                self.totals.absorb(key, float(n))
        self._observe_store()

    def close(self, now: float) -> None:
        """Flush and commit everything held, then release NVML, the waker and the store."""
        self._close_sources(now)
        if self._nvml is not None:
            self._nvml.close()
        self._writer.commit([], totals=self.totals.take_dirty(), now=now)
        self._flush(now)
        self._writer.close()
        self.waker.close()

    def wait_interval(self) -> float:
        """How long the loop may sleep when nothing woke it: the shortest poll interval due."""
        intervals = [s.poll_interval_seconds for s in self.config.sources]
        intervals += [t.interval_seconds for t in self.config.scrape]
        if self._nvml is not None:
            intervals.append(self.config.nvml.interval_seconds)
        held = self._writer.held_for(time.time())  # (the loop's clock is the wall clock)
        if held is not None:
            intervals.append(held)
        return min([*intervals, 5.0])

    def watch_dirs(self) -> set[str]:
        dirs: set[str] = set()
        for src in self._sources or ():
            if isinstance(src.reader, FileTailer) and src.section.use_inotify:
                dirs |= src.reader.watch_dirs()
        return dirs


def _budget_gauges(budget: Budget | None) -> dict[str, float]:
    if budget is None:
        return {}
    return {"max_concurrency": budget.max_concurrency, "usable_kv_bytes": budget.usable_kv_bytes,
            "kv_bytes_per_token": budget.kv_bytes_per_token, "tokens_per_request": budget.inputs.tokens_per_request}


def _configured(config: Config) -> dict[str, float]:
    values = {"max_num_seqs": config.server.max_num_seqs, "max_queue_size": config.server.max_queue_size,
              "max_model_len": config.server.max_model_len}
    return {k: float(v) for k, v in values.items() if v is not None}
