"""What the agent concludes and what it measures on purpose: the advisor's `Finding` (which knob to turn,
which way, to what number, with the evidence) and the load test's `LoadStep`. Apart from `records.py`, the
vocabulary of what was observed, because the parsers never produce these; `StoredRecord` names everything
the store keeps, both kinds together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from agent.records import (
    CapacityFact,
    Event,
    FieldValue,
    GpuProcessSample,
    GpuSample,
    HistogramWindow,
    Knob,
    RequestSample,
    ServerStats,
    Severity,
)


class Direction(str, Enum):
    """Which way a finding says to turn its knob; `review` when the numbers disagree and a person must look."""

    RAISE = "raise"
    LOWER = "lower"
    KEEP = "keep"
    REVIEW = "review"


@dataclass(frozen=True)
class Finding:
    """One judgement of the advisor: which knob to turn, to what, and the numbers that say so.

    `engine` is the engine instance judged (a source, container or unit name), `rule` the rule that
    fired. `current` is the knob's configured value where known ("from"), `recommended` the value the
    rule's built-in computed ("to"). `evidence` holds the window aggregates the rule compared (already
    numbers, never log text); `arithmetic` spells out how `recommended` was computed. `ts` is when it
    was judged, `since` when it first became active (a finding that stays active keeps its `since`).
    """

    ts: float
    since: float
    rule: str
    engine: str
    severity: Severity
    message: str
    knob: Knob | None = None
    direction: Direction | None = None
    current: float | str | None = None
    recommended: float | str | None = None
    evidence: Mapping[str, FieldValue] = field(default_factory=dict)
    arithmetic: str = ""
    window_seconds: float | None = None
    active: bool = True


@dataclass(frozen=True)
class LoadStep:
    """One level of a step-up load test: what `level` concurrent clients got, and what the engine did.

    Latencies in seconds (`ttft_*` only with streaming); `errors` counts failed requests by class
    (`http_429`, `http_503`, `http_5xx`, `timeout`, `connection`, `other`); the engine-side peaks come
    from its /metrics, the agent's store or NVML and are None where none was reachable.
    """

    run_id: str
    target: str
    level: int
    started: float
    ended: float
    requests: int
    ok: int
    errors: Mapping[str, int] = field(default_factory=dict)
    throughput_rps: float | None = None
    output_tokens_per_second: float | None = None
    latency_p50_seconds: float | None = None
    latency_p95_seconds: float | None = None
    latency_p99_seconds: float | None = None
    ttft_p50_seconds: float | None = None
    ttft_p95_seconds: float | None = None
    ttft_p99_seconds: float | None = None
    gpu_memory_peak_bytes: int | None = None
    kv_usage_peak_ratio: float | None = None
    running_peak: int | None = None
    waiting_peak: int | None = None
    oom_events: int = 0
    preemption_events: int = 0
    broke: bool = False
    reason: str = ""


# Everything the store keeps: what parsers emit, what NVML samples, what the judge and the load test produce.
StoredRecord = (Event | ServerStats | CapacityFact | RequestSample | HistogramWindow | GpuSample | GpuProcessSample
                | Finding | LoadStep)
