"""One answer to "how many requests can this engine hold at once": the `Capacity` everything else reads.

Two figures exist: the paper budget (the arithmetic of docs/budget.md over the config's inputs) and
what the engine itself reported at start-up (its KV-cache size in tokens, or its "maximum
concurrency" line). They are compared at the same request length, the paper's tokens per request.
Which governs: **the engine's**, whenever it reported one — it measured its own weights, activation
peak and framework overhead on the real card, where the paper used estimates; the paper figure governs
only until the engine has spoken (or for an engine that prints no capacity lines). A disagreement of
more than 10 % is itself worth a finding (the rule `capacity_disagrees` in rules/default.yaml holds the
threshold): one of the paper's inputs is not what the engine runs with. `status`, the advisor and
`report` all read this and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent.capacity.budget import Budget, compute
from agent.capacity.inputs import SizingRequest, resolve
from agent.capacity.reconcile import reconcile
from agent.config import Config
from agent.errors import AgentError

Basis = Literal["engine", "paper"]


@dataclass(frozen=True)
class Capacity:
    """Concurrent requests of `tokens_per_request` tokens one engine holds, by the paper and by the engine.

    `paper_max_concurrency` is the budget's floor; `engine_max_concurrency` is the engine's own figure
    re-stated at the same request length (fractional, as engines print it). None where unknown.
    """

    engine: str | None
    tokens_per_request: int | None
    paper_max_concurrency: int | None = None
    engine_max_concurrency: float | None = None
    engine_kv_cache_tokens: float | None = None
    usable_kv_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    block_size: int = 16
    vram_bytes: int | None = None  # the paper budget's card, per GPU
    fixed_bytes: int | None = None  # the paper budget's weights per GPU + overhead: what is not KV cache

    @property
    def governs(self) -> Basis | None:
        """Which figure is the truth for live comparisons: the engine's once it reported one."""
        if self.engine_max_concurrency is not None:
            return "engine"
        return "paper" if self.paper_max_concurrency is not None else None

    @property
    def max_concurrency(self) -> int | None:
        """The governing figure, whole requests (an engine's 1.30x holds one request, not 1.3)."""
        if self.engine_max_concurrency is not None:
            return max(0, math.floor(self.engine_max_concurrency + 1e-9))
        return self.paper_max_concurrency

    @property
    def disagreement_ratio(self) -> float | None:
        """engine ÷ paper − 1 (negative: the engine holds less than the paper said); None without both."""
        if self.engine_max_concurrency is None or not self.paper_max_concurrency:
            return None
        return self.engine_max_concurrency / self.paper_max_concurrency - 1.0

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON and the exporter: both figures, which governs, and the disagreement."""
        return {"engine": self.engine, "tokens_per_request": self.tokens_per_request,
                "paper_max_concurrency": self.paper_max_concurrency,
                "engine_max_concurrency": self.engine_max_concurrency, "max_concurrency": self.max_concurrency,
                "governs": self.governs, "disagreement_ratio": self.disagreement_ratio,
                "engine_kv_cache_tokens": self.engine_kv_cache_tokens, "usable_kv_bytes": self.usable_kv_bytes,
                "kv_bytes_per_token": self.kv_bytes_per_token}


def paper_budget(config: Config | None) -> Budget | None:
    """The budget the config implies, or None when it lacks the inputs (the agent still watches)."""
    return budget_or_reason(config)[0]


def budget_or_reason(config: Config | None) -> tuple[Budget | None, str | None]:
    """The budget the config implies, or why there is none (the missing or unusable input, in the words the
    sizing gave: "weights could not be estimated …" is not "the config lacks the model")."""
    if config is None:
        return None, "no config"
    try:
        return compute(resolve(SizingRequest(), config).inputs), None
    except AgentError as exc:
        return None, str(exc)


def _number(facts: Mapping[str, float | str], name: str) -> float | None:
    value = facts.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _engine_tokens(facts: Mapping[str, float | str], block: int) -> float | None:
    """The KV tokens the engine holds: what a failed start said fits (`estimated maximum model length`: one
    block is kept back, so it is below blocks × block size), else the printed size, else blocks × block size."""
    return (_number(facts, "estimated_max_model_len") or _number(facts, "kv_cache_tokens")
            or (_number(facts, "gpu_blocks") or 0) * block or None)


def capacity_of(budget: Budget | None, facts: Mapping[str, float | str] | None = None,
                engine: str | None = None) -> Capacity:
    """The paper `budget` and one engine's start-up `facts` (name → value) as one Capacity.

    The engine's figure is re-stated at the paper's request length: from its KV-cache size in tokens
    (block-rounded, as it allocates), or from its printed concurrency scaled by the length it printed it
    for. Without a paper budget, the engine's figure stands at the length it used itself.
    """
    facts = facts or {}
    block = int(_number(facts, "block_size") or (budget.inputs.block_size if budget else 16))
    if budget is not None:
        tokens_per_request: int | None = budget.inputs.tokens_per_request
        paper: int | None = budget.max_concurrency
        engine_conc = reconcile(budget, dict(facts)).engine_max_concurrency if facts else None
        engine_len = _number(facts, "tokens_per_request") or _number(facts, "max_model_len")
        kv_tokens = _engine_tokens(facts, block)
        if kv_tokens and tokens_per_request:
            engine_conc = kv_tokens / (math.ceil(tokens_per_request / block) * block)
        elif engine_conc is not None and engine_len and tokens_per_request:
            engine_conc = engine_conc * engine_len / tokens_per_request
        return Capacity(engine, tokens_per_request, paper, engine_conc, kv_tokens, budget.usable_kv_bytes,
                        budget.kv_bytes_per_token, block, budget.inputs.vram_bytes,
                        budget.weights_per_gpu_bytes + budget.inputs.overhead_bytes)
    engine_len = _number(facts, "tokens_per_request") or _number(facts, "max_model_len")
    kv_tokens = _engine_tokens(facts, block)
    engine_conc = _number(facts, "max_concurrency")
    if engine_conc is None and kv_tokens and engine_len:
        engine_conc = kv_tokens / engine_len
    return Capacity(engine, int(engine_len) if engine_len else None, None, engine_conc, kv_tokens, block_size=block)
