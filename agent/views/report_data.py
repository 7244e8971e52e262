"""What `report` says, gathered once as plain data: every renderer (text, md, html, json) reads a `Report`.

Read-only: it only calls `Queries` (SELECTs aggregated in SQL) and the capacity arithmetic, so it runs on
a copied database, on the daemon's own (read-only connection) or on an in-memory store built from saved
logs. Every field is a number, a string, None or a list/dict of those, so `as_json` is `asdict`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from agent.capacity.capacity import capacity_of, paper_budget
from agent.config import Config
from agent.errors import AgentError
from agent.records import Finding
from agent.sinks.queries import Queries, percentile
from agent.views.report_verdict import Verdict, verdict

MAX_POINTS = 2000
"""Chart series are cut into at most this many buckets; each keeps its bucket's min and max (the peaks)."""
AROUND_SECONDS = 1800.0
"""`--around EVENT_ID` reports on this many seconds either side of the event."""
CONFIG_KNOBS = ("max_num_seqs", "max_model_len", "gpu_memory_fraction", "kv_cache_dtype")


@dataclass(frozen=True)
class Window:
    since: float
    until: float
    label: str


@dataclass(frozen=True)
class KindLine:
    kind: str
    count: int
    first: float
    last: float
    first_id: int | None
    first_message: str


@dataclass(frozen=True)
class Spread:
    samples: int
    peak: float | None
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True)
class EngineLoad:
    engine: str
    kv_usage_ratio: Spread
    running: Spread
    waiting: Spread
    max_concurrency: int | None


@dataclass(frozen=True)
class GpuMemory:
    gpu: int
    uuid: str
    name: str
    total_bytes: int | None
    used_bytes: Spread


@dataclass(frozen=True)
class CapacityLine:
    engine: str
    configured: dict[str, float | str | None]
    paper_max_concurrency: int | None
    engine_max_concurrency: float | None
    engine_kv_cache_tokens: float | None
    tokens_per_request: int | None
    governs: str | None
    max_concurrency: int | None
    disagreement_ratio: float | None


@dataclass(frozen=True)
class MessageLine:
    kind: str
    message: str
    count: int


@dataclass(frozen=True)
class Blind:
    """Something the agent could not see: `what` is no_samples, gap, no_gpu_samples or no_capacity."""

    what: str
    subject: str
    since: float | None
    until: float | None
    detail: str


@dataclass(frozen=True)
class Chart:
    """Aligned series for one chart: `x` are bucket start times; each series has one value (or None) per x."""

    x: list[float]
    series: dict[str, list[float | None]] = field(default_factory=dict)
    bucket_seconds: float = 0.0


@dataclass(frozen=True)
class Report:
    source: str
    window: Window
    empty: bool
    verdict: Verdict
    timeline: list[KindLine]
    engines: list[EngineLoad]
    gpus: list[GpuMemory]
    capacity: list[CapacityLine]
    findings: list[dict[str, Any]]
    messages: list[MessageLine]
    load_steps: list[dict[str, Any]]
    blind: list[Blind]
    charts: dict[str, Chart]
    markers: list[dict[str, Any]]
    version: int = 1


def as_json(report: Report) -> dict[str, Any]:
    """The report as plain data (docs/report.schema.json describes it)."""
    return asdict(report)


# --- the window ---------------------------------------------------------------------------------------

def parse_duration(text: str) -> float:
    """`90s`, `30m`, `2h`, `1d` (or a bare number of seconds) in seconds; AgentError otherwise."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    body, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1.0)
    try:
        seconds = float(body) * unit
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or math.isinf(seconds):
        raise AgentError(f"--since {text!r}: expected a duration such as 90s, 30m, 2h or 1d")
    return seconds


def parse_time(text: str, option: str) -> float:
    """An ISO 8601 time (UTC when it names no zone) or epoch seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError as exc:
        raise AgentError(f"{option} {text!r}: expected a time such as 2026-12-01T14:00 (UTC) or epoch "
                         "seconds") from exc
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def resolve_window(queries: Queries, now: float, *, since: str | None = None, start: str | None = None,
                   end: str | None = None, around: int | None = None) -> Window:
    """The window the options name; with none, the 24 hours up to the store's newest record (all of it
    for a shorter store), so a copied database reports on its own last day, not on an empty 'now'."""
    if around is not None:
        at = queries.event_time(around)
        if at is None:
            raise AgentError(f"--around {around}: no event with that id in the store")
        return Window(at - AROUND_SECONDS, at + AROUND_SECONDS, f"±{AROUND_SECONDS / 60:.0f} min around event {around}")
    if since is not None:
        return Window(now - parse_duration(since), now, f"last {since}")
    if start is not None or end is not None:
        lo = parse_time(start, "--from") if start is not None else -math.inf
        hi = parse_time(end, "--to") if end is not None else now
        if lo == -math.inf:
            span = queries.time_range()
            lo = span[0] if span else hi - 86400.0
        if hi <= lo:
            raise AgentError("--to must be after --from")
        return Window(lo, hi, "chosen range")
    span = queries.time_range()
    if span is None:
        return Window(now - 86400.0, now, "last 24h")
    lo, hi = span
    hi = math.nextafter(hi, math.inf)
    return Window(max(lo, hi - 86400.0), hi, "last 24h of the store" if hi - lo > 86400.0 else "whole store")


