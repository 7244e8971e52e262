"""Render the advisor's findings for people (text) and tools (JSON): `advise`, `status`, `rules check`.

Pure string building; the CLI prints. Each finding reads as: which engine, which knob, which way, from
what to what, why (the evidence numbers) and how the number was computed (the arithmetic).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from agent.inert import inert, printable
from agent.judge.precedence import Recommendation, reconcile
from agent.judge.replay import Advice, Replay
from agent.judge.sizing import Sizing, sizing
from agent.verdicts import Finding
from agent.visibility import BlindSpot


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _value(x: float | str | None) -> str:
    if x is None:
        return "?"
    if isinstance(x, float) and x.is_integer():
        return f"{x:.0f}"
    return str(x)


def _change(current: float | str | None, recommended: float | str | None) -> str:
    """` 64 → 18`, ` to 18` (current unknown), ` (now 64)` (no number), or nothing."""
    if recommended is not None:
        return f" {_value(current)} → {_value(recommended)}" if current is not None else f" to {_value(recommended)}"
    return f" (now {_value(current)})" if current is not None else ""


def finding_line(f: Finding) -> str:
    """`[warning] rule on engine: lower max_num_seqs 32 → 13` (one line)."""
    change = ""
    if f.knob is not None and f.direction is not None:
        change = f": {f.direction.value} {f.knob.value}{_change(f.current, f.recommended)}"
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


def render_replay(result: Replay, blind: Mapping[str, Sequence[BlindSpot]] | None = None) -> str:
    head = (f"Judged {len(result.engines)} engine(s) from {_when(result.since)} to {_when(result.until)} UTC"
            if result.engines else "No engine records in the window: nothing to judge.")
    parts = [head]
    for engine, cap in sorted(result.capacities.items()):
        if cap.max_concurrency is not None:
            parts.append(f"  {engine}: capacity {cap.max_concurrency} requests at {cap.tokens_per_request} tokens "
                         f"({cap.governs} figure)")
            size = sizing(cap, result.workload_tokens)
            if size.expected is not None:
                parts.append(f"    {size.text()}")
    for engine, spots in sorted((blind or {}).items()):
        parts += [f"  {engine}: not in the log: {b.what} — {b.sentence()}" for b in spots]
    if result.engines and not result.advice:
        parts.append("\nNo findings: no rule matched.")
    recs = reconcile(a.finding for a in result.advice if a.cleared_at is None)
    if recs:
        parts.append("\n" + render_recommendations(recs))
    for advice in result.advice:
        parts.append("\n" + render_finding(advice.finding, advice.cleared_at))
    return printable("\n".join(parts))


def recommendation_line(r: Recommendation) -> str:
    """`engine: lower max_num_seqs 64 → 18 — governed by R; overrides S (raise → 48)`."""
    g = r.governs
    change = f"{g.direction.value if g.direction else 'review'} {r.knob.value}{_change(g.current, g.recommended)}"
    return f"{r.engine}: {change} — {r.why}"


def render_recommendations(recs: Sequence[Recommendation]) -> str:
    """One line per (engine, knob) still active: the answer to act on, and which rule decided it."""
    return "\n".join(["Recommendations (one per knob; lowering to stop OOM/preemption first):",
                      *(f"  {recommendation_line(r)}" for r in recs)])


def recommendation_json(r: Recommendation) -> dict[str, Any]:
    g = r.governs
    return {"engine": r.engine, "knob": r.knob.value, "direction": g.direction.value if g.direction else None,
            "from": g.current, "to": g.recommended, "governed_by": g.rule,
            "overrides": [o.rule for o in r.overridden], "why": r.why}


def finding_json(f: Finding, cleared_at: float | None = None) -> dict[str, Any]:
    return inert({"rule": f.rule, "engine": f.engine, "severity": f.severity.value,
            "knob": f.knob.value if f.knob else None, "direction": f.direction.value if f.direction else None,
            "from": f.current, "to": f.recommended, "evidence": dict(f.evidence), "arithmetic": f.arithmetic,
            "message": f.message, "since": f.since, "cleared_at": cleared_at, "window_seconds": f.window_seconds})


def replay_json(result: Replay) -> dict[str, Any]:
    return inert({"since": result.since, "until": result.until, "engines": result.engines,
            "capacities": {k: v.as_dict() for k, v in result.capacities.items()},
            "sizing": {k: _sizing_json(sizing(v, result.workload_tokens)) for k, v in result.capacities.items()},
            "findings": [finding_json(a.finding, a.cleared_at) for a in result.advice],
            "recommendations": [recommendation_json(r) for r in
                                reconcile(a.finding for a in result.advice if a.cleared_at is None)]})


def _sizing_json(size: Sizing) -> dict[str, Any]:
    return {"worst": size.worst, "worst_tokens": size.worst_tokens, "expected": size.expected,
            "expected_tokens": size.expected_tokens, "governs": size.governs, "governing": size.governing}


def render_active(findings: Sequence[Finding]) -> str:
    """The `status` block: active findings, one line each with the message under it."""
    if not findings:
        return "Findings: none active"
    lines = ["Findings:", *(f"  {finding_line(f)}\n      {f.message}" for f in findings)]
    recs = reconcile(findings)
    return "\n".join([*lines, render_recommendations(recs)] if recs else lines)


def advice_of(findings: Sequence[Finding]) -> list[Advice]:
    return [Advice(f) for f in findings]
