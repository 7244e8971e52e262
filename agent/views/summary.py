"""The numbers a saved-log summary shows, computed once from all inputs' records (no printing here)."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from agent.records import CapacityFact, Event, EventKind, Phase, Record, ServerStats, Severity, occurrences

NOTABLE_LIMIT = 20
_SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.ERROR: 1, Severity.WARNING: 2, Severity.INFO: 3}


@dataclass(frozen=True)
class Summary:
    """The text report's numbers, computed once from all inputs' records."""

    counts: dict[str, int]  # occurrences by kind (an event's `count`, else 1), not records
    phases: dict[str, Counter[str]]
    first_ts: float | None
    last_ts: float | None
    facts: dict[str, float | str]
    peak_kv: ServerStats | None
    peak_waiting: ServerStats | None
    samples: int
    notable: list[Event]


class SummaryBuilder:
    """The summary built one record at a time, in constant memory: counters, the time span, the last value
    of each fact, the first highest peaks and the `NOTABLE_LIMIT` most severe events (earliest first
    among equals), exactly what sorting every record at the end would give."""

    def __init__(self) -> None:
        self._occurrences: Counter[tuple[EventKind, Phase]] = Counter()  # named by value in `counts`, `phases`
        self.facts: dict[str, float | str] = {}
        self.peak_kv: ServerStats | None = None
        self.peak_waiting: ServerStats | None = None
        self.samples = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self._notable: list[tuple[int, float, int, Event]] = []  # a max-heap by (severity, ts, order), negated
        self._order = 0

    def add(self, records: Iterable[Record]) -> None:
        for r in records:
            ts = r.ts
            if ts is not None:
                if self.first_ts is None or ts < self.first_ts:
                    self.first_ts = ts
                if self.last_ts is None or ts > self.last_ts:
                    self.last_ts = ts
            if isinstance(r, ServerStats):
                self.samples += 1
                kv = r.kv_usage_ratio
                if kv is not None and (self.peak_kv is None or kv > (self.peak_kv.kv_usage_ratio or 0)):
                    self.peak_kv = r
                waiting = r.waiting
                if waiting is not None and (self.peak_waiting is None or waiting > (self.peak_waiting.waiting or 0)):
                    self.peak_waiting = r
            elif isinstance(r, Event):
                self._occurrences[r.kind, r.phase] += occurrences(r)
                self._order += 1
                rank = -_SEVERITY_ORDER[r.severity]
                heap = self._notable
                if len(heap) < NOTABLE_LIMIT:
                    heapq.heappush(heap, (rank, -(ts or 0.0), -self._order, r))
                elif rank >= (least := heap[0])[0] and (rank > least[0] or -(ts or 0.0) > least[1]):
                    # (an equal rank and time never displaces the least: its order is later than every kept one's)
                    heapq.heapreplace(heap, (rank, -(ts or 0.0), -self._order, r))
            elif isinstance(r, CapacityFact):  # a request's duration is for the judge, not the summary
                self.facts[r.name] = r.value

    def merge(self, later: SummaryBuilder) -> None:
        """Add the summary of the records that came after this one's (another process's chunk of a file)."""
        self._occurrences.update(later._occurrences)
        self.facts.update(later.facts)
        if later.peak_kv is not None and (self.peak_kv is None or (later.peak_kv.kv_usage_ratio or 0)
                                          > (self.peak_kv.kv_usage_ratio or 0)):
            self.peak_kv = later.peak_kv
        if later.peak_waiting is not None and (self.peak_waiting is None or (later.peak_waiting.waiting or 0)
                                               > (self.peak_waiting.waiting or 0)):
            self.peak_waiting = later.peak_waiting
        self.samples += later.samples
        for ts in (later.first_ts, later.last_ts):
            if ts is not None:
                self.first_ts = ts if self.first_ts is None or ts < self.first_ts else self.first_ts
                self.last_ts = ts if self.last_ts is None or ts > self.last_ts else self.last_ts
        for severity, neg_ts, neg_order, event in later._notable:
            entry = (severity, neg_ts, neg_order - self._order, event)  # after every record seen here
            if len(self._notable) < NOTABLE_LIMIT:
                heapq.heappush(self._notable, entry)
            elif entry[:3] > self._notable[0][:3]:
                heapq.heapreplace(self._notable, entry)
        self._order += later._order

    def result(self) -> Summary:
        notable = [e for *_, e in sorted(self._notable, key=lambda entry: entry[:3], reverse=True)]
        notable.sort(key=lambda e: e.ts or 0.0)
        return Summary(self.counts, self.phases, self.first_ts, self.last_ts, self.facts, self.peak_kv,
                       self.peak_waiting, self.samples, notable)

    @property
    def counts(self) -> dict[str, int]:
        """Occurrences by kind, named by value (the counter is kept by enum: naming each event cost a storm)."""
        out: dict[str, int] = {}
        for (kind, _phase), n in self._occurrences.items():
            out[kind.value] = out.get(kind.value, 0) + n
        return out

    @property
    def phases(self) -> dict[str, Counter[str]]:
        """Occurrences by kind and phase, named by value."""
        out: dict[str, Counter[str]] = {}
        for (kind, phase), n in self._occurrences.items():
            out.setdefault(kind.value, Counter())[phase.value] += n
        return out


def summarize(records: Iterable[Record]) -> Summary:
    """Counts by kind (and phase), time span, last value of each capacity fact, peaks, notable events."""
    builder = SummaryBuilder()
    builder.add(records)
    return builder.result()
