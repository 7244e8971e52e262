"""`advise`: the advisor replayed over a past window of a store — the daemon's judgement, after the fact.

The same rules, signals and hysteresis as the daemon's judge stage, stepped through `[since, until)` at
the rules' interval (coarser for long windows, at most `MAX_STEPS` steps), so a storm an hour ago is
found even though it has cleared since. Saved logs go through `agent.offline.load.load_logs` into a
store first (each file its own engine), so a log copied off a broken node gets the same advice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agent.capacity.capacity import Capacity, capacity_of, paper_budget
from agent.config import Config
from agent.judge.advisor import Advisor, engine_config, knobs_of
from agent.judge.rules import Rule
from agent.sinks.queries import Queries
from agent.verdicts import Finding

MAX_STEPS = 2000


@dataclass(frozen=True)
class Advice:
    """One finding of the replay: its last state while active, and when it cleared (None: still active)."""

    finding: Finding
    cleared_at: float | None = None


@dataclass
class Replay:
    """What `advise` found over a window, and what it judged."""

    since: float
    until: float
    engines: list[str]
    capacities: dict[str, Capacity]
    advice: list[Advice] = field(default_factory=list)
    workload_tokens: float | None = None  # P95 input + output cap, for the expected case (sizing.py)


def capacities(queries: Queries, config: Config | None, engines: list[str]) -> dict[str, Capacity]:
    """Each engine's capacity: the config's paper budget and the start-up figures it stored."""
    budget = paper_budget(config)
    facts = queries.latest_facts()
    return {e: capacity_of(budget, facts.get(e), e) for e in engines}


def replay(queries: Queries, rules: tuple[Rule, ...], config: Config | None, since: float | None = None,
           until: float | None = None, interval: float | None = None) -> Replay:
    """Step the advisor through the window (default: everything the store holds) and collect its findings."""
    span = queries.time_span()
    if span is None and (since is None or until is None):
        return Replay(since or 0.0, until or 0.0, [], {})
    start = since if since is not None else (span[0] if span else 0.0)
    if span is not None:  # nothing can be judged before the first record: a config rule is not "on" before it
        start = max(start, span[0])
    end = until if until is not None else (span[1] + 1.0 if span else start)
    engines = queries.engines()
    caps = capacities(queries, config, engines)
    step = interval if interval is not None else (config.rules.interval_seconds if config else 15.0)
    step = max(step, (end - start) / MAX_STEPS)
    advisor = Advisor(rules, step, knobs_of(config), log_findings=False)
    per_engine = engine_config(queries.latest_facts())
    latest: dict[tuple[str, str], Advice] = {}
    order: list[tuple[str, str]] = []
    steps = max(1, math.ceil((end - start) / step))
    for i in range(1, steps + 1):
        now = min(start + i * step, end)
        for f in advisor.step(now, queries, caps, engines, per_engine):
            key = (f.rule, f.engine)
            if f.active:
                if key not in latest:
                    order.append(key)
                latest[key] = Advice(f)
            elif key in latest:
                latest[key] = Advice(latest[key].finding, f.ts)
    return Replay(start, end, engines, caps, [latest[k] for k in order], knobs_of(config).get("workload_tokens"))


def evaluate_window(queries: Queries, config: Config | None, since: float, until: float) -> list[Finding]:
    """The advisor replayed over `[since, until)` with the shipped rules and the config's `rules.dirs`:
    each finding's last state, `active` False (and `ts` its clearing) when it cleared inside the window.
    What `report --log` shows, where nothing was stored; `advise` prints the same replay."""
    from dataclasses import replace

    from agent.config import shipped_rules_dir
    from agent.judge.rules import load_rules

    ruleset = load_rules([shipped_rules_dir(), *(config.rules.dirs if config else [])])
    result = replay(queries, ruleset.rules, config, since, until)
    return [a.finding if a.cleared_at is None else replace(a.finding, active=False, ts=a.cleared_at)
            for a in result.advice]


def rule_categories(config: Config | None) -> dict[str, str]:
    """Rule name → its category, for the shipped rules and the config's `rules.dirs` (the headline's
    vocabulary); empty when a rule file does not load (the surfaces then fall back to the events)."""
    from agent.config import shipped_rules_dir
    from agent.judge.rules import RuleError, load_rules

    try:
        ruleset = load_rules([shipped_rules_dir(), *(config.rules.dirs if config else [])])
    except RuleError:
        return {}
    return {r.name: r.category for r in ruleset.rules}
