"""One recommendation per (engine, knob): the findings reconciled by a stated precedence, and one verdict.

Several rules may name the same knob at once (an OOM says lower max_num_seqs, a queue said raise it a
minute before; the static bound and a preemption storm both lower it). The answer a person acts on is one
number per knob, and it says which rule governs and which it overrode. The precedence, in order:

1. **Safety first**: `lower` beats `raise` beats `review`/`keep` — stopping OOM and preemption comes before
   using headroom.
2. **Severity**: critical, then error, warning, info.
3. **The cautious number**: among lowers, the lowest value; among raises, the smallest step.

"The engine's own figure beats the paper budget" holds before this: every capacity-derived number comes
from one `Capacity` per engine, which is the engine's figure once it reported one (agent/capacity), so two
findings never carry two capacities. docs/rules.md documents the order; `headline` makes the one verdict
every surface (advise, status, report, the load test) shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.records import Knob, Severity
from agent.verdicts import Direction, Finding

DIRECTION_ORDER = (Direction.LOWER, Direction.RAISE, Direction.REVIEW, Direction.KEEP)
SEVERITY_ORDER = (Severity.CRITICAL, Severity.ERROR, Severity.WARNING, Severity.INFO)
# Headline categories, the most urgent first; a rule's `category` (rules.py) says which it is.
CATEGORY_ORDER = ("startup", "kv_exhausted", "activation_peak", "engine", "node_full", "rejections", "queueing",
                  "timeouts", "config")
TITLES = {"startup": "Engine failed to start", "kv_exhausted": "KV cache exhausted",
          "activation_peak": "Out of memory at the activation peak (KV cache not full)",
          "engine": "Engine step timed out", "node_full": "Node full",
          "rejections": "Requests refused at admission", "queueing": "Requests queued for a slot",
          "timeouts": "Requests timed out", "config": "Configuration to review"}


def _number(x: float | str | None) -> float:
    return float(x) if isinstance(x, int | float) else float("inf")


def rank(f: Finding) -> tuple[int, int, float]:
    """The sort key of the precedence: smaller governs."""
    direction = DIRECTION_ORDER.index(f.direction) if f.direction in DIRECTION_ORDER else len(DIRECTION_ORDER)
    return direction, SEVERITY_ORDER.index(f.severity), _number(f.recommended)


@dataclass(frozen=True)
class Recommendation:
    """The one answer for a knob on an engine: the finding that governs and those it overrode."""

    engine: str
    knob: Knob
    governs: Finding
    overridden: tuple[Finding, ...] = ()

    @property
    def why(self) -> str:
        """`governed by R (reason); overrides S (raise → 48)`."""
        g = self.governs
        text = f"governed by {g.rule}"
        if not self.overridden:
            return text
        first = self.overridden[0]
        if first.direction != g.direction and g.direction is Direction.LOWER:
            reason = "lowering to stop OOM/preemption beats raising"
        elif first.direction != g.direction:
            reason = f"{_way(g)} beats {_way(first)}"
        elif first.severity != g.severity:
            reason = f"{g.severity.value} beats {first.severity.value}"
        else:
            reason = "the more cautious number"
        others = ", ".join(f"{o.rule} ({_way(o)}"
                           + (f" → {_show(o.recommended)}" if o.recommended is not None else "") + ")"
                           for o in self.overridden)
        return f"{text} ({reason}); overrides {others}"


def _way(f: Finding) -> str:
    return f.direction.value if f.direction is not None else "no direction"


def _show(x: float | str | None) -> str:
    if isinstance(x, float) and x.is_integer():
        return f"{x:.0f}"
    return str(x)


def reconcile(findings: Iterable[Finding]) -> list[Recommendation]:
    """The active findings as one recommendation per (engine, knob), by engine then precedence."""
    groups: dict[tuple[str, Knob], list[Finding]] = {}
    for f in findings:
        if f.active and f.knob is not None:
            groups.setdefault((f.engine, f.knob), []).append(f)
    out = []
    for (engine, knob), items in groups.items():
        ordered = sorted(items, key=lambda f: (rank(f), f.rule))
        out.append(Recommendation(engine, knob, ordered[0], tuple(ordered[1:])))
    return sorted(out, key=lambda r: (r.engine, rank(r.governs), r.knob.value))


@dataclass(frozen=True)
class Headline:
    """The one verdict of a set of findings: the most urgent category, its title, the finding behind it."""

    category: str
    title: str
    finding: Finding | None
    severity: str


def headline(findings: Iterable[Finding], categories: Mapping[str, str]) -> Headline | None:
    """The verdict the findings give (None: no finding): the category first in CATEGORY_ORDER among the
    findings (a rule's `category`, from `categories`), its governing finding by the precedence."""
    found = [f for f in findings]
    if not found:
        return None

    def order(f: Finding) -> tuple[int, tuple[int, int, float]]:
        cat = categories.get(f.rule, "config")
        return (CATEGORY_ORDER.index(cat) if cat in CATEGORY_ORDER else len(CATEGORY_ORDER)), rank(f)

    top = min(found, key=order)
    cat = categories.get(top.rule, "config")
    return Headline(cat, TITLES.get(cat, cat), top, top.severity.value)
