"""`scan` output: the human summary and the JSON-lines records of saved logs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from enum import Enum
from typing import Any

from agent.records import CapacityFact, Event, ServerStats, as_dict
from agent.sources.saved import FileScan
from agent.views.summary import Summary, summarize
from agent.views.units import fact, printable, when


def render_text(scans: list[FileScan]) -> str:
    """The human summary: inputs, time span, counts by kind, the two distinctions of the budget method, capacity, peaks,
    notable events."""
    records = [r for s in scans for r in s.records]
    summary = summarize(records)
    out = ["Inputs:"]
    out += [f"  {s.source}: {s.lines:,} lines, {s.fmt}, read as {s.server.value}"
            + (f", {s.parse_errors} skipped (numbers that cannot be numbers)" if s.parse_errors else "")
            for s in scans]
    out.append(f"Time: {when(summary.first_ts)} → {when(summary.last_ts)}")
    out.append("Events by kind:" if summary.counts else "Events: none")
    for kind, n in sorted(summary.counts.items(), key=lambda kv: -kv[1]):
        by_phase = ", ".join(f"{p} {c}" for p, c in sorted(summary.phases[kind].items()))
        out.append(f"  {kind:<18} {n:>7,}  ({by_phase})")
    out += _distinctions(summary)
    if summary.facts:
        out.append("Capacity (last reported):")
        out += [f"  {name:<24} {fact(name, value)}" for name, value in sorted(summary.facts.items())]
    if summary.samples:
        out.append(f"Load ({summary.samples:,} samples):")
        if summary.peak_kv is not None and summary.peak_kv.kv_usage_ratio is not None:
            out.append(f"  peak KV usage  {summary.peak_kv.kv_usage_ratio:.1%} at {when(summary.peak_kv.ts)}")
        if summary.peak_waiting is not None:
            out.append(f"  peak waiting   {summary.peak_waiting.waiting} at {when(summary.peak_waiting.ts)}")
    if summary.notable:
        out.append("Notable events:")
        by_source = {s.source: s for s in scans}
        for e in summary.notable:
            scan = by_source.get(e.path or "-")
            line = scan.line_of(e.offset) if scan is not None and e.offset is not None else None
            where = f"  [{e.path}:{line}]" if e.path is not None and line is not None else ""
            out.append(f"  {when(e.ts)}  {e.severity.value:<8} {e.kind.value:<17} {e.phase.value:<10} "
                       f"{e.message[:140]}{where}")
    return printable("\n".join(out))


def _distinctions(summary: Summary) -> list[str]:
    """The budget method's readings: OOM vs queueing; refused at admission vs timed out after work began."""
    c = summary.counts
    oom, queued = c.get("oom", 0), c.get("pending", 0)
    refused = c.get("queue_full", 0) + c.get("http_429", 0) + c.get("http_503", 0)
    timed_out = c.get("deadline_exceeded", 0)
    lines = []
    if oom or queued or summary.peak_waiting is not None:
        peak = summary.peak_waiting.waiting if summary.peak_waiting is not None else 0
        lines.append(f"Memory vs queueing: {oom} OOM, {c.get('preemption', 0)} preemption events; "
                     f"queue became non-empty {queued} times, peak waiting {peak}")
    if refused or timed_out:
        lines.append(f"Refused at admission (no token): {refused}; timed out after work began: {timed_out}")
    return lines


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    return value


def jsonl(scans: list[FileScan]) -> Iterator[str]:
    """One JSON object per record: `type` event (with `kind`), stats, or fact (with `name`, `value`)."""
    for s in scans:
        for r in s.records:
            body = {k: _plain(v) for k, v in as_dict(r).items()}
            kind = "event" if isinstance(r, Event) else "stats" if isinstance(r, ServerStats) else "fact"
            if isinstance(r, CapacityFact | ServerStats):
                body.setdefault("server", s.server.value)
            yield json.dumps({"type": kind, **body}, ensure_ascii=False, default=str)
