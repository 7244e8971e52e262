"""Window aggregates of the named signals, read from the store for one engine: what rules compare.

A `Window` is one engine over `[since, until)`; `aggregate(condition)` returns the number the rule
compares, or None when the window has too few samples (fewer than the rule's `min_samples`) — a rule
never fires on no data. Series signals come from the engine's load samples (`running`, `waiting`,
`kv_usage_ratio`, …) and NVML; `events.<kind>` count or rate occurrences (per minute), or aggregate a
number the events carry (`field`); histogram signals (`ttft_seconds`, `e2e_latency_seconds`, …) add up
the scraped windows and read quantiles from the buckets, with `min_samples` counting requests.
References (`capacity.*`, `config.*`) are single values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent import histograms
from agent.capacity.capacity import Capacity
from agent.histograms import Buckets
from agent.judge.rules import Aggregate
from agent.records import HISTOGRAM_SIGNALS, Event, HistogramWindow, ServerStats
from agent.sinks.queries import Queries, percentile

_STATS_FIELDS = ("running", "waiting", "swapped", "kv_usage_ratio", "preemptions")


def aggregate(values: Sequence[float], agg: str, window_seconds: float) -> float | None:
    """One aggregate of a series (oldest first); None for an empty series (count and sum are 0)."""
    if agg == "count":
        return float(len(values))
    if agg in ("sum", "rate"):
        total = float(sum(values))
        return total if agg == "sum" else total / max(window_seconds / 60.0, 1e-9)
    if not values:
        return None
    if agg == "growth":
        # mean of the last third over the mean of the first third, minus 1: a series that keeps climbing
        third = max(1, len(values) // 3)
        if len(values) < 3:
            return None
        first = sum(values[:third]) / third
        last = sum(values[-third:]) / third
        return (last / first - 1.0) if first > 0 else None
    if agg in ("p50", "p95", "p99"):
        return percentile(values, int(agg[1:]) / 100.0)
    if agg == "max":
        return float(max(values))
    if agg == "min":
        return float(min(values))
    if agg == "last":
        return float(values[-1])
    return float(sum(values) / len(values))


def references(capacity: Capacity | None, config: Mapping[str, float | None]) -> dict[str, float | None]:
    """Every `capacity.*` and `config.*` value a rule may compare with, None where unknown."""
    cap = capacity
    out: dict[str, float | None] = {
        "capacity.max_concurrency": float(cap.max_concurrency) if cap and cap.max_concurrency is not None else None,
        "capacity.paper_max_concurrency": float(cap.paper_max_concurrency)
        if cap and cap.paper_max_concurrency is not None else None,
        "capacity.engine_max_concurrency": cap.engine_max_concurrency if cap else None,
        "capacity.tokens_per_request": float(cap.tokens_per_request) if cap and cap.tokens_per_request else None,
        "capacity.disagreement_ratio": abs(cap.disagreement_ratio) if cap and cap.disagreement_ratio is not None
        else None,
    }
    for key, value in config.items():
        out[f"config.{key}"] = value
    for name in ("request_timeout", "queue_timeout"):
        ms = config.get(f"{name}_ms")
        out[f"config.{name}_seconds"] = ms / 1000.0 if ms is not None else None
    return out


def histogram_aggregate(windows: Sequence[HistogramWindow], agg: str, window_seconds: float,
                        min_samples: int) -> float | None:
    """One aggregate of a scraped histogram signal over a rule's window: the windows are added bucket by
    bucket; `count`/`sum`/`rate` are over the requests observed, quantiles are interpolated inside
    buckets (agent/histograms.py), `max`/`min` are bucket bounds, `last` and `growth` use each scrape's
    mean. Everything but count/sum/rate needs `min_samples` requests observed."""
    merged = histograms.add([Buckets(w.bounds, w.counts, w.sum) for w in windows])
    requests = merged.count if merged is not None else 0.0
    if agg in ("count", "sum", "rate"):
        total = requests if agg != "sum" else (merged.sum if merged is not None else 0.0)
        return total if agg != "rate" else total / max(window_seconds / 60.0, 1e-9)
    if merged is None or requests <= 0 or requests < min_samples:
        return None
    if agg in ("p50", "p95", "p99"):
        return histograms.quantile(merged, int(agg[1:]) / 100.0)
    if agg == "max":
        return histograms.highest(merged)
    if agg == "min":
        return histograms.lowest(merged)
    means = [w.sum / w.count for w in windows if w.count > 0]
    if agg == "mean":
        return merged.sum / requests
    return aggregate(means, agg, window_seconds)  # last, growth: over each scrape's mean


@dataclass
class Window:
    """One engine's records over `[since, until)`, read lazily and cached per signal."""

    queries: Queries
    engine: str
    since: float
    until: float
    capacity: Capacity | None = None
    refs: Mapping[str, float | None] = field(default_factory=dict)
    _stats: list[ServerStats] | None = None
    _events: dict[str, list[Event]] = field(default_factory=dict)
    _gpu: list[float] | None = None
    _histograms: dict[str, list[HistogramWindow]] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.until - self.since

    def stats(self) -> list[ServerStats]:
        if self._stats is None:
            self._stats = self.queries.window_stats(self.since, self.until, self.engine)
        return self._stats

    def events(self, kind: str) -> list[Event]:
        if kind not in self._events:
            self._events[kind] = self.queries.window_events(self.since, self.until, self.engine, kind)
        return self._events[kind]

    def histograms(self, signal: str) -> list[HistogramWindow]:
        """The scraped histogram windows of one signal in the window, oldest first."""
        if signal not in self._histograms:
            self._histograms[signal] = self.queries.window_histograms(self.since, self.until, self.engine, signal)
        return self._histograms[signal]

    def series(self, signal: str) -> list[float]:
        """The values of a series signal in the window, oldest first (samples lacking it skipped)."""
        if signal in _STATS_FIELDS:
            return [float(v) for s in self.stats() if (v := getattr(s, signal)) is not None]
        if signal == "request_tokens":
            return self._request_tokens()
        if signal == "gpu_memory_used_ratio":
            if self._gpu is None:
                self._gpu = [ratio for _, ratio in self.queries.window_gpu_memory(self.since, self.until)]
            return self._gpu
        raise KeyError(signal)

    def _request_tokens(self) -> list[float]:
        kv_tokens = self.capacity.engine_kv_cache_tokens if self.capacity is not None else None
        out: list[float] = []
        for s in self.stats():
            if not s.running:
                continue
            if s.kv_used_tokens is not None:
                out.append(s.kv_used_tokens / s.running)
            elif s.kv_usage_ratio is not None and kv_tokens:
                out.append(s.kv_usage_ratio * kv_tokens / s.running)
        return out

    def value(self, cond: Aggregate, min_samples: int) -> float | None:
        """The aggregate `cond` names; None when unknown or when a series has fewer than `min_samples`."""
        if cond.signal in self.refs or cond.signal.startswith(("capacity.", "config.")):
            return self.refs.get(cond.signal)
        if cond.signal.startswith("events."):
            events = [e for e in self.events(cond.signal.removeprefix("events."))
                      if all(str(e.fields.get(k) if k != "phase" else e.phase.value) == v
                             for k, v in cond.where.items())]
            if cond.field is None:
                return aggregate([1.0] * len(events), "count" if cond.agg != "rate" else "rate", self.seconds)
            values = [float(v) for e in events if isinstance(v := e.fields.get(cond.field), int | float)
                      and not isinstance(v, bool)]
            return aggregate(values, cond.agg, self.seconds)
        if cond.signal in HISTOGRAM_SIGNALS:
            return histogram_aggregate(self.histograms(cond.signal), cond.agg, self.seconds, min_samples)
        values = self.series(cond.signal)
        if cond.agg not in ("count", "sum", "rate") and len(values) < max(min_samples, 1):
            return None
        return aggregate(values, cond.agg, self.seconds)