# --- gathering -----------------------------------------------------------------------------------------

def _spread(values: list[float]) -> Spread:
    return Spread(len(values), values[-1] if values else None, percentile(values, 0.5), percentile(values, 0.95),
                  percentile(values, 0.99))


def _findings_for(queries: Queries, config: Config | None, window: Window, *, evaluate: bool) -> list[Finding]:
    """The findings to show: the advisor run over the window (saved logs: nothing was stored), else the
    stored history of the window. The one place `report` meets the advisor."""
    if evaluate:
        try:
            from agent.judge.advisor import evaluate_window  # type: ignore[import-not-found, import-untyped, unused-ignore]
        except ImportError:
            pass
        else:
            found: list[Finding] = evaluate_window(queries, config, window.since, window.until)
            return found
    latest: dict[tuple[str, str], Finding] = {}
    for finding in queries.findings(since=window.since):
        if finding.ts < window.until:
            latest[(finding.rule, finding.engine)] = finding
    return list(latest.values())


def _finding_line(f: Finding) -> dict[str, Any]:
    return {"rule": f.rule, "engine": f.engine, "severity": f.severity.value, "message": f.message,
            "knob": f.knob.value if f.knob else None, "direction": f.direction.value if f.direction else None,
            "current": f.current, "recommended": f.recommended, "evidence": dict(f.evidence),
            "arithmetic": f.arithmetic, "since": f.since, "active": f.active}


def _capacity(queries: Queries, config: Config | None, engines: list[str]) -> list[CapacityLine]:
    budget = paper_budget(config)
    facts = queries.latest_facts()
    out: list[CapacityLine] = []
    for engine in engines:
        own = facts.get(engine, {})
        cap = capacity_of(budget, own, engine)
        configured: dict[str, float | str | None] = {}
        for knob in CONFIG_KNOBS:
            value: Any = getattr(config.server, knob, None) if config is not None else None
            if isinstance(value, Enum):
                value = value.value
            engine_name = "gpu_memory_utilization" if knob == "gpu_memory_fraction" else knob
            configured[knob] = own.get(engine_name, value)
        out.append(CapacityLine(engine, configured, cap.paper_max_concurrency, cap.engine_max_concurrency,
                                cap.engine_kv_cache_tokens, cap.tokens_per_request, cap.governs, cap.max_concurrency,
                                cap.disagreement_ratio))
    return out


def _blind(queries: Queries, window: Window, engines: list[str], gpus: list[tuple[str, int, str, int | None]],
           capacity: list[CapacityLine]) -> list[Blind]:
    out: list[Blind] = []
    for table, names, noun in (("server_stats", engines, "engine"), ("gpu_samples", [g[0] for g in gpus], "GPU")):
        seen = queries.sample_times(table, window.since, window.until)
        for name in names:
            if name not in seen:
                out.append(Blind("no_samples", name, window.since, window.until,
                                 f"no load samples from {noun} {name} in the window"))
                continue
            count, first, last = seen[name]
            step = (last - first) / (count - 1) if count > 1 else 60.0
            limit = max(30.0, 5 * step)
            holes = [(window.since, first)] if first - window.since > limit else []
            holes += queries.sample_gaps(table, name, window.since, window.until, limit)
            if window.until - last > limit:
                holes.append((last, window.until))
            for lo, hi in holes:
                out.append(Blind("gap", name, lo, hi, f"{noun} {name}: no samples for {hi - lo:,.0f} s"))
    if not gpus:
        out.append(Blind("no_gpu_samples", "nvml", window.since, window.until,
                         "no GPU samples in the window (NVML off, unavailable, or the agent was not running)"))
    for line in capacity:
        if line.max_concurrency is None:
            out.append(Blind("no_capacity", line.engine, None, None, f"no capacity figure for {line.engine}: no "
                             "config budget and no engine start-up lines (the capacity line is missing)"))
    return out


def _sample_step(queries: Queries, window: Window) -> float:
    """The slowest typical sampling interval of any engine or GPU in the window (1 s when unknown)."""
    steps = [(last - first) / (count - 1) for table in ("server_stats", "gpu_samples")
             for count, first, last in queries.sample_times(table, window.since, window.until).values() if count > 1]
    return max(steps, default=1.0) * 1.5


