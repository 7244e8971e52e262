"""The store's read side: windows, latest values, percentiles and timelines that status, advisor and report share.

Read-only by construction: it only runs SELECTs through `Store.query`, so it can sit on a read-only
connection (`Store.open_readonly`, a copied database, the daemon's own) and never blocks the writer.
Times are `at` (the record's own time, or when it was stored when the line had none).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.messages import fold
from agent.records import (
    Event,
    EventKind,
    GpuProcessSample,
    GpuSample,
    HistogramWindow,
    Knob,
    Phase,
    Server,
    ServerStats,
    Severity,
)
from agent.sinks.rows import LOAD_STEP_COLUMNS
from agent.sinks.store import Store
from agent.verdicts import Direction, Finding, LoadStep

# The occurrences one stored event stands for, in SQL (as store.occurrences): `fields.count`, else 1.
OCCURRENCES = "coalesce(json_extract(fields, '$.count'), 1)"
_EVENT_COLUMNS = "ts, at, source, server, kind, severity, phase, message, fields, path, offset"
_STATS_COLUMNS = ("ts, at, source, server, running, waiting, swapped, kv_usage_ratio, prompt_tps, gen_tps, "
                  "prefix_hit_ratio, preemptions, kv_used_tokens, path, offset")
_GPU_COLUMNS = ("ts, gpu, uuid, name, pci_bus_id, memory_total_bytes, memory_reserved_bytes, memory_free_bytes, "
                "memory_used_bytes, utilization_gpu_ratio, utilization_memory_ratio, temperature_celsius, "
                "power_watts, power_limit_watts")


def _event(row: Sequence[Any]) -> Event:
    # Readers get the best-known time: the record's own, else when the agent stored it.
    ts = row[1] if row[0] is None else row[0]
    return Event(ts, row[2], Server(row[3]), EventKind(row[4]), Severity(row[5]), Phase(row[6]), row[7],
                 json.loads(row[8]), row[9], row[10])


_STATS_FIELDS = tuple(_STATS_COLUMNS.split(", ")[4:])  # running … offset: each column fills the field it names


def _stats(row: Sequence[Any]) -> ServerStats:
    ts = row[1] if row[0] is None else row[0]
    return ServerStats(ts=ts, source=row[2], server=Server(row[3]), **dict(zip(_STATS_FIELDS, row[4:], strict=True)))




@dataclass(frozen=True)
class KindTimeline:
    """One event kind over a window: how many, the first and the last (their times and messages)."""

    kind: str
    count: int
    first_ts: float
    last_ts: float
    first_message: str


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q` quantile (0–1) of `values`, linear between the nearest ranks (numpy's default); None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Queries:
    """Read queries over one open store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def event_totals(self) -> dict[tuple[str, str, str], int]:
        """Occurrences of stored events by (source, server, kind) (each event's `count`, 1 without one) — what
        retention has left, not a counter."""
        rows = self._store.query(f"SELECT source, server, kind, sum({OCCURRENCES}) FROM events "
                                 "GROUP BY source, server, kind", ())
        return {(row[0], row[1], row[2]): int(row[3]) for row in rows}

    def event_counts(self, since: float, until: float | None = None) -> dict[tuple[str, str, str], int]:
        """Occurrences (each event's `count`, else 1) by (source, server, kind) with `since <= at < until`."""
        rows = self._store.query(f"SELECT source, server, kind, sum({OCCURRENCES}) FROM events WHERE at >= ? "
                                 "AND at < ? GROUP BY source, server, kind",
                                 (since, math.inf if until is None else until))
        return {(row[0], row[1], row[2]): int(row[3]) for row in rows}

    def recent_events(self, limit: int = 50, since: float | None = None) -> list[Event]:
        """The newest events first (at most `limit`, none older than `since`); `ts` is the event's own
        time or, when the line had none, when it was stored."""
        rows = self._store.query(f"SELECT {_EVENT_COLUMNS} FROM events WHERE at >= ? ORDER BY at DESC, rowid DESC "
                           "LIMIT ?", (-math.inf if since is None else since, limit))
        return [_event(row) for row in rows]

    def _distinct(self, table: str, column: str) -> list[str]:
        # A loose index scan: one index seek per distinct value instead of reading every row.
        rows = self._store.query(f"WITH RECURSIVE d(v) AS (SELECT min({column}) FROM {table} UNION ALL "
                           f"SELECT (SELECT min({column}) FROM {table} WHERE {column} > d.v) FROM d "
                           f"WHERE d.v IS NOT NULL) SELECT v FROM d WHERE v IS NOT NULL", ())
        return [str(row[0]) for row in rows]

    def latest_stats(self, source: str | None = None) -> dict[str, ServerStats]:
        """The newest load sample of each source (or of one), by source."""
        sources = [source] if source is not None else self._distinct("server_stats", "source")
        out: dict[str, ServerStats] = {}
        for name in sources:
            rows = self._store.query(f"SELECT {_STATS_COLUMNS} FROM server_stats WHERE source = ? "
                               "ORDER BY at DESC, rowid DESC LIMIT 1", (name,))
            if rows:
                out[name] = _stats(rows[0])
        return out

    def servers(self) -> dict[str, Server]:
        """Which engine each source is, from its load samples and its events (a short incident's log may
        have only one of them)."""
        rows = self._store.query("SELECT DISTINCT source, server FROM server_stats UNION "
                                 "SELECT DISTINCT source, server FROM events", ())
        return {str(source): Server(server) for source, server in rows if server in Server._value2member_map_}

    def served(self, source: str) -> bool:
        """Whether `source` ever served: a load sample, or an event after start-up (a failed start has neither)."""
        return bool(self._store.query("SELECT 1 FROM server_stats WHERE source = ? UNION ALL SELECT 1 FROM events "
                                      "WHERE source = ? AND phase != 'startup' LIMIT 1", (source, source)))

    def scraped(self, source: str) -> bool:
        """Whether any load sample of `source` came from its /metrics (a scrape's samples carry no file)."""
        return bool(self._store.query("SELECT 1 FROM server_stats WHERE source = ? AND path IS NULL LIMIT 1",
                                      (source,)))

    def window_stats(self, since: float, until: float | None = None, source: str | None = None) -> list[ServerStats]:
        """Load samples with `since <= at < until`, oldest first (one source or all), for the advisor."""
        sql = f"SELECT {_STATS_COLUMNS} FROM server_stats WHERE at >= ? AND at < ?"
        params: tuple[Any, ...] = (since, math.inf if until is None else until)
        if source is not None:
            sql, params = sql + " AND source = ?", (*params, source)
        return [_stats(row) for row in self._store.query(sql + " ORDER BY at, rowid", params)]

    def latest_facts(self, source: str | None = None) -> dict[str, dict[str, float | str]]:
        """The newest value of every capacity fact: source → name → value (kept however old)."""
        sql = "SELECT source, name, value FROM facts_latest"
        params: tuple[str, ...] = ()
        if source is not None:
            sql, params = sql + " WHERE source = ?", (source,)
        out: dict[str, dict[str, float | str]] = {}
        for row in self._store.query(sql + " ORDER BY source, name", params):
            out.setdefault(row[0], {})[row[1]] = row[2]
        return out

    def latest_gpu_samples(self) -> list[GpuSample]:
        """The newest sample of every GPU ever seen (by uuid), in NVML index order."""
        out: list[GpuSample] = []
        for uuid in self._distinct("gpu_samples", "uuid"):
            rows = self._store.query(f"SELECT {_GPU_COLUMNS} FROM gpu_samples WHERE uuid = ? ORDER BY ts DESC LIMIT 1",
                               (uuid,))
            out.extend(GpuSample(*row) for row in rows)
        return sorted(out, key=lambda s: (s.gpu, s.uuid))

    def latest_gpu_processes(self) -> list[GpuProcessSample]:
        """The processes of each GPU's newest process poll (the engine's own share of the card)."""
        out: list[GpuProcessSample] = []
        for uuid in self._distinct("gpu_process_samples", "uuid"):
            out.extend(GpuProcessSample(*row) for row in self._store.query(
                "SELECT ts, gpu, uuid, pid, used_memory_bytes FROM gpu_process_samples WHERE uuid = ? AND ts = "
                "(SELECT max(ts) FROM gpu_process_samples WHERE uuid = ?) ORDER BY pid", (uuid, uuid)))
        return sorted(out, key=lambda p: (p.gpu, p.pid))


    def window_events(self, since: float, until: float, source: str, kind: str) -> list[Event]:
        """One engine's events of one kind with `since <= at < until`, oldest first (the advisor's windows)."""
        rows = self._store.query(f"SELECT {_EVENT_COLUMNS} FROM events WHERE at >= ? AND at < ? AND source = ? "
                                 "AND kind = ? ORDER BY at, rowid", (since, until, source, kind))
        return [_event(row) for row in rows]

    def window_histograms(self, since: float, until: float, source: str, signal: str) -> list[HistogramWindow]:
        """One engine's scraped histogram windows of one signal with `since <= ts < until`, oldest first."""
        rows = self._store.query("SELECT ts, source, server, signal, bounds, counts, sum FROM histogram_windows "
                                 "WHERE source = ? AND signal = ? AND ts >= ? AND ts < ? ORDER BY ts",
                                 (source, signal, since, until))
        return [HistogramWindow(float(r[0]), r[1], Server(r[2]), r[3], (*json.loads(r[4]), math.inf),
                                tuple(float(c) for c in json.loads(r[5])), float(r[6])) for r in rows]

    def window_durations(self, since: float, until: float, source: str) -> list[float]:
        """One engine's per-request durations (seconds) with `since <= at < until`, oldest first: the
        requests its access lines and per-request lines saw finish."""
        rows = self._store.query("SELECT duration_s FROM request_samples WHERE source = ? AND at >= ? AND at < ? "
                                 "ORDER BY at, rowid", (source, since, until))
        return [float(r[0]) for r in rows]

    def window_gpu_memory(self, since: float, until: float) -> list[tuple[float, float]]:
        """(ts, the fullest GPU's used ÷ total memory) per NVML poll in the window, oldest first."""
        rows = self._store.query("SELECT ts, max(CAST(memory_used_bytes AS REAL) / memory_total_bytes) FROM "
                                 "gpu_samples WHERE ts >= ? AND ts < ? AND memory_total_bytes > 0 AND "
                                 "memory_used_bytes IS NOT NULL GROUP BY ts ORDER BY ts", (since, until))
        return [(float(r[0]), float(r[1])) for r in rows]

    def engines(self) -> list[str]:
        """Sources that are inference engines (load samples, capacity facts, or events of a server that is
        not the kernel or NVML): what the advisor judges, one by one."""
        names = set(self._distinct("server_stats", "source")) | set(self._distinct("request_samples", "source"))
        names |= {str(r[0]) for r in self._store.query("SELECT DISTINCT source FROM facts_latest")}
        for source in self._distinct("events", "source"):  # an index seek per source, not a scan of events
            if source not in names and self._store.query(
                    "SELECT 1 FROM events WHERE source = ? AND server NOT IN ('kernel', 'nvml') LIMIT 1", (source,)):
                names.add(source)
        return sorted(names)

    def time_span(self) -> tuple[float, float] | None:
        """The first and last record time in the store (events, load samples, request durations), or None."""
        rows = self._store.query("SELECT min(a), max(b) FROM (SELECT min(at) a, max(at) b FROM events UNION ALL "
                                 "SELECT min(at), max(at) FROM server_stats UNION ALL "
                                 "SELECT min(at), max(at) FROM request_samples)")
        if not rows or rows[0][0] is None:
            return None
        return float(rows[0][0]), float(rows[0][1])

    def event_timeline(self, since: float, until: float | None = None,
                       source: str | None = None) -> list[KindTimeline]:
        """Per event kind in the window: count, first and last time, and the first one's message."""
        sql = ("SELECT kind, count(*), min(at), max(at), (SELECT message FROM events f WHERE f.kind = e.kind AND "
               "f.at >= ?1 AND f.at < ?2 AND (?3 IS NULL OR f.source = ?3) ORDER BY at, rowid LIMIT 1) "
               "FROM events e WHERE at >= ?1 AND at < ?2 AND (?3 IS NULL OR source = ?3) GROUP BY kind "
               "ORDER BY min(at)")
        rows = self._store.query(sql, (since, math.inf if until is None else until, source))
        return [KindTimeline(str(r[0]), int(r[1]), float(r[2]), float(r[3]), str(r[4])) for r in rows]

    def sources(self) -> list[str]:
        """Every engine instance that has stored load samples, events or facts."""
        names = set(self._distinct("server_stats", "source")) | set(self._distinct("events", "source"))
        names |= {str(r[0]) for r in self._store.query("SELECT DISTINCT source FROM facts_latest")}
        return sorted(names)

    def findings(self, since: float | None = None, *, active_only: bool = False) -> list[Finding]:
        """Stored findings (a finding's history: activation, changes, clearing), oldest first."""
        sql = ("SELECT ts, since, rule, engine, severity, message, knob, direction, current, recommended, "
               "evidence, arithmetic, window_seconds, active FROM findings WHERE ts >= ?")
        rows = self._store.query(sql + " ORDER BY ts, rowid", (-math.inf if since is None else since,))
        out = [_finding(r) for r in rows]
        if not active_only:
            return out
        latest: dict[tuple[str, str], Finding] = {}
        for f in out:
            latest[(f.rule, f.engine)] = f
        return [f for f in latest.values() if f.active]

    def load_steps(self, since: float | None = None) -> list[LoadStep]:
        """Stored load-test levels, by run and level."""
        rows = self._store.query(f"SELECT {', '.join(LOAD_STEP_COLUMNS)} FROM load_steps WHERE started >= ? "
                                 "ORDER BY started, level", (-math.inf if since is None else since,))
        out: list[LoadStep] = []
        for row in rows:
            values: dict[str, Any] = dict(zip(LOAD_STEP_COLUMNS, row, strict=True))
            values["errors"] = json.loads(values["errors"])
            values["broke"] = bool(values["broke"])
            out.append(LoadStep(**values))
        return out

    # --- what `report` reads: measured on a day of 1 s samples and a million events (bench/report.py) ---

    def event_kinds(self) -> list[str]:
        """Every event kind the store holds (a loose index scan: one seek per kind)."""
        return self._distinct("events", "kind")

    def event_buckets(self, kind: str, since: float, until: float, width: float, buckets: int) -> list[int]:
        """Events of `kind` in each of `buckets` consecutive `width`-second buckets from `since` (never past
        `until`): one count per bucket on the covering (kind, at) index, with no sort."""
        rows = self._store.query("WITH RECURSIVE b(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM b WHERE i + 1 < ?5) "
                                 "SELECT (SELECT count(*) FROM events WHERE kind = ?1 AND at >= ?2 + i * ?4 AND "
                                 "at < min(?2 + (i + 1) * ?4, ?3)) FROM b", (kind, since, until, width, buckets))
        return [int(r[0]) for r in rows]

    def first_event(self, kind: str, since: float, until: float) -> tuple[int, Event] | None:
        """The first event of `kind` in the window with its id (the `--around` handle)."""
        rows = self._store.query(f"SELECT rowid, {_EVENT_COLUMNS} FROM events WHERE kind = ? AND at >= ? AND at < ? "
                                 "ORDER BY at, rowid LIMIT 1", (kind, since, until))
        return (int(rows[0][0]), _event(rows[0][1:])) if rows else None

    def occurrences(self, kind: str, since: float, until: float) -> int:
        """How many occurrences the window's events of `kind` stand for: an event's `count` field where the
        line summed several (vLLM V0 logs every 50th preemption; V1 a per-interval count), else one."""
        rows = self._store.query(f"SELECT sum({OCCURRENCES}) FROM events WHERE kind = ? AND at >= ? AND at < ?",
                                 (kind, since, until))
        return int(rows[0][0] or 0)

    def kind_counts(self, since: float, until: float) -> dict[tuple[str, str], tuple[int, int]]:
        """(source, kind) → (events, occurrences) in the window: what each witness saw, apart."""
        rows = self._store.query(f"SELECT source, kind, count(*), sum({OCCURRENCES}) FROM events WHERE at >= ? AND "
                                 "at < ? GROUP BY source, kind", (since, until))
        return {(str(r[0]), str(r[1])): (int(r[2]), int(r[3])) for r in rows}

    def last_event_time(self, kind: str, since: float, until: float) -> float | None:
        rows = self._store.query("SELECT max(at) FROM events WHERE kind = ? AND at >= ? AND at < ?",
                                 (kind, since, until))
        return None if rows[0][0] is None else float(rows[0][0])

    def event_time(self, event_id: int) -> float | None:
        """When the event with this id happened (its own time, else when it was stored)."""
        rows = self._store.query("SELECT coalesce(ts, at) FROM events WHERE rowid = ?", (event_id,))
        return float(rows[0][0]) if rows else None

    def top_messages(self, since: float, until: float, total: int, limit: int = 10,
                     exact_up_to: int = 100_000, slices: int = 40, per_slice: int = 500) -> MessageCounts:
        """The most frequent errors of the window's `total` events: grouped by kind and the message folded
        (agent/messages.py: numbers, ids and addresses are placeholders), each group shown by its most
        frequent message, counted in occurrences (`fields.count`); info-level events (a queue that became
        non-empty) are not errors and are left out. Messages are already redacted.

        Exact up to `exact_up_to` events. Past that, counting every message means reading every row (a
        second per million), so the counts come from `slices` evenly spread runs of `per_slice` rows
        of the window's rowids and are scaled up: `sampled` says how many rows they stand on.
        """
        if total <= exact_up_to:
            rows = self._store.query(f"SELECT kind, message, sum({OCCURRENCES}) FROM events WHERE at >= ? AND "
                                     "at < ? AND severity != 'info' GROUP BY kind, message", (since, until))
            return MessageCounts(_grouped(((str(r[0]), str(r[1]), int(r[2])) for r in rows), limit), None)
        bounds = self._store.query("SELECT min(rowid), max(rowid) FROM events WHERE at >= ? AND at < ?",
                                   (since, until))[0]  # a scan of the covering time index, no row reads
        first, last = (int(bounds[0]), int(bounds[1])) if bounds[0] is not None else (0, -1)
        step = max(per_slice, (last - first + 1) // slices)
        counts: dict[tuple[str, str], int] = {}
        sampled = 0
        for start in range(first, last + 1, step):
            for kind, message, severity, n in self._store.query(
                    f"SELECT kind, message, severity, {OCCURRENCES} FROM events WHERE rowid >= ? AND rowid < ? "
                    "AND at >= ? AND at < ?", (start, start + per_slice, since, until)):
                sampled += 1
                if severity != "info":
                    counts[(kind, message)] = counts.get((kind, message), 0) + int(n)
        scale = total / sampled if sampled else 0.0
        top = _grouped(((k, m, n) for (k, m), n in counts.items()), limit)
        return MessageCounts([(k, m, round(n * scale)) for k, m, n in top], sampled)

    def time_range(self) -> tuple[float, float] | None:
        """The oldest and newest record time over events, load samples and GPU samples; None when empty.
        (One min() or max() per subquery, so each is a single index seek.)"""
        rows = self._store.query(
            "SELECT min(v), max(w) FROM (SELECT (SELECT min(at) FROM events) v, (SELECT max(at) FROM events) w "
            "UNION ALL SELECT (SELECT min(at) FROM server_stats), (SELECT max(at) FROM server_stats) "
            "UNION ALL SELECT (SELECT min(ts) FROM gpu_samples), (SELECT max(ts) FROM gpu_samples))")
        return None if rows[0][0] is None else (float(rows[0][0]), float(rows[0][1]))

    def load_samples(self, source: str, since: float, until: float) -> list[tuple[Any, ...]]:
        """(at, kv_usage_ratio, running, waiting) of one source in the window, oldest first: one indexed
        read that percentiles, chart buckets and gap detection all share."""
        return self._store.query("SELECT at, kv_usage_ratio, running, waiting FROM server_stats WHERE source = ? AND "
                                 "at >= ? AND at < ? ORDER BY at", (source, since, until))

    def gpus_in(self, since: float, until: float) -> list[tuple[str, int, str, int | None]]:
        """(uuid, index, name, memory total) of every GPU sampled in the window."""
        out = []
        for uuid in self.sample_times("gpu_samples", since, until):
            row = self._store.query("SELECT gpu, name, memory_total_bytes FROM gpu_samples WHERE uuid = ? AND ts >= ? "
                                    "AND ts < ? ORDER BY ts DESC LIMIT 1", (uuid, since, until))[0]
            out.append((uuid, int(row[0]), str(row[1]), None if row[2] is None else int(row[2])))
        return sorted(out, key=lambda g: (g[1], g[0]))

    def gpu_memory(self, uuid: str, since: float, until: float) -> list[tuple[Any, ...]]:
        """(ts, memory_used_bytes) of one GPU in the window, oldest first."""
        return self._store.query("SELECT ts, memory_used_bytes FROM gpu_samples WHERE uuid = ? AND ts >= ? AND ts < ? "
                                 "ORDER BY ts", (uuid, since, until))

    def sample_times(self, table: str, since: float, until: float) -> dict[str, tuple[int, float, float]]:
        """Per source (server_stats) or GPU (gpu_samples): sample count, first and last time in the window.
        The unary `+` keeps the planner on the covering (source|uuid, time) index instead of the time index."""
        at, column = ("at", "source") if table == "server_stats" else ("ts", "uuid")
        if table not in ("server_stats", "gpu_samples"):
            raise ValueError(table)
        rows = self._store.query(f"SELECT {column}, count(*), min({at}), max({at}) FROM {table} WHERE +{at} >= ? "
                                 f"AND +{at} < ? GROUP BY {column}", (since, until))
        return {str(r[0]): (int(r[1]), float(r[2]), float(r[3])) for r in rows}


@dataclass(frozen=True)
class MessageCounts:
    """Top (kind, message, count) rows; `sampled` is the rows they were estimated from (None: exact)."""

    rows: list[tuple[str, str, int]]
    sampled: int | None


def _grouped(rows: Iterable[tuple[str, str, int]], limit: int) -> list[tuple[str, str, int]]:
    """(kind, message, count) rows summed by kind and folded message; each group named by its most frequent
    message (the first in order on a tie), the `limit` largest first."""
    groups: dict[tuple[str, str], list[Any]] = {}  # key → [count, best count, sample]
    for kind, message, n in sorted(rows, key=lambda r: (r[0], r[1])):
        group = groups.setdefault((kind, fold(message)), [0, -1, message])
        group[0] += n
        if n > group[1]:
            group[1], group[2] = n, message
    top = sorted(((kind, sample, count) for (kind, _), (count, _, sample) in groups.items()),
                 key=lambda r: (-r[2], r[0], r[1]))
    return top[:limit]


def _finding(row: Sequence[Any]) -> Finding:
    return Finding(ts=row[0], since=row[1], rule=row[2], engine=row[3], severity=Severity(row[4]), message=row[5],
                   knob=Knob(row[6]) if row[6] else None, direction=Direction(row[7]) if row[7] else None,
                   current=row[8], recommended=row[9], evidence=json.loads(row[10]), arithmetic=row[11],
                   window_seconds=row[12], active=bool(row[13]))
