"""What `report` says, gathered once as plain data: every renderer (text, md, html, json) reads a `Report`.

Read-only: it only calls `Queries` and the capacity arithmetic, so it runs on a copied database, on the
daemon's own (read-only connection) or on an in-memory store built from saved logs. Counts are aggregated
in SQL on covering indexes; each engine's and GPU's samples are read once and give the percentiles, the
peak-keeping chart buckets and the gaps (measured faster than three SQL passes: bench/report.py). Every
field is a number, a string, None or a list/dict of those, so `as_json` is `asdict`.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from agent.capacity.capacity import capacity_of, paper_budget
from agent.config import Config
from agent.errors import AgentError
from agent.judge.precedence import reconcile
from agent.sinks.queries import Queries, percentile
from agent.verdicts import Finding
from agent.views.advice_text import recommendation_json
from agent.views.report_verdict import Verdict, verdict
from agent.visibility import engines_blind_spots

MAX_POINTS = 2000
"""Chart series are cut into at most this many buckets; each keeps its bucket's min and max (the peaks)."""
AROUND_SECONDS = 1800.0
"""`--around EVENT_ID` reports on this many seconds either side of the event."""
OCCURRENCES_UP_TO = 100_000
"""Up to this many events of a kind in the window, their `count` fields are summed (see KindLine)."""
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
    occurrences: int | None = None  # what the lines stand for (summed `count` fields); None: not counted


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
    over_capacity_ratio: float | None = None  # share of samples with running above max_concurrency


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
    """Something the agent could not see: `what` is no_samples, gap, no_gpu_samples, no_capacity, or
    log_cannot_show_<thing> (agent/visibility.py: what an engine's log never shows, and the witness that does)."""

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
    messages_sampled: int | None  # None: exact counts; else the rows the estimated counts stand on
    load_steps: list[dict[str, Any]]
    blind: list[Blind]
    charts: dict[str, Chart]
    markers: list[dict[str, Any]]
    version: int = 1
    # one answer per (engine, knob) of the active findings, by the advisor's precedence (agent/judge/precedence.py)
    recommendations: list[dict[str, Any]] = field(default_factory=list)


def as_json(report: Report) -> dict[str, Any]:
    """The report as plain data (docs/report.schema.json describes it)."""
    return asdict(report)


# --- the window ---------------------------------------------------------------------------------------

def parse_duration(text: str) -> float:
    """`90s`, `30m`, `2h`, `1d` (or a bare number of seconds) in seconds; AgentError otherwise. The rules'
    parser (`agent.judge.rules.seconds`), so `report`, `advise` and rule windows accept the same text."""
    from agent.judge.vocabulary import seconds

    try:
        return seconds(text)
    except ValueError:
        raise AgentError(f"--since {text!r}: expected a duration such as 90s, 30m, 2h or 1d") from None


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
    values.sort()
    return Spread(len(values), values[-1] if values else None, percentile(values, 0.5), percentile(values, 0.95),
                  percentile(values, 0.99))


def _findings_for(queries: Queries, config: Config | None, window: Window, *, evaluate: bool) -> list[Finding]:
    """The findings to show: the advisor run over the window (saved logs: nothing was stored), else the
    stored history of the window. The one place `report` meets the advisor."""
    if evaluate:
        try:
            from agent.judge.replay import evaluate_window
        except ImportError:
            pass
        else:
            found: list[Finding] = evaluate_window(queries, config, window.since, window.until)
            return found
    latest: dict[tuple[str, str], Finding] = {}
    for finding in queries.findings():  # a finding's history is small: a row per change
        if finding.ts < window.until:
            latest[(finding.rule, finding.engine)] = finding
    # Changed in the window, or still active from before it.
    return [f for f in latest.values() if f.ts >= window.since or f.active]


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


def event_bucket_seconds(window: Window) -> float:
    """Events are counted per minute, or per whole minutes when the window needs more than MAX_POINTS."""
    return max(60.0, math.ceil((window.until - window.since) / MAX_POINTS / 60.0) * 60.0)


@dataclass
class _Grid:
    """Chart buckets over the window: `n` buckets of `width` seconds from `since`."""

    since: float
    width: float
    n: int

    @classmethod
    def over(cls, window: Window, width: float) -> _Grid:
        n = min(MAX_POINTS, max(1, math.ceil((window.until - window.since) / width)))
        return cls(window.since, width, n)

    @property
    def x(self) -> list[float]:
        return [self.since + i * self.width for i in range(self.n)]

    def cuts(self, times: list[float]) -> list[int]:
        """Index of the first sample of each bucket in the sorted `times` (and one past the end)."""
        return [bisect.bisect_left(times, self.since + i * self.width) for i in range(self.n)] + [len(times)]

    def fold(self, cuts: list[int], values: list[Any], peak: bool) -> tuple[list[float | None], list[float | None]]:
        """Per bucket: (min, max) of `values` (None where a bucket holds no value); one C-level min/max
        per bucket over a slice, since a day of 1 s samples is too many for a Python loop."""
        lo: list[float | None] = [None] * self.n
        hi: list[float | None] = [None] * self.n
        for b in range(self.n):
            chunk = [v for v in values[cuts[b]:cuts[b + 1]] if v is not None]
            if chunk:
                hi[b] = max(chunk)
                if peak:
                    lo[b] = min(chunk)
        return (lo, hi) if peak else (hi, hi)


def _gaps(subject: str, noun: str, times: list[float], window: Window) -> list[Blind]:
    """Silences longer than five sampling intervals (at least 30 s), the window's edges included."""
    if len(times) < 2:
        return []
    limit = max(30.0, 5 * (times[-1] - times[0]) / (len(times) - 1))
    edges = [window.since, *times, window.until]
    return [Blind("gap", subject, a, b, f"{noun} {subject}: no samples for {b - a:,.0f} s")
            for a, b in itertools.pairwise(edges) if b - a > limit]


