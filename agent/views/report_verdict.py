"""The report's one-line verdict: which kind of incident the window holds, when it began, and the numbers.

The order follows DESIGN.md §1: KV exhaustion (OOM, preemption) first — it is the one the knobs fix and
the others often follow from it; then GPU faults and engine deaths (no knob helps, look at the card or
the process); then queueing and refusals (memory not full: lowering concurrency does not help); then
timeouts. The incident's first event is "the event that broke the pattern", with its id for `--around`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.views.report_data import CapacityLine, EngineLoad, KindLine, Window

CATEGORIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("kv_exhausted", "KV cache exhausted", ("oom", "preemption")),
    ("gpu_fault", "GPU fault", ("xid", "gpu_lost", "cuda_error", "nccl_timeout")),
    ("engine_died", "Engine died", ("engine_dead",)),
    ("rejections", "Requests refused at admission", ("queue_full", "http_429", "http_503")),
    ("timeouts", "Requests timed out", ("deadline_exceeded",)),
    ("queueing", "Requests queued for a slot", ("pending",)),
)
NAMES = {"oom": "OOM events", "preemption": "preemptions", "xid": "Xid errors", "gpu_lost": "GPUs lost",
         "cuda_error": "CUDA errors", "nccl_timeout": "NCCL timeouts", "engine_dead": "engine deaths",
         "queue_full": "queue-full rejections", "http_429": "HTTP 429", "http_503": "HTTP 503",
         "deadline_exceeded": "deadlines exceeded", "pending": "pending/waiting lines"}

ONE = {"oom": "OOM event", "preemption": "preemption", "xid": "Xid error", "gpu_lost": "GPU lost",
       "cuda_error": "CUDA error", "nccl_timeout": "NCCL timeout", "engine_dead": "engine death",
       "queue_full": "queue-full rejection", "deadline_exceeded": "deadline exceeded",
       "pending": "pending/waiting line"}


@dataclass(frozen=True)
class Verdict:
    """`category` is one of CATEGORIES' keys, `quiet` or `empty`; `also` names the other categories seen."""

    headline: str
    category: str
    severity: str
    break_event: dict[str, Any] | None = None
    also: list[str] = field(default_factory=list)


def clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%H:%M UTC")


def _counted(k: KindLine) -> str:
    n = k.occurrences or k.count
    text = f"{n:,} {ONE.get(k.kind, NAMES[k.kind]) if n == 1 else NAMES[k.kind]}"
    return text + (f" ({k.count:,} log lines)" if n != k.count else "")


def _over(capacity: Sequence[CapacityLine]) -> str:
    for line in capacity:
        seqs = line.configured.get("max_num_seqs")
        if isinstance(seqs, int | float) and line.max_concurrency is not None and seqs > line.max_concurrency:
            return f"; max_num_seqs {seqs:,.0f} exceeds the {line.max_concurrency:,} the capacity allows"
    return ""


def _peak(loads: Sequence[EngineLoad], name: str) -> float | None:
    peaks = [getattr(e, name).peak for e in loads if getattr(e, name).peak is not None]
    return max(peaks) if peaks else None


def verdict(timeline: Sequence[KindLine], loads: Sequence[EngineLoad], capacity: Sequence[CapacityLine],
            window: Window, empty: bool) -> Verdict:
    """The headline for the window (see the module doc for the order)."""
    if empty:
        return Verdict(f"Nothing recorded between {clock(window.since)} and {clock(window.until)}: no events, "
                       "load samples, GPU samples, findings or load tests in this range.", "empty", "none")
    by_kind = {k.kind: k for k in timeline}
    present = [(key, title, kinds) for key, title, kinds in CATEGORIES if any(k in by_kind for k in kinds)]
    kv_peak, waiting_peak = _peak(loads, "kv_usage_ratio"), _peak(loads, "waiting")
    if not present:
        running = _peak(loads, "running")
        limit = next((c.max_concurrency for c in capacity if c.max_concurrency is not None), None)
        parts = [f"KV usage peaked at {kv_peak:.0%}" if kv_peak is not None else "",
                 f"running at {running:,.0f}" + (f" (capacity {limit:,})" if limit is not None else "")
                 if running is not None else ""]
        numbers = ", ".join(p for p in parts if p)
        return Verdict(f"Quiet: no incidents between {clock(window.since)} and {clock(window.until)}"
                       + (f"; {numbers}" if numbers else "") + ".", "quiet", "ok")
    key, title, kinds = present[0]
    lines = [by_kind[k] for k in kinds if k in by_kind]
    first = min(lines, key=lambda k: k.first)
    counts = ", ".join(_counted(k) for k in lines)
    tail = ""
    if key == "kv_exhausted":
        tail = _over(capacity)
    elif key in ("rejections", "queueing"):
        if waiting_peak is not None:
            tail = f"; waiting peaked at {waiting_peak:,.0f}"
        if kv_peak is not None and kv_peak < 0.9:
            tail += f"; KV usage peaked at only {kv_peak:.0%}: lowering concurrency will not help"
    severity = "critical" if key in ("kv_exhausted", "gpu_fault", "engine_died") else "warning"
    also = [t for _, t, _ in present[1:]]
    brk = {"id": first.first_id, "kind": first.kind, "ts": first.first, "message": first.first_message}
    return Verdict(f"{title} at {clock(first.first)}: {counts}{tail}", key, severity, brk, also)
