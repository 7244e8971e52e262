"""The report's tables as rows of plain strings: text, Markdown and HTML lay out the same cells.

Cells are unescaped text (log messages included); each renderer escapes for its own medium.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.offline.report import Report, Spread
from agent.views.units import number, size, when

MESSAGE_CHARS = 160


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    empty: str = ""  # said instead of the table when there are no rows
    footer: str = ""  # said under the table


def _cut(text: str, limit: int = MESSAGE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _count(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _bytes(value: float | None) -> str:
    return "—" if value is None else size(value)


def _value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return number(value) if isinstance(value, int | float | str) else str(value)


def _pair(spread: Spread, fmt: Any) -> str:
    return f"{fmt(spread.peak)} / {fmt(spread.p95)} / {fmt(spread.p50)}"


def sections(report: Report) -> list[Section]:
    """Every table of the report, in reading order."""
    out = [
        Section("timeline", "Timeline", ["kind", "events", "occurrences", "first", "last", "first id",
                                         "first message"],
                [[k.kind, f"{k.count:,}", _value(k.occurrences), when(k.first), when(k.last), _value(k.first_id),
                  _cut(k.first_message)] for k in report.timeline], "No events in the window."),
        Section("load", "Load against capacity (peak / p95 / p50)",
                ["engine", "KV usage", "running", "waiting", "capacity", "time over capacity", "samples"],
                [[e.engine, _pair(e.kv_usage_ratio, _ratio), _pair(e.running, _count), _pair(e.waiting, _count),
                  _value(e.max_concurrency), _ratio(e.over_capacity_ratio),
                  f"{e.kv_usage_ratio.samples or e.running.samples:,}"]
                 for e in report.engines], "No load samples in the window."),
        Section("gpus", "GPU memory (peak / p95 / p50)", ["GPU", "name", "used", "total", "peak of total"],
                [[str(g.gpu), g.name, _pair(g.used_bytes, _bytes), _bytes(g.total_bytes),
                  _ratio(g.used_bytes.peak / g.total_bytes) if g.total_bytes and g.used_bytes.peak is not None
                  else "—"] for g in report.gpus], "No GPU samples in the window."),
        Section("capacity", "Configured vs paper budget vs engine-reported capacity",
                ["engine", "max_num_seqs", "max_model_len", "memory fraction", "KV dtype", "paper", "engine says",
                 "governs", "capacity", "Δ"],
                [[c.engine, *(_value(c.configured.get(k)) for k in ("max_num_seqs", "max_model_len",
                                                                     "gpu_memory_fraction", "kv_cache_dtype")),
                  _value(c.paper_max_concurrency), _value(c.engine_max_concurrency), _value(c.governs),
                  _value(c.max_concurrency),
                  "—" if c.disagreement_ratio is None else f"{c.disagreement_ratio:+.0%}"] for c in report.capacity],
                "No engine with a capacity figure (no config budget, no engine start-up lines)."),
        Section("findings", "Findings", ["rule", "engine", "knob", "from → to", "evidence", "arithmetic"],
                [[f["rule"], f["engine"], f"{f['knob'] or '—'} ({f['direction'] or '—'})",
                  f"{_value(f['current'])} → {_value(f['recommended'])}",
                  ", ".join(f"{k}={_value(v)}" for k, v in f["evidence"].items()), _cut(f["arithmetic"])]
                 for f in report.findings], "No findings in the window."),
        Section("messages", "Top error messages", ["count", "kind", "message"],
                [[("≈" if report.messages_sampled else "") + f"{m.count:,}", m.kind, _cut(m.message)]
                 for m in report.messages], "No messages.",
                f"Counts estimated from {report.messages_sampled:,} evenly spread events of the window's "
                f"{sum(k.count for k in report.timeline):,}." if report.messages_sampled else ""),
        Section("load_test", "Load test", ["run", "level", "requests", "ok", "errors", "p95 latency", "KV peak",
                                           "broke"],
                [[s["run_id"], str(s["level"]), f"{s['requests']:,}", f"{s['ok']:,}",
                  ", ".join(f"{k} {v:,}" for k, v in s["errors"].items()) or "—",
                  "—" if s["latency_p95_seconds"] is None else f"{s['latency_p95_seconds']:.2f} s",
                  _ratio(s["kv_usage_peak_ratio"]), ("yes: " + s["reason"]) if s["broke"] else "no"]
                 for s in report.load_steps], "No load test in the window."),
        Section("blind", "What the agent could not see", ["subject", "from", "to", "what"],
                [[b.subject, when(b.since) if b.since is not None else "—",
                  when(b.until) if b.until is not None else "—", b.detail] for b in report.blind[:50]],
                "Nothing missing: every source and GPU sampled throughout.",
                f"{len(report.blind) - 50:,} more not shown." if len(report.blind) > 50 else ""),
    ]
    return out


def header_lines(report: Report) -> list[str]:
    """The lines above the tables: what was read, the window, the verdict and the event that broke it."""
    w = report.window
    lines = [f"Source: {report.source}", f"Window: {when(w.since)} → {when(w.until)} ({w.label})"]
    brk = report.verdict.break_event
    if brk is not None:
        lines.append(f"First event: #{_value(brk['id'])} {brk['kind']} at {when(brk['ts'])}: {_cut(brk['message'])}")
    if report.verdict.also:
        lines.append("Also: " + "; ".join(report.verdict.also))
    return lines
