"""Scraped latency and length histograms: each scrape keeps the window of requests that finished since the
previous one (data-parallel engines added, SGLang's other TP ranks ignored, restarts and resets handled),
and the windows survive the store."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from agent.records import HistogramWindow, Server
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.sources.scrape import Scraper
from tests.unit.test_scrape import Engine

T0 = 1_764_412_800.0


@pytest.fixture
def engine() -> Iterator[Engine]:
    e = Engine()
    yield e
    e.stop()


def histogram(name: str, bounds: list[str], per_series: dict[str, list[float]], sums: dict[str, float]) -> str:
    lines = [f"# TYPE {name} histogram"]
    for labels, counts in per_series.items():
        for le, count in zip(bounds, counts, strict=True):
            lines.append(f'{name}_bucket{{{labels},le="{le}"}} {count}')
        lines.append(f"{name}_count{{{labels}}} {counts[-1]}")
        lines.append(f"{name}_sum{{{labels}}} {sums[labels]}")
    return "\n".join(lines)


def vllm(e2e: dict[str, list[float]], sums: dict[str, float], start: float = 1.0, gen: list[float] | None = None
         ) -> str:
    parts = [f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {start}",
             "# TYPE vllm:num_requests_running gauge",
             *(f'vllm:num_requests_running{{{labels}}} 1' for labels in e2e),
             histogram("vllm:e2e_request_latency_seconds", ["1.0", "5.0", "20.0", "+Inf"], e2e, sums)]
    if gen is not None:
        parts.append(histogram("vllm:request_generation_tokens", ["100", "500", "1000", "+Inf"],
                               {'engine="0"': gen}, {'engine="0"': 700.0 * gen[-1]}))
    return "\n".join(parts) + "\n"


def windows(records: list[object], signal: str = "e2e_latency_seconds") -> list[HistogramWindow]:
    return [r for r in records if isinstance(r, HistogramWindow) and r.signal == signal]


DP = ('engine="0"', 'engine="1"')


def test_the_first_scrape_is_a_baseline_and_later_ones_keep_the_window_with_dp_engines_added(engine: Engine) -> None:
    s = Scraper(engine.url, server=Server.VLLM, source="e", interval_seconds=10.0, timeout_seconds=0.5,
                histogram_seconds=0.0)
    engine.serve(vllm({DP[0]: [1, 4, 6, 6], DP[1]: [0, 2, 2, 2]}, {DP[0]: 30.0, DP[1]: 5.0}))
    assert windows(s.poll(T0)) == []  # history from before the agent is not replayed
    engine.serve(vllm({DP[0]: [2, 7, 10, 11], DP[1]: [0, 3, 4, 4]}, {DP[0]: 80.0, DP[1]: 20.0},
                      gen=[0, 1, 3, 3]))
    (w,) = windows(s.poll(T0 + 10))
    assert (w.ts, w.source, w.server) == (T0 + 10, "e", Server.VLLM)
    assert w.bounds == (1.0, 5.0, 20.0, math.inf)
    assert w.counts == (1.0, 4.0, 6.0, 7.0) and w.sum == 65.0  # (1,3,4,5) + (0,1,2,2)
    assert windows(s.poll(T0 + 15), "output_tokens") == [], "not due yet"
    # the generation-token histogram appeared after the baseline: all of it is this window
    engine.serve(vllm({DP[0]: [2, 7, 10, 11], DP[1]: [0, 3, 4, 4]}, {DP[0]: 80.0, DP[1]: 20.0}, gen=[0, 1, 5, 6]))
    records = s.poll(T0 + 20)
    assert windows(records) == [], "no request finished: no window"
    (g,) = windows(records, "output_tokens")  # trimmed: below its first requests only the lower bound stays
    assert (g.bounds, g.counts) == ((500.0, 1000.0, math.inf), (0.0, 2.0, 3.0))


def test_a_restart_makes_the_new_counts_the_window(engine: Engine) -> None:
    s = Scraper(engine.url, server=Server.VLLM, source="e", interval_seconds=1.0, timeout_seconds=0.5,
                histogram_seconds=0.0)
    engine.serve(vllm({DP[0]: [10, 40, 60, 60]}, {DP[0]: 300.0}))
    s.poll(T0)
    engine.serve(vllm({DP[0]: [1, 2, 3, 3]}, {DP[0]: 12.0}))  # counts went down: a reset
    assert windows(s.poll(T0 + 1))[0].counts == (1.0, 2.0, 3.0, 3.0)
    engine.serve(vllm({DP[0]: [5, 20, 30, 31]}, {DP[0]: 200.0}, start=2.0))  # a new process start time
    assert windows(s.poll(T0 + 2))[0].counts == (5.0, 20.0, 30.0, 31.0)


def test_sglang_other_tp_ranks_are_ignored_and_tgi_durations_are_read(engine: Engine) -> None:
    tp = ('tp_rank="0"', 'tp_rank="1"')
    text = ("# TYPE sglang:num_running_reqs gauge\n" + "".join(f"sglang:num_running_reqs{{{t}}} 2\n" for t in tp)
            + histogram("sglang:queue_time_seconds", ["0.1", "1", "+Inf"], {tp[0]: [0, 0, 0], tp[1]: [0, 0, 0]},
                        {tp[0]: 0.0, tp[1]: 0.0}) + "\n")
    s = Scraper(engine.url, server=Server.SGLANG, source="s", interval_seconds=1.0, timeout_seconds=0.5,
                histogram_seconds=0.0)
    engine.serve(text)
    s.poll(T0)
    engine.serve(text.replace('{tp_rank="0",le="+Inf"} 0', '{tp_rank="0",le="+Inf"} 4')
                 .replace('{tp_rank="0",le="1"} 0', '{tp_rank="0",le="1"} 3')
                 .replace('{tp_rank="1",le="+Inf"} 0', '{tp_rank="1",le="+Inf"} 9'))
    (w,) = windows(s.poll(T0 + 1), "queue_time_seconds")
    assert w.counts == (0.0, 3.0, 4.0)
    tgi = ("tgi_queue_size 0\n" + histogram("tgi_request_duration", ["0.5", "2", "+Inf"], {'method="x"': [1, 1, 1]},
                                             {'method="x"': 0.2}) + "\n")
    t = Scraper(engine.url, server=Server.TGI, source="t", interval_seconds=1.0, timeout_seconds=0.5,
                histogram_seconds=0.0)
    engine.serve(tgi)
    t.poll(T0)
    engine.serve(tgi.replace('le="2"} 1', 'le="2"} 3').replace('le="+Inf"} 1', 'le="+Inf"} 3'))
    assert windows(t.poll(T0 + 1))[0].counts == (0.0, 2.0, 2.0)


def test_the_scrapes_of_a_minute_are_stored_as_one_window(engine: Engine) -> None:
    s = Scraper(engine.url, server=Server.VLLM, source="e", interval_seconds=10.0, timeout_seconds=0.5)
    engine.serve(vllm({DP[0]: [0, 0, 0, 0]}, {DP[0]: 0.0}))
    s.poll(T0)  # the baseline starts the minute
    stored: list[HistogramWindow] = []
    for i in range(1, 7):
        engine.serve(vllm({DP[0]: [i, 2 * i, 2 * i, 2 * i]}, {DP[0]: 3.0 * i}))  # 2 requests per scrape
        stored += windows(s.poll(T0 + 10 * i))
    (w,) = stored
    assert (w.ts, w.bounds, w.counts, w.sum) == (T0 + 60, (1.0, 5.0, math.inf), (6.0, 12.0, 12.0), 18.0)


def test_histogram_windows_round_trip_through_the_store() -> None:
    w = HistogramWindow(T0, "e", Server.VLLM, "ttft_seconds", (0.1, 1.0, math.inf), (2.0, 5.0, 6.0), 3.5)
    with Store.open(":memory:") as store:
        assert store.commit([w, w]).inserted == 1  # a replay stores nothing twice
        assert Queries(store).window_histograms(T0, T0 + 1, "e", "ttft_seconds") == [w]
        assert Queries(store).window_histograms(T0, T0 + 1, "e", "e2e_latency_seconds") == []
        assert store.prune(T0 + 10**9) == 0  # no retention set: nothing goes


def test_unknown_histogram_signals_and_ragged_buckets_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown histogram signal"):
        HistogramWindow(T0, "e", Server.VLLM, "ttft", (math.inf,), (1.0,), 0.0)
    with pytest.raises(ValueError, match="one count per bound"):
        HistogramWindow(T0, "e", Server.VLLM, "ttft_seconds", (1.0, math.inf), (1.0,), 0.0)
