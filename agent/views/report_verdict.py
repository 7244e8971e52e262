"""The report's one-line verdict: which kind of incident the window holds, when it began, and the numbers.

**The judge's findings decide** (agent/judge/precedence.py `headline`): the category of the most urgent
finding, with its knob and numbers, so the headline cannot contradict the findings printed under it —
an OOM at 61 % KV is "Out of memory at the activation peak" because the advisor says so. Only GPU faults
and engine deaths, which no rule judges, come from the events alone (after start-up failures, KV
exhaustion and the activation peak). Without any finding the events still give a headline, in the
order start-up/KV exhaustion (an OOM with KV under 90 % is the activation peak), GPU faults, engine
deaths, refusals, timeouts, queueing. The incident's first event is "the event that broke the pattern",
with its id for `--around`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from agent.judge.precedence import CATEGORY_ORDER, TITLES, headline

if TYPE_CHECKING:
    from agent.offline.report import CapacityLine, EngineLoad, KindLine, Window
    from agent.verdicts import Finding

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
    n = k.occurrences if k.occurrences is not None else k.count  # 0: status lines counted as their refusal's
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


# The events each finding category counts in the headline.
CATEGORY_KINDS: dict[str, tuple[str, ...]] = {
    "startup": ("oom", "engine_dead"), "kv_exhausted": ("oom", "preemption"), "activation_peak": ("oom",),
    "engine": ("deadline_exceeded",), "node_full": ("queue_full", "http_429", "http_503", "pending"),
    "rejections": ("queue_full", "http_429", "http_503"), "queueing": ("pending", "deadline_exceeded"),
    "timeouts": ("deadline_exceeded",)}
# Where the event-only categories (no rule judges them) rank among the findings' categories.
_EVENT_ONLY_AFTER = "activation_peak"
CRITICAL = ("startup", "kv_exhausted", "activation_peak", "gpu_fault", "engine_died")


def _change(f: Finding) -> str:
    if f.knob is None or f.direction is None:
        return f.rule
    text = f"{f.rule}: {f.direction.value} {f.knob.value}"
    if f.recommended is not None:
        text += f" {_num(f.current)} → {_num(f.recommended)}" if f.current is not None else f" to {_num(f.recommended)}"
    elif f.current is not None:
        text += f" (now {_num(f.current)})"
    return text


def _num(x: float | str | None) -> str:
    return f"{x:,.0f}" if isinstance(x, float) and x.is_integer() else f"{x:g}" if isinstance(x, float) else str(x)


def _judged(timeline: Sequence[KindLine], findings: Sequence[Finding], categories: Mapping[str, str],
            window: Window, per_source: Mapping[tuple[str, str], tuple[int, int]]) -> Verdict | None:
    """The headline the findings give, or None (no finding of a known rule; or a GPU fault or engine death
    outranks them). Its counts are the governing finding's engine's (`per_source`, when given): a proxy's or a
    client's log beside it is another witness of the same requests, not more of them."""
    judged = [f for f in findings if categories.get(f.rule) not in (None, "config")]  # active or cleared in it
    head = headline(judged, categories)
    if head is None or head.finding is None:
        return None
    by_kind = {k.kind: k for k in timeline}
    order = list(CATEGORY_ORDER)
    if order.index(head.category) > order.index(_EVENT_ONLY_AFTER) and any(
            k in by_kind for _, _, kinds in CATEGORIES[1:3] for k in kinds):
        return None  # a GPU fault or an engine death: the events' headline
    engine = head.finding.engine
    lines = [replace(by_kind[k], count=per_source[engine, k][0], occurrences=per_source[engine, k][1])
             if per_source else by_kind[k] for k in CATEGORY_KINDS.get(head.category, ())
             if k in by_kind and (not per_source or per_source.get((engine, k), (0, 0))[1] > 0)]
    counts = ", ".join(_counted(k) for k in lines)
    at = min((k.first for k in lines), default=head.finding.since)
    first = min(lines, key=lambda k: k.first) if lines else None
    brk = {"id": first.first_id, "kind": first.kind, "ts": first.first, "message": first.first_message} \
        if first is not None else None
    others = sorted({TITLES.get(categories.get(f.rule, ""), "") for f in judged} - {head.title, ""})
    text = f"{head.title} at {clock(at)}: " + (f"{counts}; " if counts else "") + _change(head.finding)
    severity = "critical" if head.category in CRITICAL else "warning"
    return Verdict(text, head.category, severity, brk, others)


def verdict(timeline: Sequence[KindLine], loads: Sequence[EngineLoad], capacity: Sequence[CapacityLine],
            window: Window, empty: bool, findings: Sequence[Finding] = (),
            categories: Mapping[str, str] | None = None,
            per_source: Mapping[tuple[str, str], tuple[int, int]] | None = None) -> Verdict:
    """The headline for the window (see the module doc for the order)."""
    if empty:
        return Verdict(f"Nothing recorded between {clock(window.since)} and {clock(window.until)}: no events, "
                       "load samples, GPU samples, findings or load tests in this range.", "empty", "none")
    judged = _judged(timeline, findings, categories or {}, window, per_source or {})
    if judged is not None:
        return judged
    by_kind = {k.kind: k for k in timeline}
    present = [(key, title, kinds) for key, title, kinds in CATEGORIES if any(k in by_kind for k in kinds)]
    kv_peak, waiting_peak = _peak(loads, "kv_usage_ratio"), _peak(loads, "waiting")
    if present and present[0][0] == "kv_exhausted" and "preemption" not in by_kind and kv_peak is not None \
            and kv_peak < 0.9:
        # vLLM pre-allocates its KV pool: an OOM while it was not full is the activation peak
        present[0] = ("activation_peak", TITLES["activation_peak"], ("oom",))
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
    elif key == "activation_peak" and kv_peak is not None:
        tail = f"; KV usage peaked at only {kv_peak:.0%}: fewer sequences will not help"
    elif key in ("rejections", "queueing"):
        if waiting_peak is not None:
            tail = f"; waiting peaked at {waiting_peak:,.0f}"
        if kv_peak is not None and kv_peak < 0.9:
            tail += f"; KV usage peaked at only {kv_peak:.0%}: lowering concurrency will not help"
    severity = "critical" if key in CRITICAL else "warning"
    also = [t for _, t, _ in present[1:]]
    brk = {"id": first.first_id, "kind": first.kind, "ts": first.first, "message": first.first_message}
    return Verdict(f"{title} at {clock(first.first)}: {counts}{tail}", key, severity, brk, also)
