"""The advisor: every rule over every engine's window, with hysteresis and cooldown, into Findings.

`evaluate(rule, window)` is pure: it reads the window's aggregates, compares, and returns a `Verdict`
(matched or not, the evidence, the recommendation with its arithmetic). `Advisor.step(now, …)` keeps
one small state per (rule, engine) and returns only the Findings that changed: activation (once; the
log says it once), a changed recommendation, and clearing — after `clear_after` evaluations in a row
without a match (hysteresis), then no re-firing for `cooldown` seconds. So a finding neither flaps at a
threshold nor repeats every tick; the store keeps the history, the exporter the active set.
"""

from __future__ import annotations

import bisect
import logging
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.capacity.capacity import Capacity
from agent.config import Config
from agent.judge.builtins import BUILTINS, Context
from agent.judge.knobs import native
from agent.judge.messages import fill, placeholders
from agent.judge.rules import Condition, Group, Rule, SampleCondition
from agent.judge.signals import Window, references
from agent.judge.together import TogetherTest
from agent.judge.vocabulary import ref_key
from agent.records import Server
from agent.sinks.queries import Queries
from agent.verdicts import Finding

log = logging.getLogger("deepinfer.advisor")

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}


@dataclass(frozen=True)
class Verdict:
    """One rule on one engine's window: whether it matched, the numbers, and what it recommends."""

    matched: bool
    evidence: dict[str, float | None]
    current: float | None = None
    recommended: float | None = None
    arithmetic: str = ""
    message: str = ""


def _holds(node: Group | Condition, window: Window, rule: Rule, evidence: dict[str, float | None]) -> bool:
    if isinstance(node, Group):
        if node.same_sample is not None:
            return _joint(node, window, evidence)
        if node.together is not None:
            return _together(node, window, evidence)
        results = [_holds(item, window, rule, evidence) for item in (node.all or node.any or [])]
        return all(results) if node.all is not None else any(results)
    lhs = window.value(node, rule.min_samples)
    evidence[node.key] = _round(lhs)
    rhs = node.value if node.value is not None else window.refs.get(node.ref or "")
    if node.ref is not None:
        evidence[ref_key(node.ref)] = _round(rhs)
    if lhs is None or rhs is None:
        return False
    return _OPS[node.op](lhs, rhs * node.factor)


def _joint(group: Group, window: Window, evidence: dict[str, float | None]) -> bool:
    """A `same_sample` group: the samples where every test held, and each signal's range inside them."""
    tests = group.same_sample or []

    def compare(test: SampleCondition, value: float) -> bool:
        rhs = test.value if test.value is not None else window.refs.get(test.ref or "")
        return rhs is not None and _OPS[test.op](value, rhs * test.factor)

    matched = window.joint(tests, compare)
    evidence[f"{group.as_}_samples"] = float(len(matched))
    for test in tests:
        if test.ref is not None:
            evidence[ref_key(test.ref)] = _round(window.refs.get(test.ref))
        values = [m[test.signal] for m in matched]
        evidence[f"{group.as_}_{test.signal}_max"] = _round(max(values)) if values else None
        evidence[f"{group.as_}_{test.signal}_min"] = _round(min(values)) if values else None
    return len(matched) >= group.at_least


def _together(group: Group, window: Window, evidence: dict[str, float | None]) -> bool:
    """A `together` group: the points where the first test holds at which every other test holds at its
    stream's nearest point (the earlier on a tie), no more than `within` seconds away — the state *at* that
    moment, not the best of a neighbourhood. `<as>_matches` counts them (an event its occurrences); each
    series test's values at the partner points give its range, each event test its occurrences taken part."""
    tests = group.together or []
    within = group.within or 0.0

    def holds(test: TogetherTest, value: float) -> bool:
        if test.is_event:
            return True
        rhs = test.value if test.value is not None else window.refs.get(test.ref or "")
        return test.op is not None and rhs is not None and _OPS[test.op](value, rhs * test.factor)

    points = [window.points(t) for t in tests]
    times = [[ts for ts, _ in p] for p in points]
    used: list[dict[float, float]] = [{} for _ in tests]  # per test: time → value of the points taken part
    matches = 0.0
    for ts, value in points[0]:
        if not holds(tests[0], value):
            continue
        partners: list[tuple[float, float]] = []
        for j in range(1, len(tests)):
            near = _nearest(times[j], ts)
            if near is None or abs(times[j][near] - ts) > within or not holds(tests[j], points[j][near][1]):
                break
            partners.append(points[j][near])
        else:
            matches += value if tests[0].is_event else 1.0
            used[0][ts] = used[0].get(ts, 0.0) + value if tests[0].is_event else value
            for j, (pt, pv) in enumerate(partners, start=1):
                used[j][pt] = pv
    evidence[f"{group.as_}_matches"] = _round(matches)
    for test, taken in zip(tests, used, strict=True):
        if test.ref is not None:
            evidence[ref_key(test.ref)] = _round(window.refs.get(test.ref))
        values = list(taken.values())
        if test.is_event:
            evidence[f"{group.as_}_{test.key}_count"] = _round(sum(values))
        else:
            evidence[f"{group.as_}_{test.key}_max"] = _round(max(values)) if values else None
            evidence[f"{group.as_}_{test.key}_min"] = _round(min(values)) if values else None
    return matches > 0 and matches >= group.at_least