def event_bucket_seconds(window: Window) -> float:
    """Events are counted per minute, or per whole minutes when the window needs more than MAX_POINTS."""
    return max(60.0, math.ceil((window.until - window.since) / MAX_POINTS / 60.0) * 60.0)


def _charts(queries: Queries, window: Window, engines: list[str], gpus: list[tuple[str, int, str, int | None]],
            kinds: list[str], event_rows: list[tuple[str, int, int, float, float]], step: float) -> dict[str, Chart]:
    span = window.until - window.since
    width = max(1.0, span / MAX_POINTS, step)  # never finer than the samples: a bucket without one is a gap
    n = min(MAX_POINTS, max(1, math.ceil(span / width)))
    x = [window.since + i * width for i in range(n)]

    def blank() -> list[float | None]:
        return [None] * n

    memory, kv, load = Chart(x, {}, width), Chart(x, {}, width), Chart(x, {}, width)
    for uuid, index, _, _ in gpus:
        lo, hi = blank(), blank()
        for b, mn, mx in queries.gpu_buckets(uuid, window.since, window.until, width):
            if 0 <= b < n:
                lo[b], hi[b] = mn, mx
        memory.series[f"GPU {index} max"], memory.series[f"GPU {index} min"] = hi, lo
    for engine in engines:
        kv_lo, kv_hi, running, waiting = blank(), blank(), blank(), blank()
        for b, mn, mx, run, wait, _ in queries.stats_buckets(engine, window.since, window.until, width):
            if 0 <= b < n:
                kv_lo[b], kv_hi[b], running[b], waiting[b] = mn, mx, run, wait
        kv.series[f"{engine} max"], kv.series[f"{engine} min"] = kv_hi, kv_lo
        load.series[f"{engine} running"], load.series[f"{engine} waiting"] = running, waiting
    ev_width = event_bucket_seconds(window)
    ev_n = min(MAX_POINTS, max(1, math.ceil(span / ev_width)))
    events = Chart([window.since + i * ev_width for i in range(ev_n)], {}, ev_width)
    for kind in kinds:
        events.series[kind] = [0.0] * ev_n
    for kind, b, count, _, _ in event_rows:
        if 0 <= b < ev_n:
            events.series[kind][b] = float(count)
    return {"memory": memory, "kv": kv, "load": load, "events": events}


def gather(queries: Queries, config: Config | None, window: Window, *, source: str,
           evaluate_findings: bool = False) -> Report:
    """Everything the report shows for `window`, from the store behind `queries`."""
    rows = queries.event_buckets(window.since, window.until, event_bucket_seconds(window))
    totals: dict[str, list[float]] = {}
    for kind, _, n, first, last in rows:
        entry = totals.setdefault(kind, [0.0, first, last])
        entry[0] += n
        entry[1], entry[2] = min(entry[1], first), max(entry[2], last)
    timeline: list[KindLine] = []
    for kind, (total, first, last) in sorted(totals.items(), key=lambda item: item[1][1]):
        head = queries.first_event(kind, window.since, window.until)
        timeline.append(KindLine(kind, int(total), first, last, head[0] if head else None,
                                 head[1].message if head else ""))
    seen = queries.sample_times("server_stats", window.since, window.until)
    sampled = set(queries.latest_stats())  # engines that report load at all (not the kernel log, say)
    engines = sorted(sampled | set(queries.latest_facts()))
    capacity = _capacity(queries, config, engines)
    limits = {c.engine: c.max_concurrency for c in capacity}

    def spread(engine: str, column: str) -> Spread:
        return _spread(queries.stats_values(engine, column, window.since, window.until))

    loads = [EngineLoad(e, spread(e, "kv_usage_ratio"), spread(e, "running"), spread(e, "waiting"), limits.get(e))
             for e in sorted(seen)]
    gpus = queries.gpus_in(window.since, window.until)
    memory = [GpuMemory(index, uuid, name, total, _spread(queries.gpu_memory_values(uuid, window.since, window.until)))
              for uuid, index, name, total in gpus]
    findings = [_finding_line(f) for f in _findings_for(queries, config, window, evaluate=evaluate_findings)]
    steps = [asdict(s) for s in queries.load_steps(since=window.since) if s.started < window.until]
    empty = not timeline and not loads and not memory and not findings and not steps
    markers = [{"ts": k.first, "kind": k.kind, "id": k.first_id} for k in timeline]
    charts = _charts(queries, window, [e.engine for e in loads], gpus, [k.kind for k in timeline], rows,
                     _sample_step(queries, window))
    messages = [MessageLine(*m) for m in queries.top_messages(window.since, window.until)]
    return Report(source, window, empty, verdict(timeline, loads, capacity, window, empty), timeline, loads, memory,
                  capacity, findings, messages, steps, _blind(queries, window, sorted(sampled), gpus, capacity),
                  charts, markers)
