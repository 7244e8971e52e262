"""The rules that read scraped latency and length histograms, on timelines committed to a real store: each
fires exactly when it should, with the right value, and its negative twin does not. Plus the histogram
signals' aggregates themselves (bucket quantiles, requests as samples)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from agent.judge.advisor import Advisor
from agent.judge.rules import Aggregate
from agent.judge.signals import Window, histogram_aggregate
from agent.records import EventKind, HistogramWindow, Knob, Phase, Server, ServerStats
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.verdicts import Direction, Finding
from tests.unit.test_advisor import CAP, NOW, E, events, rules, stats

E2E_BOUNDS = (10.0, 20.0, 50.0, 60.0, math.inf)
TOKEN_BOUNDS = (100.0, 500.0, 1000.0, 2000.0, math.inf)


def window(signal: str, ts: float, bounds: Sequence[float], per_bucket: Sequence[int],
           mean: float | None = None) -> HistogramWindow:
    """One scrape's window: `per_bucket` requests in each bucket (not cumulative); `sum` = requests × mean
    (default: each request at its bucket's upper bound, the +Inf bucket at the last finite one)."""
    cumulative = tuple(float(sum(per_bucket[: i + 1])) for i in range(len(per_bucket)))
    finite = [b if math.isfinite(b) else bounds[-2] for b in bounds]
    total = cumulative[-1] * mean if mean is not None else sum(n * b for n, b in zip(per_bucket, finite, strict=True))
    return HistogramWindow(ts, E, Server.VLLM, signal, tuple(bounds), cumulative, float(total))


def spread(signal: str, bounds: Sequence[float], per_bucket: Sequence[int], scrapes: int = 5,
           step: float = 60.0) -> list[HistogramWindow]:
    """`per_bucket` requests spread evenly over `scrapes` windows (each count must divide by it)."""
    return [window(signal, NOW - (scrapes - i) * step, bounds, [n // scrapes for n in per_bucket])
            for i in range(scrapes)]


def judge(records: Sequence[object], config: dict[str, float | None]) -> dict[str, Finding]:
    store = Store.open(":memory:")
    store.commit(records, now=NOW)  # type: ignore[arg-type]
    found = Advisor(rules(), 15.0, config).step(NOW, Queries(store), {E: CAP}, [E])
    return {f.rule: f for f in found if f.active}


# 100 requests: 50 ≤ 10 s, 45 in (10, 20], 5 in (20, 50] → p99 = 20 + 30 × (99 − 95) / 5 = 44 s
SLOW = spread("e2e_latency_seconds", E2E_BOUNDS, [50, 45, 5, 0, 0])
DEADLINES = events(EventKind.DEADLINE_EXCEEDED, 4, phase=Phase.GENERATION, scope="request", tokens=300)


def test_deadlines_raise_the_timeout_to_the_scraped_e2e_p99_plus_20_percent() -> None:
    f = judge([*DEADLINES, *SLOW], {"request_timeout_ms": 30000})["deadline_during_generation"]
    assert (f.knob, f.direction, f.current) == (Knob.REQUEST_TIMEOUT_MS, Direction.RAISE, 30000)
    assert f.evidence["e2e_latency_seconds_p99"] == pytest.approx(44.0)
    assert f.recommended == 52800  # ceil(44 s × 1000 × 1.2)
    assert f.arithmetic == "e2e_latency_seconds_p99 44 s × 1.2 = 52,800 ms"
    assert "scraped e2e p50/p95/p99 10/20/44 s" in f.message


def test_without_deadlines_slow_requests_alone_raise_nothing() -> None:
    assert "deadline_during_generation" not in judge(SLOW, {"request_timeout_ms": 30000})


def test_a_p99_below_the_current_timeout_or_too_few_requests_fall_back_to_half_again() -> None:
    above = judge([*DEADLINES, *SLOW], {"request_timeout_ms": 60000})["deadline_during_generation"]
    assert above.recommended == 90000 and "is not above the current 60,000 ms" in above.arithmetic
    few = spread("e2e_latency_seconds", E2E_BOUNDS, [5, 5, 5, 0, 0])  # 15 requests < min_samples 20
    f = judge([*DEADLINES, *few], {"request_timeout_ms": 30000})["deadline_during_generation"]
    assert f.recommended == 45000 and f.evidence["e2e_latency_seconds_p99"] is None


# 100 requests: 90 ≤ 10 s, 5 in (10, 20], 5 in (50, 60] → p95 = 20 s, p99 = 50 + 10 × 4 / 5 = 58 s;
# outputs: 90 ≤ 500 tokens, 5 in (500, 1000], 5 at the 1024 cap in (1000, 2000] → p99 = 1800
LOOSE = [*spread("e2e_latency_seconds", E2E_BOUNDS, [90, 5, 0, 5, 0]),
         *spread("output_tokens", TOKEN_BOUNDS, [0, 90, 5, 5, 0])]
LIMITS: dict[str, float | None] = {"request_timeout_ms": 60000, "max_output_tokens": 1024}


def test_long_generations_riding_the_deadline_while_others_wait_lower_timeout_and_cap() -> None:
    got = judge([*LOOSE, *stats(24, running=13, waiting=3, kv=0.7, step=30.0)], LIMITS)
    f = got["request_timeout_too_loose"]
    assert (f.knob, f.direction, f.current) == (Knob.REQUEST_TIMEOUT_MS, Direction.LOWER, 60000)
    assert f.evidence["e2e_latency_seconds_p99"] == pytest.approx(58.0)
    assert f.evidence["e2e_latency_seconds_p95"] == pytest.approx(20.0)
    assert f.evidence["output_tokens_p99"] == pytest.approx(1800.0)
    assert f.recommended == 30000 and f.arithmetic == "e2e_latency_seconds_p95 20 s × 1.5 = 30,000 ms"
    cap = got["long_outputs_hold_slots"]  # the scraped branch: no timed-out request needed
    assert (cap.knob, cap.direction, cap.recommended) == (Knob.MAX_OUTPUT_TOKENS, Direction.LOWER, 512)
    assert cap.evidence["timeout_tokens_p50"] is None
    assert "deadline_during_generation" not in got


def test_nobody_waiting_or_a_p99_well_inside_the_deadline_is_not_too_loose() -> None:
    idle = judge([*LOOSE, *stats(24, running=5, waiting=0, kv=0.4, step=30.0)], LIMITS)
    assert "request_timeout_too_loose" not in idle and "long_outputs_hold_slots" not in idle
    inside = [*spread("e2e_latency_seconds", E2E_BOUNDS, [90, 5, 5, 0, 0]),  # slowest in (20, 50]: p99 44 s
              *spread("output_tokens", TOKEN_BOUNDS, [0, 90, 5, 5, 0])]
    got = judge([*inside, *stats(24, running=13, waiting=3, kv=0.7, step=30.0)], LIMITS)
    assert "request_timeout_too_loose" not in got and "long_outputs_hold_slots" not in got


def test_a_handful_of_long_requests_is_not_enough_to_lower_the_cap() -> None:
    few = [*spread("e2e_latency_seconds", E2E_BOUNDS, [5, 5, 0, 5, 0]),  # 15 finished requests
           *spread("output_tokens", TOKEN_BOUNDS, [0, 5, 5, 5, 0])]
    got = judge([*few, *stats(24, running=13, waiting=3, kv=0.7, step=30.0)], LIMITS)
    assert "long_outputs_hold_slots" not in got and "request_timeout_too_loose" not in got


def test_every_request_slow_is_not_a_few_long_ones() -> None:
    slow = [*spread("e2e_latency_seconds", E2E_BOUNDS, [0, 0, 50, 50, 0]),  # p95 ≥ two thirds of 60 s
            *spread("output_tokens", TOKEN_BOUNDS, [0, 0, 0, 100, 0])]
    got = judge([*slow, *stats(24, running=13, waiting=3, kv=0.7, step=30.0)], LIMITS)
    assert "request_timeout_too_loose" not in got


def growing(signal: str, means: Sequence[float], bounds: Sequence[float], step: float = 60.0) -> list[HistogramWindow]:
    """One window per scrape, 4 requests each in the bucket holding its mean."""
    out = []
    for i, mean in enumerate(means):
        per = [4 if (i == 0 or bounds[i - 1] < mean) and mean <= b else 0 for i, b in enumerate(bounds)]
        out.append(window(signal, NOW - (len(means) - i) * step, bounds, per, mean))
    return out


QUEUE_BOUNDS = (0.5, 1.0, 2.0, 4.0, 8.0, math.inf)
QUEUE_GROWING = growing("queue_time_seconds", [0.4, 0.45, 0.9, 1.5, 3.0, 3.5], QUEUE_BOUNDS)


def test_queue_time_growing_with_kv_room_and_free_slots_is_compute_bound_not_concurrency() -> None:
    # the waiting count stays flat (2): only the scraped queue time says the queue got slower
    got = judge([*QUEUE_GROWING, *stats(9, running=6, waiting=2, kv=0.45, step=60.0)], {"max_num_seqs": 13})
    f = got["compute_bound_queue"]
    assert (f.knob, f.direction) == (Knob.REPLICAS, Direction.RAISE)
    assert f.evidence["queue_time_seconds_growth"] == pytest.approx((3.25 / 0.425) - 1, rel=1e-3)
    assert f.evidence["waiting_growth"] == 0.0
    assert not any(g.knob is Knob.MAX_NUM_SEQS for g in got.values() if g.rule != "max_num_seqs_above_bound")
    assert "do not raise max_num_seqs" in f.message


@pytest.mark.parametrize("twin", ["kv full", "every slot runs", "queue time flat"])
def test_queue_time_growing_negative_twins(twin: str) -> None:
    kv, running, recs = 0.45, 6, QUEUE_GROWING
    if twin == "kv full":
        kv = 0.93
    elif twin == "every slot runs":
        running = 13
    else:
        recs = growing("queue_time_seconds", [0.4] * 6, QUEUE_BOUNDS)
    got = judge([*recs, *stats(9, running=running, waiting=2, kv=kv, step=60.0)], {"max_num_seqs": 13})
    assert "compute_bound_queue" not in got


def test_ttft_growing_alone_is_compute_bound_too() -> None:
    ttft = growing("ttft_seconds", [0.2, 0.2, 0.7, 0.9, 1.8, 1.9], QUEUE_BOUNDS)
    got = judge([*ttft, *stats(9, running=6, waiting=2, kv=0.45, step=60.0)], {"max_num_seqs": 13})
    assert got["compute_bound_queue"].evidence["ttft_seconds_growth"] == pytest.approx(1.85 / 0.2 - 1, rel=1e-3)


PROMPT_BOUNDS = (1000.0, 2000.0, 5000.0, 10000.0, math.inf)


def test_scraped_prompt_length_climbing_caps_the_session() -> None:
    prompts = growing("prompt_tokens", [1500, 1800, 2500, 3500, 4500, 6000, 7000, 8000], PROMPT_BOUNDS, step=200.0)
    f = judge(prompts, {"max_session_tokens": 32768})["session_length_climbing"]
    assert (f.knob, f.direction, f.recommended) == (Knob.MAX_SESSION_TOKENS, Direction.LOWER, 8192)
    assert f.evidence["prompt_tokens_p95"] is not None and f.evidence["prompt_tokens_p95"] >= 4096
    flat = growing("prompt_tokens", [1500] * 8, PROMPT_BOUNDS, step=200.0)
    assert "session_length_climbing" not in judge(flat, {"max_session_tokens": 32768})


def test_histogram_aggregates_count_requests_and_read_buckets() -> None:
    ws = [window("ttft_seconds", NOW - 20, (1.0, 2.0, math.inf), [3, 1, 0], mean=0.8),
          window("ttft_seconds", NOW - 10, (1.0, 2.0, math.inf), [0, 2, 2], mean=2.5)]
    assert histogram_aggregate(ws, "count", 600.0, 1) == 8
    assert histogram_aggregate(ws, "rate", 600.0, 1) == pytest.approx(0.8)  # per minute
    assert histogram_aggregate(ws, "sum", 600.0, 1) == pytest.approx(4 * 0.8 + 4 * 2.5)
    assert histogram_aggregate(ws, "mean", 600.0, 1) == pytest.approx((4 * 0.8 + 4 * 2.5) / 8)
    assert histogram_aggregate(ws, "p50", 600.0, 1) == pytest.approx(1.0 + 1.0 * (4 - 3) / 3)
    assert histogram_aggregate(ws, "max", 600.0, 1) == 2.0  # a rank in +Inf: the highest finite bound
    assert histogram_aggregate(ws, "min", 600.0, 1) == 0.0
    assert histogram_aggregate(ws, "last", 600.0, 1) == pytest.approx(2.5)
    assert histogram_aggregate(ws, "p95", 600.0, 9) is None, "min_samples counts requests"
    assert histogram_aggregate([], "count", 600.0, 1) == 0 and histogram_aggregate([], "p50", 600.0, 0) is None


def test_a_window_reads_only_its_engines_windows_of_the_signal_and_the_timeout_in_seconds() -> None:
    store = Store.open(":memory:")
    other = HistogramWindow(NOW - 5, "other", Server.VLLM, "ttft_seconds", (1.0, math.inf), (9.0, 9.0), 1.0)
    store.commit([*spread("ttft_seconds", (1.0, math.inf), [10, 0], scrapes=2), other], now=NOW)
    w = Window(Queries(store), E, NOW - 600, NOW, CAP, {"config.request_timeout_seconds": 30.0})
    assert w.value(Aggregate(signal="ttft_seconds", agg="count"), 1) == 10
    assert w.value(Aggregate(signal="e2e_latency_seconds", agg="p99"), 1) is None
    assert w.value(Aggregate(signal="config.request_timeout_seconds", agg="last"), 1) == 30.0
    from agent.judge.signals import references

    refs = references(None, {"request_timeout_ms": 45000.0, "queue_timeout_ms": None})
    assert (refs["config.request_timeout_seconds"], refs["config.queue_timeout_seconds"]) == (45.0, None)


def test_scraped_stats_stay_series() -> None:
    """ServerStats still aggregate per sample next to histograms (a regression guard for the dispatch)."""
    store = Store.open(":memory:")
    store.commit([ServerStats(NOW - 1, E, Server.VLLM, running=3, waiting=1, kv_usage_ratio=0.5)], now=NOW)
    assert Window(Queries(store), E, NOW - 60, NOW).value(Aggregate(signal="running", agg="max"), 1) == 3
