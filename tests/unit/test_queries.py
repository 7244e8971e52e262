"""The read side: findings and load steps round-trip, timelines and percentiles over windows."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.records import Event, EventKind, Knob, Phase, Server, Severity
from agent.sinks.queries import Queries, percentile
from agent.sinks.store import Store
from agent.verdicts import Direction, Finding, LoadStep


def _event(offset: int, ts: float, kind: EventKind = EventKind.OOM, message: str = "CUDA out of memory") -> Event:
    return Event(ts, "vllm", Server.VLLM, kind, Severity.ERROR, Phase.RUNTIME, message, {}, "/l", offset)


def _finding(ts: float, active: bool = True, to: float = 41.0) -> Finding:
    return Finding(ts=ts, since=100.0, rule="kv_exhausted", engine="vllm", severity=Severity.ERROR,
                   message="lower max_num_seqs", knob=Knob.MAX_NUM_SEQS, direction=Direction.LOWER, current=64,
                   recommended=to, evidence={"kv_usage_ratio_p95": 0.99, "oom_count": 3},
                   arithmetic="floor(41.7) = 41", window_seconds=300.0, active=active)


def test_findings_round_trip_and_the_latest_state_of_each_decides_active(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a.db") as store:
        store.commit([_finding(100.0), _finding(160.0, to=40.0)])
        q = Queries(store)
        assert [f.recommended for f in q.findings()] == [41.0, 40.0]
        assert q.findings()[0] == _finding(100.0)
        assert [f.recommended for f in q.findings(active_only=True)] == [40.0]
        store.commit([_finding(220.0, active=False)])
        assert q.findings(active_only=True) == []
        assert store.commit([_finding(220.0, active=False)]).inserted == 0  # a replay stores nothing twice


def test_load_steps_round_trip_and_a_rerun_level_replaces_the_old(tmp_path: Path) -> None:
    step = LoadStep(run_id="r1", target="http://127.0.0.1:8000", level=8, started=10.0, ended=20.0, requests=160,
                    ok=150, errors={"http_503": 10}, latency_p95_seconds=1.5, broke=True, reason="503s")
    with Store.open(tmp_path / "a.db") as store:
        store.commit([step])
        store.commit([step])
        assert Queries(store).load_steps() == [step]


def test_event_timeline_counts_first_and_last_per_kind_in_the_window(store: Store) -> None:
    store.commit([_event(i, 100.0 + i, message=f"m{i}") for i in range(5)]
                 + [_event(100 + i, 103.5 + i, EventKind.PREEMPTION, "preempted") for i in range(3)])
    timeline = Queries(store).event_timeline(101.0, 105.0)
    assert [(t.kind, t.count, t.first_ts, t.last_ts, t.first_message) for t in timeline] == [
        ("oom", 4, 101.0, 104.0, "m1"), ("preemption", 2, 103.5, 104.5, "preempted")]
    assert Queries(store).event_timeline(0.0, source="other") == []


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([], 0.5, None), ([3.0], 0.99, 3.0), ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5), ([4.0, 1.0, 3.0, 2.0], 1.0, 4.0),
    ([10.0, 20.0], 0.95, 19.5),
])
def test_percentile_interpolates_between_ranks(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected
