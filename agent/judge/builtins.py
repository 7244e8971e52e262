"""The `to` calculators a rule's action names: each returns the recommended value and its arithmetic.

Built-ins are the only arithmetic rules can ask for, so a recommendation is always one of these
formulas over the evidence, the capacity and the configured value — never an expression a rule file
wrote. Each returns `(value, arithmetic)`; `(None, why)` when an input is missing, and the finding then
names the knob and the direction without a number. docs/rules.md lists them with their formulas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent.capacity.capacity import Capacity

KV_TARGET_RATIO = 0.90  # fill KV to this, not to 1.0: the headroom new prefills and the last block need


@dataclass(frozen=True)
class Context:
    """What a built-in may read: the window's evidence, the engine's capacity, the configured value."""

    evidence: Mapping[str, float | None]
    capacity: Capacity | None
    current: float | None
    factor: float = 1.0
    of: str | None = None
    config: Mapping[str, float | None] = field(default_factory=dict)


Result = tuple[float | None, str]


def _fmt(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:,.0f}" if abs(x) >= 100 or float(x).is_integer() else f"{x:.3g}"


def capacity_bound(ctx: Context) -> Result:
    """The governing max concurrency: the engine's figure once it printed one, else the paper budget."""
    cap = ctx.capacity
    if cap is None or cap.max_concurrency is None:
        return None, "no capacity known (config lacks the model/GPU and the engine printed no KV-cache size)"
    basis = cap.governs or "paper"
    text = f"capacity bound = {cap.max_concurrency} requests at {_fmt(cap.tokens_per_request)} tokens each ({basis}"
    if basis == "engine" and cap.engine_max_concurrency is not None:
        text += f": floor({cap.engine_max_concurrency:.2f}x)"
    if cap.paper_max_concurrency is not None and basis == "engine":
        text += f"; paper budget {cap.paper_max_concurrency}"
    return float(cap.max_concurrency), text + ")"


def scale_by_kv_headroom(ctx: Context) -> Result:
    """floor(running max × 0.90 ÷ KV p95), never above the capacity bound: what the observed KV use per
    request says fits with 10 % headroom."""
    running = ctx.evidence.get("running_max")
    kv = ctx.evidence.get("kv_usage_ratio_p95")
    if not running or not kv:
        return None, "needs running max and kv_usage_ratio p95 in the evidence"
    raw = math.floor(running * KV_TARGET_RATIO / kv)
    text = f"floor({_fmt(running)} running × {KV_TARGET_RATIO} ÷ KV p95 {kv:.2f}) = {raw}"
    bound, bound_text = capacity_bound(ctx)
    if bound is not None and raw > bound:
        return bound, f"{text}, capped at the {bound_text}"
    return float(max(raw, 1)), text


def kv_holds_at_observed_length(ctx: Context) -> Result:
    """floor(engine KV-cache tokens ÷ observed tokens per running request p95): how many requests of the
    length actually seen fit; falls back to scale_by_kv_headroom without the engine's KV size."""
    tokens = ctx.evidence.get("request_tokens_p95")
    cap = ctx.capacity
    kv_tokens = cap.engine_kv_cache_tokens if cap is not None else None
    if not tokens or not kv_tokens:
        return scale_by_kv_headroom(ctx)
    value = max(1, math.floor(kv_tokens * KV_TARGET_RATIO / tokens))
    return float(value), (f"floor({_fmt(kv_tokens)} KV tokens × {KV_TARGET_RATIO} ÷ {_fmt(tokens)} tokens per "
                          f"running request (p95)) = {value}")


def observed_plus_margin(ctx: Context) -> Result:
    """The evidence value `of` × `factor` (e.g. 1.2 for a 20 % margin), rounded up."""
    if ctx.of is None or ctx.evidence.get(ctx.of) is None:
        return None, f"no {ctx.of} observed in the window"
    observed = ctx.evidence[ctx.of]
    assert observed is not None
    value = math.ceil(observed * ctx.factor)
    return float(value), f"{ctx.of} {_fmt(observed)} × {ctx.factor:g} = {value}"


