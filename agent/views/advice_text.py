"""Render the advisor's findings for people (text) and tools (JSON): `advise`, `status`, `rules check`.

Pure string building; the CLI prints. Each finding reads as: which engine, which knob, which way, from
what to what, why (the evidence numbers) and how the number was computed (the arithmetic).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from agent.inert import inert, printable
from agent.judge.replay import Advice, Replay
from agent.verdicts import Finding


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _value(x: float | str | None) -> str:
    if x is None:
        return "?"
    if isinstance(x, float) and x.is_integer():
        return f"{x:.0f}"
    return str(x)


def finding_line(f: Finding) -> str:
    """`[warning] rule on engine: lower max_num_seqs 32 → 13` (one line)."""
    change = ""
    if f.knob is not None and f.direction is not None:
        change = f": {f.direction.value} {f.knob.value}"
        if f.current is not None or f.recommended is not None:
            change += f" {_value(f.current)} → {_value(f.recommended)}"
    return f"[{f.severity.value}] {f.rule} on {f.engine}{change}"


def render_finding(f: Finding, cleared_at: float | None = None) -> str:
    lines = [finding_line(f), f"    {f.message}"]
    if f.arithmetic:
        lines.append(f"    how: {f.arithmetic}")
    shown = {k: v for k, v in f.evidence.items() if v is not None}
    if shown:
        lines.append("    evidence: " + ", ".join(f"{k}={_value(v)}" for k, v in shown.items()))
    span = f"    since {_when(f.since)}"
    span += f", cleared {_when(cleared_at)}" if cleared_at is not None else ", still active at the end"
    lines.append(span)
    return printable("\n".join(lines))


def render_replay(result: Replay) -> str:
    head = (f"Judged {len(result.engines)} engine(s) from {_when(result.since)} to {_when(result.until)} UTC"
            if result.engines else "No engine records in the window: nothing to judge.")
    parts = [head]
    for engine, cap in sorted(result.capacities.items()):
        if cap.max_concurrency is not None:
            parts.append(f"  {engine}: capacity {cap.max_concurrency} requests at {cap.tokens_per_request} tokens "
                         f"({cap.governs} figure)")
    if result.engines and not result.advice:
        parts.append("\nNo findings: no rule matched.")
    for advice in result.advice:
        parts.append("\n" + render_finding(advice.finding, advice.cleared_at))
    return printable("\n".join(parts))


def finding_json(f: Finding, cleared_at: float | None = None) -> dict[str, Any]:
    return inert({"rule": f.rule, "engine": f.engine, "severity": f.severity.value,
            "knob": f.knob.value if f.knob else None, "direction": f.direction.value if f.direction else None,
            "from": f.current, "to": f.recommended, "evidence": dict(f.evidence), "arithmetic": f.arithmetic,
            "message": f.message, "since": f.since, "cleared_at": cleared_at, "window_seconds": f.window_seconds})


def replay_json(result: Replay) -> dict[str, Any]:
    return inert({"since": result.since, "until": result.until, "engines": result.engines,
            "capacities": {k: v.as_dict() for k, v in result.capacities.items()},
            "findings": [finding_json(a.finding, a.cleared_at) for a in result.advice]})


def render_active(findings: Sequence[Finding]) -> str:
    """The `status` block: active findings, one line each with the message under it."""
    if not findings:
        return "Findings: none active"
    return "\n".join(["Findings:", *(f"  {finding_line(f)}\n      {f.message}" for f in findings)])


def advice_of(findings: Sequence[Finding]) -> list[Advice]:
    return [Advice(f) for f in findings]
