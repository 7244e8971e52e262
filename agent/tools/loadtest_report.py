"""The load test's results: the verdict against the budget, the table, the JSON, and the flat row a
`load_steps` table takes. Pure: no I/O.

Why the first broken level broke is **the judge's** whenever it judged the run (the engine's log or the
agent's store was given): the headline category of the findings active during that level
(agent/judge/precedence.py), so the load test cannot call "KV exhausted" what the advisor calls the
activation peak. Without findings, the level's own counts (OOM, preemptions, sustained queueing, errors)
name the cause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agent.judge.precedence import headline
from agent.verdicts import Finding, LoadStep

ERROR_CLASSES = ("http_429", "http_503", "http_5xx", "timeout", "connection", "bad_answer", "other")
# bad_answer: a 200 that is not a completion (not JSON, no `choices`, nested too deep, a stream with no
# chunk), or an answer over 16 MiB, or a streamed line over 1 MiB — counted, never a crash


@dataclass(frozen=True)
class Verdict:
    """The run against the capacity: highest safe level, first broken level and why, and one sentence."""

    capacity: int | None
    safe_level: int | None
    broken_level: int | None
    cause: str | None
    agrees: bool | None
    text: str


@dataclass(frozen=True)
class LoadTestResult:
    run_id: str
    target: str
    steps: tuple[LoadStep, ...]
    verdict: Verdict
    failure: str | None = None  # why the run stopped before its last level (the levels above still count)


def _cause(step: LoadStep) -> str:
    if step.oom_events:
        return "OOM"
    if step.preemption_events:
        return "preemptions"
    if step.reason.startswith("queueing"):
        return "queueing"
    if step.errors:
        worst = max(step.errors.items(), key=lambda kv: kv[1])[0]
        return {"http_429": "429 refusals", "http_503": "503 refusals", "http_5xx": "5xx errors",
                "timeout": "client timeouts", "connection": "connection errors",
                "bad_answer": "answers that were not completions"}.get(worst, "failed requests")
    return "failures"


# The judge's categories as the load test's causes; the first three are a verdict on the KV budget.
JUDGED_CAUSE = {"kv_exhausted": "KV cache exhausted", "node_full": "node full", "queueing": "queueing",
                "startup": "start-up failure", "activation_peak": "OOM at the activation peak (KV not full)",
                "rejections": "refusals", "timeouts": "timeouts", "engine": "engine step timeouts"}
KV_CAUSES = ("OOM", "preemptions", "queueing", "KV cache exhausted", "node full")


def _judged(step: LoadStep, findings: Sequence[Finding], categories: Mapping[str, str],
            pause: float) -> tuple[str, str] | None:
    """(cause, the governing finding's change) from the findings active during the level, or None."""
    during = [f for f in findings if f.since <= step.ended + pause and (f.active or f.ts >= step.started)
              and categories.get(f.rule) not in (None, "config")]
    head = headline(during, categories)
    if head is None or head.finding is None:
        return None
    f = head.finding
    change = f"{f.rule}"
    if f.knob is not None and f.direction is not None:
        change += f": {f.direction.value} {f.knob.value}"
        if f.recommended is not None:
            change += f" to {f.recommended:g}" if isinstance(f.recommended, float) else f" to {f.recommended}"
    return JUDGED_CAUSE.get(head.category, head.category), change


def verdict(steps: Sequence[LoadStep], capacity: int | None, findings: Sequence[Finding] = (),
            categories: Mapping[str, str] | None = None, pause: float = 5.0) -> Verdict:
    """The rule (docs/loadtest.md): safe = the highest level below the first broken one that did not
    break; the run agrees with the capacity when safe ≤ capacity < first broken level. Refusals and
    timeouts are not a KV verdict: they say a queue or a deadline was hit first. The cause is the judge's
    when `findings` (of the run's window) give one (see the module doc)."""
    broken = next((s for s in steps if s.broke), None)
    below = [s.level for s in steps if not s.broke and (broken is None or s.level < broken.level)]
    safe = max(below) if below else None
    head = f"budget says {capacity}, " if capacity is not None else ""
    safe_text = f"measured safe up to {safe}" if safe is not None else "no level was safe"
    if broken is None:
        tried = max((s.level for s in steps), default=None)
        text = f"{head}{safe_text}; no level broke (highest tried {tried}): add higher --levels to find the limit"
        beyond = capacity is not None and tried is not None and tried > capacity
        if beyond:
            text += f"; the engine held {tried} concurrent requests, more than the budget's {capacity}"
        return Verdict(capacity, safe, None, None, False if beyond else None, text)
    judged = _judged(broken, findings, categories or {}, pause)
    cause = judged[0] if judged is not None else _cause(broken)
    text = f"{head}{safe_text}, first {cause} at {broken.level}"
    if judged is not None:
        text += f" (the judge: {judged[1]})"
    agrees: bool | None = None
    if capacity is not None:
        if cause in KV_CAUSES:
            agrees = (safe is None or safe <= capacity) and capacity < broken.level
            if agrees:
                text += ": consistent with the budget"
            elif broken.level <= capacity:
                text += (": broke at or below the budget — the engine holds less KV than computed (weights or "
                         "overhead underestimated, or requests longer than the budget's tokens per request)")
            else:
                text += (": safe beyond the budget — it is conservative for this workload (requests shorter "
                         "than its tokens per request, or the engine found more memory)")
        else:
            why = {"429 refusals": "requests were refused at admission (a queue or rate limit)",
                   "503 refusals": "requests were refused at admission (a queue limit)",
                   "client timeouts": "requests ran past the client timeout",
                   "5xx errors": "the server failed requests",
                   "connection errors": "the endpoint stopped answering (is it up? did it crash?)",
                   "answers that were not completions": "the endpoint answered with something that is not an "
                   "OpenAI completion (is the URL right?)"}.get(
                       cause, "requests failed")
            text += f": {why} before the KV cache ran out, so the budget's {capacity} is not tested by this run"
    return Verdict(capacity, safe, broken.level, cause, agrees, text)


def to_json(result: LoadTestResult) -> dict[str, Any]:
    return {"run_id": result.run_id, "target": result.target,
            "steps": [dict(asdict(s), errors=dict(s.errors)) for s in result.steps],
            "verdict": asdict(result.verdict), "failure": result.failure}


def _ms(value: float | None) -> str:
    return f"{value * 1000:,.0f}" if value is not None else "-"


def render_table(result: LoadTestResult) -> str:
    """One line per level, then the verdict."""
    head = (f"{'level':>5} {'reqs':>6} {'ok':>6} {'req/s':>8} {'tok/s':>8} {'p50 ms':>8} {'p95 ms':>8} "
            f"{'p99 ms':>8} {'ttft95':>7} {'kv%':>5} {'run':>4} {'wait':>5} {'preempt':>7} {'oom':>3}  "
            "errors / why it broke")
    out = [f"load test {result.run_id} against {result.target}", head]
    for s in result.steps:
        kv = f"{s.kv_usage_peak_ratio * 100:.0f}" if s.kv_usage_peak_ratio is not None else "-"
        errors = ", ".join(f"{n} {k}" for k, n in s.errors.items())
        why = s.reason if s.broke else errors
        out.append(f"{s.level:>5} {s.requests:>6} {s.ok:>6} {s.throughput_rps or 0:>8.1f} "
                   f"{s.output_tokens_per_second or 0:>8.0f} {_ms(s.latency_p50_seconds):>8} "
                   f"{_ms(s.latency_p95_seconds):>8} {_ms(s.latency_p99_seconds):>8} {_ms(s.ttft_p95_seconds):>7} "
                   f"{kv:>5} {s.running_peak if s.running_peak is not None else '-':>4} "
                   f"{s.waiting_peak if s.waiting_peak is not None else '-':>5} {s.preemption_events:>7} "
                   f"{s.oom_events:>3}  {'BROKE: ' if s.broke else ''}{why}")
        if s.gpu_memory_peak_bytes is not None:
            out[-1] += f"  gpu {s.gpu_memory_peak_bytes / 2**30:.2f} GiB"
    out.append(f"verdict: {result.verdict.text}")
    if result.failure is not None:
        out.append(f"stopped early: {result.failure}")
    return "\n".join(out)