def _nearest(times: Sequence[float], ts: float) -> int | None:
    """The index of the time in sorted `times` nearest to `ts` (None when empty)."""
    if not times:
        return None
    i = bisect.bisect_left(times, ts)
    if i == 0:
        return 0
    if i == len(times):
        return i - 1
    return i if times[i] - ts < ts - times[i - 1] else i - 1


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def evaluate(rule: Rule, window: Window) -> Verdict:
    """Compare, and on a match compute the action's value with its built-in."""
    evidence: dict[str, float | None] = {}
    matched = _holds(rule.when, window, rule, evidence)
    for extra in rule.observe:
        evidence[extra.key] = _round(window.value(extra, rule.min_samples))
    current = window.refs.get(f"config.{rule.action.knob.value}")
    if not matched:
        return Verdict(False, evidence, current)
    recommended, arithmetic = None, ""
    if rule.action.to is not None:
        ctx = Context(evidence, window.capacity, current, rule.action.factor, rule.action.of, window.refs)
        recommended, arithmetic = BUILTINS[rule.action.to](ctx)
    cap = window.capacity
    values: dict[str, float | None] = {ref_key(k): v for k, v in window.refs.items()}
    for name in placeholders(rule.message):  # a reference the message quotes is evidence too: recomputable
        if name in values and name not in evidence:
            evidence[name] = _round(values[name])
    values.update(evidence)
    values.update({"from": current, "to": recommended})
    words: dict[str, str | None] = {"engine": window.engine, "knob": rule.action.knob.value,
                                    "flag": native(window.server, rule.action.knob),
                                    "governs": cap.governs if cap else None}
    message = fill(rule.message, values, words)
    return Verdict(True, evidence, current, recommended, arithmetic, message)


@dataclass
class _State:
    active: Finding | None = None
    misses: int = 0
    cleared_at: float = -math.inf


@dataclass
class Advisor:
    """Rules over engines, stepped by the daemon every `interval` seconds (or replayed by `advise`)."""

    rules: Sequence[Rule]
    interval: float = 15.0
    config: Mapping[str, float | None] = field(default_factory=dict)
    log_findings: bool = True  # the daemon logs each new finding once; a replay (`advise`) prints instead
    _state: dict[tuple[str, str], _State] = field(default_factory=dict)
    _servers: dict[str, Server] = field(default_factory=dict)
    _due: float = -math.inf

    def due(self, now: float) -> bool:
        return now >= self._due

    def active(self) -> list[Finding]:
        """The findings active now, by rule then engine."""
        return sorted((s.active for s in self._state.values() if s.active is not None),
                      key=lambda f: (f.rule, f.engine))

    def restore(self, findings: Iterable[Finding]) -> None:
        """Take back the findings a previous run left active (from the store), so a restart neither
        re-logs nor re-stores them; they clear the usual way once their rule stops matching."""
        names = {r.name for r in self.rules}
        for f in findings:
            if f.active and f.rule in names:
                self._state.setdefault((f.rule, f.engine), _State()).active = f

    def replace_rules(self, rules: Sequence[Rule]) -> list[Finding]:
        """Swap the rule set (SIGHUP); findings of rules that vanished are cleared (returned to store)."""
        names = {r.name for r in rules}
        self.rules = tuple(rules)
        self._due = -math.inf
        gone: list[Finding] = []
        for key in [k for k in self._state if k[0] not in names]:
            held = self._state.pop(key).active
            if held is not None:
                gone.append(_cleared(held, held.ts))
        return gone

    def step(self, now: float, queries: Queries, capacities: Mapping[str, Capacity],
             engines: Iterable[str] | None = None, config: Mapping[str, Mapping[str, float | None]] | None = None,
             ) -> list[Finding]:
        """Judge every rule on every engine at `now`; return the Findings whose state changed."""
        self._due = now + self.interval
        changed: list[Finding] = []
        for engine in sorted(set(engines if engines is not None else queries.engines())):
            cap = capacities.get(engine)
            refs = references(cap, effective(self.config, (config or {}).get(engine, {})))
            server = self._server(queries, engine)
            for rule in self.rules:
                window = Window(queries, engine, now - rule.window, now, cap, refs, server)
                verdict = evaluate(rule, window)
                found = self._transition(rule, engine, verdict, now)
                if found is not None:
                    changed.append(found)
        return changed

    def _server(self, queries: Queries, engine: str) -> Server | None:
        """Which engine software a source runs (its stats' or events' server), remembered once known."""
        if engine not in self._servers:
            stats = queries.latest_stats(engine).get(engine)
            found = stats.server if stats is not None else next(
                (Server(srv) for src, srv, _ in queries.event_totals() if src == engine
                 and srv in {s.value for s in Server}), None)
            if found is None:
                return None
            self._servers[engine] = found
        return self._servers[engine]

    def _transition(self, rule: Rule, engine: str, verdict: Verdict, now: float) -> Finding | None:
        state = self._state.setdefault((rule.name, engine), _State())
        held = state.active
        if verdict.matched:
            state.misses = 0
            if held is None:
                if now - state.cleared_at < rule.cooldown:
                    return None
                state.active = _finding(rule, engine, verdict, now, now)
                if self.log_findings:
                    log.warning("finding %s on %s: %s", rule.name, engine, verdict.message)
                return state.active
            if (held.recommended, held.current, held.message) != (verdict.recommended, verdict.current,
                                                                  verdict.message):
                # the finding follows its evidence while it stays active: "8 503" does not stay 8 at 94
                state.active = _finding(rule, engine, verdict, now, held.since)
                return state.active
            return None
        if held is None:
            return None
        state.misses += 1
        if state.misses < rule.clear_after:
            return None
        state.active, state.misses, state.cleared_at = None, 0, now
        if self.log_findings:
            log.info("finding %s on %s cleared", rule.name, engine)
        return _cleared(held, now)