RAISE_STEP = 1.5  # observed_p99_plus_margin without a usable observation: the configured value × this


def latency_ms_plus_margin(ctx: Context) -> Result:
    """A latency in the evidence (`of`, seconds: e.g. `e2e_latency_seconds_p95`) × `factor`, in ms rounded up:
    a timeout that the requests actually seen fit in, with a margin."""
    name = ctx.of or "e2e_latency_seconds_p99"
    observed = ctx.evidence.get(name)
    if observed is None:
        return None, f"no {name} observed in the window (the engine's /metrics is not scraped)"
    value = math.ceil(observed * 1000.0 * ctx.factor)
    return float(value), f"{name} {observed:.3g} s × {ctx.factor:g} = {value:,} ms"


def observed_p99_plus_margin(ctx: Context) -> Result:
    """Raise a request timeout to what the requests that finished took: end-to-end p99 (scraped, `of` or
    `e2e_latency_seconds_p99`) × `factor`, in ms. Without a scraped p99, or when that is not above the
    configured value (requests the deadline cut short are missing from the engine's histogram), the
    configured value × 1.5."""
    value, text = latency_ms_plus_margin(ctx)
    if value is not None and (ctx.current is None or value > ctx.current):
        return value, text
    if ctx.current is None:
        return None, f"{text}; the current value is not configured" if value is not None else text
    step = float(round(ctx.current * RAISE_STEP))
    why = (f"{text} is not above the current {_fmt(ctx.current)} ms" if value is not None
           else text)
    return step, f"{why}: {_fmt(ctx.current)} × {RAISE_STEP:g} = {_fmt(step)}"


def scale_current(ctx: Context) -> Result:
    """The configured value × `factor` (above 1 raises, below 1 lowers), rounded."""
    if ctx.current is None:
        return None, "the knob's current value is not configured; set it in the config to get a number"
    raw = ctx.current * ctx.factor
    value = float(round(raw)) if ctx.current >= 10 else round(raw, 2)  # ratios keep two decimals
    return value, f"{_fmt(ctx.current)} × {ctx.factor:g} = {_fmt(value)}"


def engine_figure(ctx: Context) -> Result:
    """The engine's own max concurrency, shown beside the paper's (for the review of the inputs)."""
    cap = ctx.capacity
    if cap is None or cap.engine_max_concurrency is None:
        return None, "the engine reported no capacity"
    ratio = cap.disagreement_ratio
    return float(cap.max_concurrency or 0), (
        f"engine {cap.engine_max_concurrency:.2f}x vs paper {cap.paper_max_concurrency} at "
        f"{_fmt(cap.tokens_per_request)} tokens per request ({(ratio or 0) * 100:+.0f} %)")


def budget_tokens_per_request(ctx: Context) -> Result:
    """The tokens per request the budget was sized for: a session longer than this breaks the bound."""
    cap = ctx.capacity
    if cap is None or not cap.tokens_per_request:
        return None, "the budget's tokens per request is not known"
    return float(cap.tokens_per_request), (f"the budget assumes {cap.tokens_per_request:,} tokens per request; "
                                           f"capacity {cap.max_concurrency} holds only at that length")


BUILTINS: dict[str, Callable[[Context], Result]] = {
    "capacity_bound": capacity_bound,
    "scale_by_kv_headroom": scale_by_kv_headroom,
    "kv_holds_at_observed_length": kv_holds_at_observed_length,
    "observed_plus_margin": observed_plus_margin,
    "observed_p99_plus_margin": observed_p99_plus_margin,
    "latency_ms_plus_margin": latency_ms_plus_margin,
    "scale_current": scale_current,
    "engine_figure": engine_figure,
    "budget_tokens_per_request": budget_tokens_per_request,
}
