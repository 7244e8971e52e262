"""Offline classification of saved logs: the core of `deepinfer-agent scan`.

The first thing an engineer runs on a log copied off a broken node. Each input is unwrapped (plain,
Docker json-file or CRI, detected per file from its first line), re-joined where the runtime split long
lines, fed to one parser per file (server given or auto-detected), and the records are summarised.
It is a report, not a check: finding problems is the normal outcome, not an error.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from enum import Enum
from typing import Any, BinaryIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.errors import AgentError
from agent.records import CapacityFact, Event, Record, Server, ServerStats, Severity, as_dict
from agent.sources.framing import PartialJoiner, unwrap
from parsers import make_parser

NOTABLE_LIMIT = 20
_SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.ERROR: 1, Severity.WARNING: 2, Severity.INFO: 3}


@dataclass
class FileScan:
    """What one input gave: its envelope format, the server it was read as, and its records."""

    source: str
    fmt: str
    server: Server
    lines: int = 0
    parse_errors: int = 0
    records: list[Record] = field(default_factory=list)


def parse_tz(text: str) -> tzinfo:
    """`UTC`, an offset (`+08:00`, `-0500`) or an IANA name (`Asia/Shanghai`): the zone that log lines
    without one were written in (vLLM, SGLang and syslog print local time)."""
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)", text.strip())
    if m is not None:
        sign = -1 if m.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(m.group(2)), minutes=int(m.group(3))))
    if text.strip().upper() in ("UTC", "Z"):
        return timezone.utc
    try:
        return ZoneInfo(text.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise AgentError(f"--tz {text!r}: expected UTC, an offset like +08:00, or a zone name like "
                         "Asia/Shanghai") from exc


def detect_format(first_line: str) -> str:
    """`docker`, `cri` or `plain`, from one physical line."""
    if unwrap(first_line, "docker") is not None:
        return "docker"
    if unwrap(first_line, "cri") is not None:
        return "cri"
    return "plain"


@dataclass
class Unwrapper:
    """Reads a saved log's lines out of their envelope (plain, Docker json-file or CRI, told by the first
    non-empty line), re-joining runtime-split pieces; `fmt` and `lines` say what it saw."""

    fmt: str | None = None
    lines: int = 0

    def read(self, handle: BinaryIO) -> Iterator[tuple[str, float | None, int]]:
        """(text, envelope time, byte offset of the line's first piece) for each logical line."""
        joiner = PartialJoiner()
        offset = 0
        for raw in handle:
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            line_offset = offset
            offset += len(raw)
            self.lines += 1
            if self.fmt is None:
                if not text.strip():
                    continue
                self.fmt = detect_format(text)
            frame = unwrap(text, self.fmt)
            if frame is None:  # a malformed envelope line is still a line
                yield text, None, line_offset
                continue
            whole = joiner.feed(frame, line_offset)  # a split line is located by its first piece
            if whole is not None:
                joined, start = whole
                yield joined.text, joined.ts, start
        for held, start in joiner.flush():
            yield held.text, held.ts, start


def scan_stream(handle: BinaryIO, source: str, server: Server = Server.AUTO, ref_time: float | None = None,
                tz: tzinfo = timezone.utc) -> FileScan:
    """Classify one byte stream. `ref_time` (the file's mtime) gives yearless stamps their year."""
    parser = make_parser(server, source, ref_time, tz)
    result = FileScan(source, "plain", server)
    path = None if source == "-" else source
    unwrapper = Unwrapper()
    for text, ts, offset in unwrapper.read(handle):
        result.records.extend(parser.feed(text, ts, path, offset))
    result.records.extend(parser.flush())
    result.fmt = unwrapper.fmt or "plain"
    result.lines = unwrapper.lines
    result.server = parser.server
    result.parse_errors = parser.parse_errors
    return result


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


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if ts is not None else "?"


def _value(value: float | str) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"
    return str(value)


def render_text(scans: list[FileScan]) -> str:
    """The human summary: inputs, time span, counts by kind, the two distinctions of the budget method, capacity, peaks,
    notable events."""
    records = [r for s in scans for r in s.records]
    summary = summarize(records)
    out = ["Inputs:"]
    out += [f"  {s.source}: {s.lines:,} lines, {s.fmt}, read as {s.server.value}"
            + (f", {s.parse_errors} skipped (numbers that cannot be numbers)" if s.parse_errors else "")
            for s in scans]
    out.append(f"Time: {_when(summary.first_ts)} → {_when(summary.last_ts)}")
    out.append("Events by kind:" if summary.counts else "Events: none")
    for kind, n in sorted(summary.counts.items(), key=lambda kv: -kv[1]):
        by_phase = ", ".join(f"{p} {c}" for p, c in sorted(summary.phases[kind].items()))
        out.append(f"  {kind:<18} {n:>7,}  ({by_phase})")
    out += _distinctions(summary)
    if summary.facts:
        out.append("Capacity (last reported):")
        out += [f"  {name:<24} {_value(value)}" for name, value in sorted(summary.facts.items())]
    if summary.samples:
        out.append(f"Load ({summary.samples:,} samples):")
        if summary.peak_kv is not None and summary.peak_kv.kv_usage_ratio is not None:
            out.append(f"  peak KV usage  {summary.peak_kv.kv_usage_ratio:.1%} at {_when(summary.peak_kv.ts)}")
        if summary.peak_waiting is not None:
            out.append(f"  peak waiting   {summary.peak_waiting.waiting} at {_when(summary.peak_waiting.ts)}")
    if summary.notable:
        out.append("Notable events:")
        for e in summary.notable:
            where = f"  [{e.path}:{e.offset}]" if e.path is not None else ""
            out.append(f"  {_when(e.ts)}  {e.severity.value:<8} {e.kind.value:<17} {e.phase.value:<10} "
                       f"{e.message[:140]}{where}")
    return "\n".join(out)


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