def _finding(rule: Rule, engine: str, v: Verdict, now: float, since: float) -> Finding:
    return Finding(ts=now, since=since, rule=rule.name, engine=engine, severity=rule.severity, message=v.message,
                   knob=rule.action.knob, direction=rule.action.direction, current=v.current,
                   recommended=v.recommended, evidence=dict(v.evidence), arithmetic=v.arithmetic,
                   window_seconds=rule.window, active=True)


def _cleared(held: Finding, now: float) -> Finding:
    return Finding(ts=now, since=held.since, rule=held.rule, engine=held.engine, severity=held.severity,
                   message=f"cleared: {held.message}", knob=held.knob, direction=held.direction,
                   current=held.current, recommended=held.recommended, evidence=held.evidence,
                   arithmetic=held.arithmetic, window_seconds=held.window_seconds, active=False)


def knobs_of(config: Config | None) -> dict[str, float | None]:
    """The config's knob values as floats (None unset), for `config.*` references and a finding's `from`."""
    if config is None:
        return {}
    s, lim, ses = config.server, config.limits, config.session
    values: dict[str, float | int | None] = {
        "max_num_seqs": s.max_num_seqs, "max_queue_size": s.max_queue_size, "max_model_len": s.max_model_len,
        "gpu_memory_utilization": s.gpu_memory_fraction, "request_timeout_ms": lim.request_timeout_ms,
        "queue_timeout_ms": lim.queue_timeout_ms, "max_output_tokens": lim.max_output_tokens,
        "max_session_tokens": ses.max_session_tokens}
    p95, cap = config.workload.input_p95_tokens, lim.max_output_tokens
    values["workload_tokens"] = p95 + cap if p95 is not None and cap is not None else None  # sizing.py
    return {k: (float(v) if v is not None else None) for k, v in values.items()}


ENGINE_KNOBS = ("max_num_seqs", "max_model_len", "gpu_memory_utilization", "max_batch_prefill_tokens")
# Start-up figures a built-in may read (as `engine.<name>`): the engine's own measurements.
ENGINE_FIGURES = ("estimated_max_model_len", "total_gpu_memory_bytes", "non_kv_cache_bytes", "kv_cache_tokens",
                  "kv_cache_bytes", "weights_bytes", "device_free_bytes", "kv_buffer_failed_bytes",
                  "compute_buffer_failed_bytes")


def engine_config(facts: Mapping[str, Mapping[str, float | str]]) -> dict[str, dict[str, float | None]]:
    """Per engine: the knob values it reported itself at start-up (max_num_seqs, …) and the figures it
    measured (`engine.<name>`)."""
    out: dict[str, dict[str, float | None]] = {}
    for engine, values in facts.items():
        for name in (*ENGINE_KNOBS, *ENGINE_FIGURES):
            v = values.get(name)
            if isinstance(v, int | float) and not isinstance(v, bool):
                out.setdefault(engine, {})[name if name in ENGINE_KNOBS else f"engine.{name}"] = float(v)
    return out


def effective(file: Mapping[str, float | None], engine: Mapping[str, float | None]) -> dict[str, float | None]:
    """The knob values in force: what the engine reported it runs with beats the config file (it was
    restarted with other flags, or the file was never applied); the file's values stay as `file.<knob>`
    so a rule can say they disagree."""
    out: dict[str, float | None] = dict(file)
    for name, value in file.items():
        out[f"file.{name}"] = value
    for name, value in engine.items():
        if value is not None:
            out[name] = value
    return out