def gather(queries: Queries, config: Config | None, window: Window, *, source: str,
           evaluate_findings: bool = False) -> Report:
    """Everything the report shows for `window`, from the store behind `queries`."""
    since, until = window.since, window.until
    ev_grid = _Grid.over(window, event_bucket_seconds(window))
    events = Chart(ev_grid.x, {}, ev_grid.width)
    timeline: list[KindLine] = []
    for kind in queries.event_kinds():
        counts = queries.event_buckets(kind, since, until, ev_grid.width, ev_grid.n)
        head = queries.first_event(kind, since, until) if any(counts) else None
        if head is None:
            continue
        events.series[kind] = [float(c) for c in counts]
        total = sum(counts)
        # An event may stand for several (vLLM's every-50th preemption warning, a scrape's refusal or preemption
        # count, SGLang's retract count). Summing reads every row of the kind, so it stops at OCCURRENCES_UP_TO.
        occurrences = queries.occurrences(kind, since, until) if total <= OCCURRENCES_UP_TO else None
        timeline.append(KindLine(kind, total, float(head[1].ts or since),
                                 queries.last_event_time(kind, since, until) or since, head[0], head[1].message,
                                 occurrences))
    timeline.sort(key=lambda k: k.first)
    seen = queries.sample_times("server_stats", since, until)
    gpu_seen = queries.sample_times("gpu_samples", since, until)
    steps = [(last - first) / (count - 1) for count, first, last in [*seen.values(), *gpu_seen.values()] if count > 1]
    grid = _Grid.over(window, max(1.0, (until - since) / MAX_POINTS, 1.5 * max(steps, default=1.0)))
    sampled = set(queries.latest_stats())  # engines that report load at all (not the kernel log, say)
    capacity = _capacity(queries, config, sorted(sampled | set(queries.latest_facts())))
    limits = {c.engine: c.max_concurrency for c in capacity}
    kv, load, memory_chart = Chart(grid.x, {}, grid.width), Chart(grid.x, {}, grid.width), Chart(grid.x, {}, grid.width)
    loads: list[EngineLoad] = []
    blind: list[Blind] = []
    for engine in sorted(sampled):
        rows = queries.load_samples(engine, since, until)
        if not rows:
            blind.append(Blind("no_samples", engine, since, until, f"no load samples from engine {engine} in the "
                               "window"))
            continue
        times, kv_values, running, waiting = (list(c) for c in zip(*rows, strict=True))
        sorted_running = sorted(float(v) for v in running if v is not None)
        kv_spread, waiting_spread = (_spread([float(v) for v in c if v is not None]) for c in (kv_values, waiting))
        limit = limits.get(engine)
        over = (1 - bisect.bisect_right(sorted_running, limit) / len(sorted_running)
                if limit is not None and sorted_running else None)
        loads.append(EngineLoad(engine, kv_spread, _spread(sorted_running), waiting_spread, limit, over))
        cuts = grid.cuts(times)
        low, high = grid.fold(cuts, kv_values, True)
        kv.series[f"{engine} max"], kv.series[f"{engine} min"] = high, low  # max first: the band's upper edge
        _, load.series[f"{engine} running"] = grid.fold(cuts, running, False)
        _, load.series[f"{engine} waiting"] = grid.fold(cuts, waiting, False)
        blind += _gaps(engine, "engine", times, window)
    gpus = queries.gpus_in(since, until)
    memory: list[GpuMemory] = []
    for uuid, index, name, card_bytes in gpus:
        times, used = (list(c) for c in zip(*queries.gpu_memory(uuid, since, until), strict=True))
        memory.append(GpuMemory(index, uuid, name, card_bytes, _spread([float(v) for v in used if v is not None])))
        low, high = grid.fold(grid.cuts(times), used, True)
        memory_chart.series[f"GPU {index} max"], memory_chart.series[f"GPU {index} min"] = high, low
        blind += _gaps(uuid, "GPU", times, window)
    if not gpus:
        blind.append(Blind("no_gpu_samples", "nvml", since, until, "no GPU samples in the window (NVML off, "
                           "unavailable, or the agent was not running)"))
    blind += [Blind(f"log_cannot_show_{b.what}", engine, None, None, b.sentence())
              for engine, spots in engines_blind_spots(queries.servers(), queries.latest_facts(),
                                                       queries.scraped, queries.served).items() for b in spots]
    blind += [Blind("no_capacity", c.engine, None, None, f"no capacity figure for {c.engine}: no config budget and "
                    "no engine start-up lines (the capacity line is missing)")
              for c in capacity if c.max_concurrency is None]
    found = _findings_for(queries, config, window, evaluate=evaluate_findings)
    findings = [_finding_line(f) for f in found]
    load_steps = [asdict(s) for s in queries.load_steps(since=since) if s.started < until]
    empty = not timeline and not loads and not memory and not findings and not load_steps
    top = queries.top_messages(since, until, sum(k.count for k in timeline))
    from agent.judge.replay import rule_categories

    judged = verdict(timeline, loads, capacity, window, empty, found,
                     rule_categories(config), queries.kind_counts(since, until) if found else {})
    return Report(source, window, empty, judged, timeline, loads, memory,
                  capacity, findings, [MessageLine(*m) for m in top.rows], top.sampled, load_steps, blind,
                  {"memory": memory_chart, "kv": kv, "load": load, "events": events},
                  [{"ts": k.first, "kind": k.kind, "id": k.first_id} for k in timeline],
                  recommendations=[recommendation_json(r) for r in reconcile(f for f in found if f.active)])
