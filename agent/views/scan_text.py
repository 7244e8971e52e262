"""`scan` output: the human summary and the JSON-lines records of saved logs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import IO, Any

from agent.inert import inert, printable
from agent.records import CapacityFact, Event, Record, RequestSample, Server, ServerStats
from agent.sources.saved import FileScan
from agent.views.summary import Summary, summarize
from agent.views.units import fact, when
from agent.visibility import BlindSpot, log_blind_spots


def render_text(scans: list[FileScan], summary: Summary | None = None) -> str:
    """The human summary: inputs, time span, counts by kind, the two distinctions of the budget method, capacity, peaks,
    notable events (`summary` built while scanning, or else from the scans' kept records)."""
    if summary is None:
        summary = summarize(r for s in scans for r in s.records)
    out = ["Inputs:"]
    out += [f"  {s.source}: {s.lines:,} lines, {s.fmt}, read as {s.server.value}"
            + (f", {s.parse_errors} skipped (numbers that cannot be numbers)" if s.parse_errors else "")
            for s in scans]
    if summary.first_ts is None and summary.last_ts is None:
        out.append("Time: the lines carry no time stamps")
    else:
        out.append(f"Time: {when(summary.first_ts)} → {when(summary.last_ts)}")
    blind = blind_spots(scans, summary)
    out.append("Events by kind:" if summary.counts else "Events: none")
    for kind, n in sorted(summary.counts.items(), key=lambda kv: -kv[1]):
        by_phase = ", ".join(f"{p} {c}" for p, c in sorted(summary.phases[kind].items()))
        out.append(f"  {kind:<18} {n:>7,}  ({by_phase})")
    out += _distinctions(summary, blind)
    if blind:
        out.append("Not visible in these logs:")
        out += [f"  {b.what}: {b.sentence()}" for b in blind]
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
        for e in summary.notable:
            where = f"  [{e.path}:{e.line if e.line is not None else e.offset}]" if e.path is not None else ""
            out.append(f"  {when(e.ts)}  {e.severity.value:<8} {e.kind.value:<17} {e.phase.value:<10} "
                       f"{e.message[:140]}{where}")
    return printable("\n".join(out))


def blind_spots(scans: list[FileScan], summary: Summary) -> list[BlindSpot]:
    """What the scanned logs cannot show, once per kind of blind spot (the facts are all inputs' together)."""
    seen: dict[str, BlindSpot] = {}
    served = summary.samples > 0 or any(p != "startup" for phases in summary.phases.values() for p in phases)
    for scan in scans:
        for spot in log_blind_spots(scan.server, summary.facts, served=served):
            seen.setdefault(spot.what, spot)
    return list(seen.values())


def _distinctions(summary: Summary, blind: list[BlindSpot]) -> list[str]:
    """The budget method's readings: OOM vs queueing; refused at admission vs timed out after work began;
    requests that failed. A count the logs cannot show is said to be unknown, not 0."""
    c = summary.counts
    oom, queued = c.get("oom", 0), c.get("pending", 0)
    refused = c.get("queue_full", 0) + c.get("http_429", 0) + c.get("http_503", 0)
    timed_out = c.get("deadline_exceeded", 0)
    unseen = {b.what for b in blind}
    preempted = "preemptions not in the log" if "preemptions" in unseen else \
        f"{c.get('preemption', 0)} preemptions"
    lines = []
    if oom or queued or summary.peak_waiting is not None or c.get("preemption"):
        peak = summary.peak_waiting.waiting if summary.peak_waiting is not None else 0
        lines.append(f"Memory vs queueing: {oom} OOM, {preempted}; "
                     f"queue became non-empty {queued} times, peak waiting {peak}")
    if refused or timed_out:
        lines.append(f"Refused at admission (no token): {refused}; timed out after work began: {timed_out}")
    if failed := c.get("request_failed", 0):
        lines.append(f"Requests that failed (error answers, not refusals or timeouts): {failed}")
    return lines


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    return value


def _items(record: Record) -> Iterator[tuple[str, Any]]:
    """`as_dict(record).items()` without its deep copy (records hold only scalars, and a `fields` mapping of
    scalars, so JSON cannot tell the difference; the copy made an event cost as much as fifty samples)."""
    if isinstance(record, ServerStats | RequestSample):
        return iter(record._asdict().items())
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        names = _FIELD_NAMES[type(record)] = tuple(f.name for f in fields(record))
    return ((name, getattr(record, name)) for name in names)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def record_json(record: Record, server: Server) -> str:
    """One record as a JSON object: `type` event (with `kind`), stats, request (with `duration_s`), or fact
    (with `name`, `value`);
    stats and facts carry the server the stream was read as when they do not name one."""
    body = {k: _plain(v) for k, v in _items(record)}
    if "line" in body:  # next to `offset`: after it come `file_key`, then `line`
        key = body.pop("file_key")
        body["line"] = body.pop("line")
        body["file_key"] = key
    kind = ("event" if isinstance(record, Event) else "stats" if isinstance(record, ServerStats)
            else "request" if isinstance(record, RequestSample) else "fact")
    if isinstance(record, CapacityFact | ServerStats | RequestSample):
        body.setdefault("server", server.value)
    return json.dumps(inert({"type": kind, **body}), ensure_ascii=False, default=str)


_ENCODE = json.JSONEncoder(ensure_ascii=False, default=str).encode
_float_repr = float.__repr__
_int_repr = int.__repr__
_FLOATS: dict[float, str] = {}  # repr of recent floats: KV usage, hit rates and times repeat a lot
_STRINGS: dict[str | None, str] = {}  # JSON of sources and paths (None is never a key; looking it up is fine)
# (a float's cached spelling is looked up only for a float: 1 == 1.0, and an int is spelled `1`)
_cached_float = _FLOATS.get
_cached_string = _STRINGS.get


def _float(x: float | None) -> str:
    """As `json.dumps` writes a float field (None, and whatever else a caller put there, included)."""
    if x is None:
        return "null"
    if x.__class__ is not float or x - x != 0 or x == 0:  # an int (1 == 1.0), NaN, infinity, -0.0 == 0.0
        return _ENCODE(x)
    text = _FLOATS.get(x)
    if text is None:
        if len(_FLOATS) >= 1 << 16:
            _FLOATS.clear()
        text = _FLOATS[x] = _float_repr(x)
    return text


def _int(x: int | None) -> str:
    return "null" if x is None else _int_repr(x) if x.__class__ is int else _ENCODE(x)


def _string(x: str | None) -> str:
    if x is None:
        return "null"
    text = _STRINGS.get(x)
    if text is None:
        if len(_STRINGS) >= 1 << 10:
            _STRINGS.clear()
        text = _STRINGS[x] = _ENCODE(printable(x))
    return text


def _stats_json(r: ServerStats) -> str:
    """`record_json` of a load sample (most records of a busy log), written field by field: no dict, no
    enum lookups, float spellings reused (tests/unit/test_scan_stream.py checks it against `record_json`).
    The commonest value of each field is spelled inline (a cached float, an int, a None), the rest by
    `_float`, `_int` and `_string`, which say the same for those: a call per field was most of the cost."""
    ts, source, server, running, waiting, swapped, kv, prompt, gen, hit, preempt, kv_tokens, path, offset, key, line = r
    if (swapped is None and preempt is None and kv_tokens is None and key is None and running.__class__ is int
            and waiting.__class__ is int and offset.__class__ is int and line.__class__ is int
            and ts.__class__ is float and kv.__class__ is float and prompt.__class__ is float
            and gen.__class__ is float and ts - ts == 0 and kv - kv == 0 and prompt - prompt == 0 and gen - gen == 0
            and (hit is None or (hit.__class__ is float and hit - hit == 0))):
        # the sample a stats line gives (every number a finite float or an int, which `json` spells as `repr`
        # does): one format, no look-ups, a third of the general path's time
        return (f'{{"type": "stats", "ts": {ts!r}, "source": {_cached_string(source) or _string(source)}, '
                f'"server": {_cached_string(server._value_) or _string(server._value_)}, "running": {running}, '
                f'"waiting": {waiting}, "swapped": null, "kv_usage_ratio": {kv!r}, "prompt_tps": {prompt!r}, '
                f'"gen_tps": {gen!r}, "prefix_hit_ratio": {"null" if hit is None else _float_repr(hit)}, '
                f'"preemptions": null, "kv_used_tokens": null, "path": {_cached_string(path) or _string(path)}, '
                f'"offset": {offset}, "line": {line}, "file_key": null}}')
    return (f'{{"type": "stats", "ts": {(ts.__class__ is float and _cached_float(ts)) or _float(ts)}, '
            f'"source": {_cached_string(source) or _string(source)}, "server": {_string(server._value_)}, '
            f'"running": {_int_repr(running) if running.__class__ is int else _int(running)}, '
            f'"waiting": {_int_repr(waiting) if waiting.__class__ is int else _int(waiting)}, '
            f'"swapped": {"null" if swapped is None else _int(swapped)}, '
            f'"kv_usage_ratio": {(kv.__class__ is float and _cached_float(kv)) or _float(kv)}, '
            f'"prompt_tps": {(prompt.__class__ is float and _cached_float(prompt)) or _float(prompt)}, '
            f'"gen_tps": {(gen.__class__ is float and _cached_float(gen)) or _float(gen)}, '
            f'"prefix_hit_ratio": {(hit.__class__ is float and _cached_float(hit)) or _float(hit)}, '
            f'"preemptions": {"null" if preempt is None else _int(preempt)}, '
            f'"kv_used_tokens": {"null" if kv_tokens is None else _int(kv_tokens)}, '
            f'"path": {_cached_string(path) or _string(path)}, '
            f'"offset": {_int_repr(offset) if offset.__class__ is int else _int(offset)}, '
            f'"line": {_int_repr(line) if line.__class__ is int else _int(line)}, '
            f'"file_key": {"null" if key is None else _string(key)}}}')


class JsonlWriter:
    """Writes records as JSON lines through one buffer (no flush per line)."""

    def __init__(self, out: IO[str], batch: int = 256) -> None:
        self._write = out.write
        self._parts: list[str] = []
        self._batch = batch

    def __call__(self, records: list[Record], server: Server) -> None:
        parts = self._parts
        for r in records:
            parts.append(_stats_json(r) if type(r) is ServerStats else record_json(r, server))
        if len(parts) >= self._batch:
            self.flush()

    def copy_from(self, path: str, start: int = 0) -> None:
        """Append a file of JSON lines another process wrote (`scan --jobs`), from position `start` (a
        `tell()` of the writer's, at a line start)."""
        self.flush()
        with Path(path).open(encoding="utf-8") as handle:
            handle.seek(start)
            while block := handle.read(1 << 20):
                self._write(block)

    def flush(self) -> None:
        if self._parts:
            self._parts.append("")
            self._write("\n".join(self._parts))
            self._parts.clear()


def jsonl(scans: list[FileScan]) -> Iterator[str]:
    """One JSON object per kept record (`record_json`), for scans that kept theirs (`scan_stream`)."""
    for s in scans:
        for r in s.records:
            yield record_json(r, s.server)
