"""The numbers a saved-log summary shows, computed once from all inputs' records (no printing here)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from agent.records import Event, Record, ServerStats, Severity

NOTABLE_LIMIT = 20
_SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.ERROR: 1, Severity.WARNING: 2, Severity.INFO: 3}


@dataclass(frozen=True)
class Summary:
    """The text report's numbers, computed once from all inputs' records."""

    counts: dict[str, int]
    phases: dict[str, Counter[str]]
    first_ts: float | None
    last_ts: float | None
    facts: dict[str, float | str]
    peak_kv: ServerStats | None
    peak_waiting: ServerStats | None
    samples: int
    notable: list[Event]


def summarize(records: Iterable[Record]) -> Summary:
    """Counts by kind (and phase), time span, last value of each capacity fact, peaks, notable events."""
    counts: Counter[str] = Counter()
    phases: dict[str, Counter[str]] = {}
    facts: dict[str, float | str] = {}
    events: list[Event] = []
    peak_kv: ServerStats | None = None
    peak_waiting: ServerStats | None = None
    samples = 0
    times: list[float] = []
    for r in records:
        if r.ts is not None:
            times.append(r.ts)
        if isinstance(r, Event):
            counts[r.kind.value] += 1
            phases.setdefault(r.kind.value, Counter())[r.phase.value] += 1
            events.append(r)
        elif isinstance(r, ServerStats):
            samples += 1
            if r.kv_usage_ratio is not None and (peak_kv is None or r.kv_usage_ratio > (peak_kv.kv_usage_ratio or 0)):
                peak_kv = r
            if r.waiting is not None and (peak_waiting is None or r.waiting > (peak_waiting.waiting or 0)):
                peak_waiting = r
        else:
            facts[r.name] = r.value
    notable = sorted(events, key=lambda e: (_SEVERITY_ORDER[e.severity], e.ts or 0.0))[:NOTABLE_LIMIT]
    notable.sort(key=lambda e: e.ts or 0.0)
    return Summary(dict(counts), phases, min(times, default=None), max(times, default=None), facts, peak_kv,
                   peak_waiting, samples, notable)
