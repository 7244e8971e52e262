"""Stores that tell one incident each (OOM storm, queue pile-up, timeouts, quiet day) for `report` tests.

Built with the real Store from records, as the daemon stores them; times start at T0 (2025-12-01 14:00 UTC).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.records import CapacityFact, Event, EventKind, GpuSample, Knob, Phase, Server, ServerStats, Severity
from agent.sinks.store import Store
from agent.verdicts import Direction, Finding, LoadStep, StoredRecord

T0 = 1_764_597_600.0  # 2025-12-01 14:00:00 UTC: in the past on any day the tests run, for `--since`
ENGINE = "vllm-0"
GIB = 1024**3
PLANTED = "<script>document.title='pwned'</script> CUDA out of memory | tried to allocate"


def _event(i: int, ts: float, kind: EventKind, message: str, severity: Severity = Severity.ERROR,
           phase: Phase = Phase.RUNTIME) -> Event:
    return Event(ts, ENGINE, Server.VLLM, kind, severity, phase, message, {}, "/var/log/vllm.log", i)


def _stats(i: int, ts: float, running: int, waiting: int, kv: float) -> ServerStats:
    return ServerStats(ts, ENGINE, Server.VLLM, running, waiting, 0, kv, 100.0, 900.0, 0.1, path="/var/log/vllm.log",
                       offset=1_000_000 + i)


def _gpu(ts: float, used_gib: float) -> GpuSample:
    return GpuSample(ts, 0, "GPU-0000", "NVIDIA L4", "00000000:01:00.0", 24 * GIB, 0, int((24 - used_gib) * GIB),
                     int(used_gib * GIB), 0.9, 0.5, 60.0, 200.0, 300.0)


def _facts() -> list[StoredRecord]:
    return [CapacityFact(T0 - 600, ENGINE, "kv_cache_tokens", 336_000.0),
            CapacityFact(T0 - 600, ENGINE, "max_model_len", 8192.0),
            CapacityFact(T0 - 600, ENGINE, "max_num_seqs", 64.0)]


def _load(minutes: int, shape: Callable[[int], tuple[int, int, float, float]]) -> list[StoredRecord]:
    out: list[StoredRecord] = []
    for s in range(0, minutes * 60, 5):
        running, waiting, kv, gpu = shape(s)
        out += [_stats(s, T0 + s, running, waiting, kv), _gpu(T0 + s, gpu)]
    return out


def oom_storm() -> list[StoredRecord]:
    """KV fills at 14:02; 37 OOMs and 1,204 preemptions follow; max_num_seqs 64 against a capacity of 41."""
    out = _facts() + _load(10, lambda s: (min(64, 20 + s // 3), max(0, s // 4 - 10), min(1.0, 0.5 + s / 240),
                                          min(23.5, 18 + s / 60)))
    out += [_event(i, T0 + 122 + i * 2, EventKind.OOM, PLANTED if i == 0 else f"CUDA out of memory #{i % 3}")
            for i in range(37)]
    out += [_event(100 + i, T0 + 121 + i * 0.3, EventKind.PREEMPTION, "Sequence group preempted by RECOMPUTE",
                   Severity.WARNING) for i in range(1204)]
    out.append(Finding(ts=T0 + 300, since=T0 + 180, rule="kv_exhausted", engine=ENGINE, severity=Severity.ERROR,
                       message="KV cache exhausted: lower max_num_seqs", knob=Knob.MAX_NUM_SEQS,
                       direction=Direction.LOWER, current=64, recommended=41,
                       evidence={"oom_count": 37, "kv_usage_ratio_p95": 1.0},
                       arithmetic="floor(336000 / 8192) = 41", window_seconds=300.0))
    out.append(LoadStep(run_id="r1", target="http://127.0.0.1:8000", level=48, started=T0 + 30, ended=T0 + 90,
                        requests=480, ok=470, errors={"http_503": 10}, latency_p95_seconds=2.5,
                        kv_usage_peak_ratio=0.97, broke=True, reason="503s"))
    return out


def queue_pileup() -> list[StoredRecord]:
    """Waiting climbs to 180 while KV stays at 60 %; 429s and queue-full rejections follow."""
    out = _facts() + _load(10, lambda s: (32, min(180, s // 2), 0.6, 19.0))
    out += [_event(i, T0 + 240 + i, EventKind.HTTP_429, "POST /v1/completions 429", Severity.WARNING,
                   Phase.ADMISSION) for i in range(50)]
    out += [_event(100 + i, T0 + 200 + i * 3, EventKind.QUEUE_FULL, "queue full: rejecting request",
                   Severity.WARNING, Phase.ADMISSION) for i in range(20)]
    return out


def timeouts() -> list[StoredRecord]:
    """Requests die mid-generation: deadline exceeded, memory flat."""
    out = _facts() + _load(10, lambda s: (30, 0, 0.7, 20.0))
    out += [_event(i, T0 + 300 + i * 4, EventKind.DEADLINE_EXCEEDED, "request timed out after 60 s",
                   Severity.WARNING, Phase.GENERATION) for i in range(12)]
    return out


def quiet_day() -> list[StoredRecord]:
    """Ten calm minutes, with a two-minute hole in the samples (the agent was stopped)."""
    return _facts() + [r for r in _load(10, lambda s: (12, 0, 0.35, 17.0))
                       if not T0 + 240 <= (r.ts or 0) < T0 + 360]


SCENARIOS: dict[str, Callable[[], list[StoredRecord]]] = {
    "oom_storm": oom_storm, "queue_pileup": queue_pileup, "timeouts": timeouts, "quiet_day": quiet_day}


def build(path: Path, scenario: str) -> Path:
    with Store.open(path) as store:
        store.commit(SCENARIOS[scenario](), now=T0 + 900)
    return path
