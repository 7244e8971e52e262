"""Window aggregates of the named signals, read from the store for one engine: what rules compare.

A `Window` is one engine over `[since, until)`; `aggregate(condition)` returns the number the rule
compares, or None when the window has too few samples (fewer than the rule's `min_samples`) — a rule
never fires on no data. Series signals come from the engine's load samples (`running`, `waiting`,
`kv_usage_ratio`, …) and NVML; `events.<kind>` count or rate occurrences (per minute), or aggregate a
number the events carry (`field`) — an event counts as many occurrences as its `fields.count` says (default
1: a V0 preemption warning stands for every preemption since the last one, a scrape's delta for all it saw);
`joint` tests several per-sample signals in the same stats sample; histogram signals (`ttft_seconds`,
`e2e_latency_seconds`, …) add up the scraped windows and read quantiles from the buckets, with
`min_samples` counting requests. References (`capacity.*`, `config.*`, `file.*`, `engine.*`) are single values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agent import histograms
from agent.capacity.capacity import Capacity
from agent.histograms import Buckets
from agent.judge.rules import Aggregate, SampleCondition
from agent.judge.sizing import sizing
from agent.judge.together import TogetherTest
from agent.records import HISTOGRAM_SIGNALS, Event, HistogramWindow, Server, ServerStats
from agent.sinks.queries import Queries, percentile

_STATS_FIELDS = ("running", "waiting", "swapped", "kv_usage_ratio", "preemptions", "gen_tps")


def _number(event: Event, name: str) -> float | None:
    v = event.fields.get(name)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def timeout_phase(event: Event) -> str:
    """Where a deadline hit, by what the engine saw: tokens produced decide (more than 0: `generation`; 0:
    `queue` — a request that produced nothing was queued or refused, which a longer timeout does not fix),
    then the parser's `timeout_on` (queue/generation), then the event's phase."""
    tokens = _number(event, "tokens_produced")
    if tokens is None:
        tokens = _number(event, "tokens")
    if tokens is not None:
        return "generation" if tokens > 0 else "queue"
    on = event.fields.get("timeout_on")
    if on in ("queue", "generation"):
        return str(on)
    return event.phase.value


_NO_CACHE_MEMORY = ("No available memory for the cache blocks", "Not enough memory. Please try to increase",
                    "is larger than the profiled value")


def startup_cause(event: Event) -> str:
    """Which start-up failure an OOM at start-up is: `max_model_len` (one request of max_model_len does not
    fit the KV cache: the error names the length), `warmup` (the sampler warm-up with max_num_seqs dummy
    requests), `prefill` (TGI's prefill batch), `no_cache_memory` (the engine says nothing is left for the
    KV cache after weights and activations: vLLM's "No available memory for the cache blocks" or 0 blocks,
    SGLang's "Not enough memory" or a negative profiled pool), else `load` (a plain allocation failure while
    loading or warming up: no figure says which knob, so no rule sizes one)."""
    if "max_model_len" in event.fields or "kv_cache_tokens" in event.fields or "`max_total_tokens" in event.message:
        return "max_model_len"  # TGI: "Not enough memory to handle `max_total_tokens=N`" (one request of it)
    if "dummy_requests" in event.fields or "warming up" in event.message:
        return "warmup"
    if "prefill_tokens" in event.fields or "prefill tokens" in event.message:
        return "prefill"  # TGI: its prefill batch does not fit (--max-batch-prefill-tokens), not the KV cache
    if event.fields.get("gpu_blocks") == 0 or any(text in event.message for text in _NO_CACHE_MEMORY):
        return "no_cache_memory"
    return "load"  # an allocation failed loading or warming up, with no figure to size a knob from


def attribute(event: Event, key: str) -> str:
    """The value a rule's `where` compares: `phase` (a deadline's placed by `timeout_phase`), `cause` (a
    start-up OOM's, `startup_cause`), else the field as text."""
    if key == "phase":
        return timeout_phase(event) if event.kind.value == "deadline_exceeded" else event.phase.value
    if key == "cause":
        return startup_cause(event) if event.phase.value == "startup" else "runtime"
    return str(event.fields.get(key))


def occurrences(event: Event) -> float:
    """How many occurrences one stored event stands for: `fields.count` (default 1; a non-number counts 1)."""
    n = event.fields.get("count")
    if isinstance(n, int | float) and not isinstance(n, bool) and n >= 0:
        return float(n)
    return 1.0


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
    size = sizing(cap, config.get("workload_tokens"))
    out: dict[str, float | None] = {
        "capacity.max_concurrency": float(size.governing) if size.governing is not None else None,
        "capacity.worst_max_concurrency": float(size.worst) if size.worst is not None else None,
        "capacity.expected_max_concurrency": float(size.expected) if size.expected is not None else None,
        "capacity.paper_max_concurrency": float(cap.paper_max_concurrency)
        if cap and cap.paper_max_concurrency is not None else None,
        "capacity.engine_max_concurrency": cap.engine_max_concurrency if cap else None,
        "capacity.tokens_per_request": float(size.governing_tokens) if size.governing_tokens else None,
        "capacity.disagreement_ratio": abs(cap.disagreement_ratio) if cap and cap.disagreement_ratio is not None
        else None,
    }
    for key, value in config.items():
        out[key if "." in key else f"config.{key}"] = value  # `engine.*` / `file.*` keep their prefix
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
    server: Server | None = None  # the engine software, for the knobs' native names
    _stats: list[ServerStats] | None = None
    _events: dict[str, list[Event]] = field(default_factory=dict)
    _gpu: list[float] | None = None
    _durations: list[float] | None = None
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
        if signal == "request_duration_seconds":
            if self._durations is None:
                self._durations = self.queries.window_durations(self.since, self.until, self.engine)
            return self._durations
        if signal == "gpu_memory_used_ratio":
            if self._gpu is None:
                self._gpu = [ratio for _, ratio in self.queries.window_gpu_memory(self.since, self.until)]
            return self._gpu
        raise KeyError(signal)

    def _request_tokens(self) -> list[float]:
        return [t for s in self.stats() if (t := self._tokens_of(s)) is not None]

    def _tokens_of(self, s: ServerStats) -> float | None:
        """KV tokens per running request in one sample, None where the sample cannot tell."""
        kv_tokens = self.capacity.engine_kv_cache_tokens if self.capacity is not None else None
        if not s.running:
            return None
        if s.kv_used_tokens is not None:
            return s.kv_used_tokens / s.running
        if s.kv_usage_ratio is not None and kv_tokens:
            return s.kv_usage_ratio * kv_tokens / s.running
        return None

    def sample_value(self, s: ServerStats, signal: str) -> float | None:
        """One per-sample signal of one stats sample."""
        if signal == "request_tokens":
            return self._tokens_of(s)
        v = getattr(s, signal)
        return None if v is None else float(v)

    def joint(self, tests: Sequence[SampleCondition], compare: Callable[[SampleCondition, float], bool],
              ) -> list[dict[str, float]]:
        """The samples in which every test holds (each as signal → value), oldest first. `compare` applies
        one test's operator and right-hand side; a sample lacking a signal does not match."""
        out: list[dict[str, float]] = []
        for s in self.stats():
            values: dict[str, float] = {}
            for t in tests:
                v = self.sample_value(s, t.signal)
                if v is None or not compare(t, v):
                    break
                values[t.signal] = v
            else:
                out.append(values)
        return out

    def points(self, test: TogetherTest) -> list[tuple[float, float]]:
        """A `together` test's stream, oldest first, as (time, value): the events it names (after `where`),
        each valued at its occurrences (`fields.count`); or every sample that carries the signal."""
        if test.is_event:
            found = [(e.ts, occurrences(e)) for kind in test.kinds for e in self.events(kind) if e.ts is not None
                     and all(attribute(e, k) == v for k, v in test.where.items())]
        elif test.signal == "gpu_memory_used_ratio":
            found = list(self.queries.window_gpu_memory(self.since, self.until))
        else:
            assert isinstance(test.signal, str)
            found = [(s.ts, v) for s in self.stats() if s.ts is not None
                     and (v := self.sample_value(s, test.signal)) is not None]
        return sorted(found)

    def value(self, cond: Aggregate, min_samples: int) -> float | None:
        """The aggregate `cond` names; None when unknown or when a series has fewer than `min_samples`."""
        if cond.signal in self.refs or cond.signal.startswith(("capacity.", "config.", "file.", "engine.")):
            return self.refs.get(cond.signal)
        if cond.signal.startswith("events."):
            events = [e for e in self.events(cond.signal.removeprefix("events."))
                      if all(attribute(e, k) == v for k, v in cond.where.items())]
            if cond.field is None:
                return aggregate([occurrences(e) for e in events], "sum" if cond.agg != "rate" else "rate",
                                 self.seconds)
            carrying = [e for e in events if isinstance(v := e.fields.get(cond.field), int | float)
                        and not isinstance(v, bool)]
            if cond.agg in ("count", "rate"):  # occurrences that carried the field
                return aggregate([occurrences(e) for e in carrying], "sum" if cond.agg == "count" else "rate",
                                 self.seconds)
            values = [float(e.fields[cond.field]) for e in carrying]  # type: ignore[arg-type]
            return aggregate(values, cond.agg, self.seconds)
        if cond.signal in HISTOGRAM_SIGNALS:
            return histogram_aggregate(self.histograms(cond.signal), cond.agg, self.seconds, min_samples)
        values = self.series(cond.signal)
        if cond.agg in ("sum", "rate") and not values:
            return None  # no sample carries it: unknown, not 0 (V0 and SGLang stats have no preemption count)
        if cond.agg not in ("count", "sum", "rate") and len(values) < max(min_samples, 1):
            return None
        return aggregate(values, cond.agg, self.seconds)
