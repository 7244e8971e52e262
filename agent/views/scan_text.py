"""`scan` output: the human summary and the JSON-lines records of saved logs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import IO, Any

from agent.inert import inert, printable
from agent.offline.saved import FileScan
from agent.records import CapacityFact, Event, Record, RequestSample, Server, ServerStats
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


def _inert_value(value: Any) -> Any:
    """`inert` of one field's value, an enum as its value; a number (most values) as it is, without the walk."""
    cls = value.__class__
    if cls is float or cls is int or value is None:
        return value
    return inert(value.value if isinstance(value, Enum) else value)


def record_json(record: Record, server: Server) -> str:
    """One record as a JSON object: `type` event (with `kind`), stats, request (with `duration_s`), or fact
    (with `name`, `value`);
    stats and facts carry the server the stream was read as when they do not name one. Every string passes
    through `inert` (terminal controls shown as text); values are read without `as_dict`'s deep copy (records
    hold only scalars and a `fields` mapping of scalars, so JSON cannot tell the difference)."""
    if isinstance(record, ServerStats):
        return _stats_json(record)
    if isinstance(record, RequestSample):
        request = {"type": "request"}
        request.update((name, _inert_value(value)) for name, value in record._asdict().items())
        request["line"] = request.pop("line")  # after `offset` come `line`, then `file_key`, as for a sample
        request["file_key"] = request.pop("file_key")
        return _encode(request)
    kind = "event" if isinstance(record, Event) else "fact"
    body = {"type": kind}
    body.update((f.name, _inert_value(getattr(record, f.name))) for f in fields(record))
    if isinstance(record, Event):  # next to `offset`: after it come `file_key`, then `line`
        key = body.pop("file_key")
        body["line"] = body.pop("line")
        body["file_key"] = key
    if isinstance(record, CapacityFact):
        body.setdefault("server", server.value)
    return _encode(body)


def _stats_body(s: ServerStats) -> dict[str, Any]:
    """A load sample's fields (most records of a busy log): numbers as they are, its text made inert."""
    return {"type": "stats", "ts": s.ts, "source": _inert_value(s.source), "server": _inert_value(s.server),
            "running": s.running, "waiting": s.waiting, "swapped": s.swapped, "kv_usage_ratio": s.kv_usage_ratio,
            "prompt_tps": s.prompt_tps, "gen_tps": s.gen_tps, "prefix_hit_ratio": s.prefix_hit_ratio,
            "preemptions": s.preemptions, "kv_used_tokens": s.kv_used_tokens, "path": _inert_value(s.path),
            "offset": s.offset, "line": s.line, "file_key": _inert_value(s.file_key)}


# `json.dumps` with these options builds an encoder on every call: one is kept (it holds no data)
_encode = json.JSONEncoder(ensure_ascii=False, default=str).encode

# A sample's JSON object with its numbers in order (0 to 11) and its texts by name: what `_encode(_stats_body(s))`
# writes (tests/unit/test_scan_stream.py holds the two to each other)
_STATS_JSON = ('{{"type": "stats", "ts": {0}, "source": {source}, "server": {server}, "running": {1}, "waiting": {2}, '
               '"swapped": {3}, "kv_usage_ratio": {4}, "prompt_tps": {5}, "gen_tps": {6}, "prefix_hit_ratio": {7}, '
               '"preemptions": {8}, "kv_used_tokens": {9}, "path": {path}, "offset": {10}, "line": {11}, '
               '"file_key": {file_key}}}').format
_NUMBER_TYPES = frozenset({int, float, type(None)})  # exactly these: `repr` writes them as the encoder does
_TEXT_JSON: dict[str | Server | None, str] = {}  # a sample's source, server, path and file key, encoded
TEXT_JSON_CACHE = 256  # they are one stream's: a handful in a scan


def _text_json(value: str | Server | None) -> str:
    """One of a sample's texts as `_encode(_inert_value(value))` writes it, kept: most records of a busy log
    are samples, and a stream's four texts are the same on each."""
    out = _TEXT_JSON.get(value)
    if out is None:
        if len(_TEXT_JSON) >= TEXT_JSON_CACHE:
            _TEXT_JSON.clear()
        out = _TEXT_JSON[value] = _encode(_inert_value(value))
    return out


def _stats_json(s: ServerStats) -> str:
    """`_encode(_stats_body(s))` written from a template, at about half its cost on the commonest record of
    `scan --format jsonl`: the texts kept encoded, the numbers as `repr` writes them, which is what the encoder
    writes for an int and a finite float (`None` becomes `null`: no number's `repr` holds that word). A NaN or
    an infinity (`repr` gives `nan`, `inf`: an `a` or an `i`, which no other number's has) or another type
    takes the encoder."""
    ts, source, server, running, waiting, swapped, kv, pt, gt, hit, preempted, kv_tokens, path, offset, key, line = s
    numbers = (ts, running, waiting, swapped, kv, pt, gt, hit, preempted, kv_tokens, offset, line)
    text = "\x00".join(map(repr, numbers))
    if "a" in text or "i" in text or not _NUMBER_TYPES.issuperset(map(type, numbers)):
        return _encode(_stats_body(s))
    return _STATS_JSON(*text.replace("None", "null").split("\x00"), source=_text_json(source),
                       server=_text_json(server), path=_text_json(path), file_key=_text_json(key))


class JsonlWriter:
    """Writes records as JSON lines through one buffer (no flush per line)."""

    def __init__(self, out: IO[str], batch: int = 256) -> None:
        self._write = out.write
        self._parts: list[str] = []
        self._batch = batch

    def __call__(self, records: list[Record], server: Server) -> None:
        parts = self._parts
        for r in records:
            parts.append(record_json(r, server))
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
