"""The inverse question — "I need N concurrent streams: how?" — answered in the budget method's order.

1. Quantize the weights (AWQ/GPTQ 4-bit): the largest fixed cost, freeing the most memory.
2. FP8 KV cache: halves the bytes per token.
3. Cap max_model_len to the real workload (concurrency ∝ 1 / tokens per request).
Each step keeps the previous ones and stops as soon as N is reached. When the card cannot reach N
without cutting requests the workload needs, the plan says so and what tensor parallelism would give.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agent.capacity.budget import Budget, BudgetInputs, compute, estimate_weights_bytes
from agent.capacity.shapes import ModelShape
from agent.errors import BudgetError
from agent.records import KvDtype, WeightsDtype

TP_SIZES = (2, 4, 8)


@dataclass(frozen=True)
class PlanStep:
    """One step of the plan; `budget` is None when the model does not fit at all (`error` says why)."""

    action: str
    flag: str | None
    budget: Budget | None
    error: str | None = None

    @property
    def concurrency(self) -> int:
        return self.budget.max_concurrency if self.budget else 0


def _concurrency(inputs: BudgetInputs) -> int:
    return _step("", None, inputs).concurrency


def _step(action: str, flag: str | None, inputs: BudgetInputs) -> PlanStep:
    try:
        return PlanStep(action, flag, compute(inputs))
    except BudgetError as exc:
        return PlanStep(action, flag, None, str(exc))


@dataclass(frozen=True)
class TpOption:
    tp: int
    as_configured: int
    with_steps: int


@dataclass(frozen=True)
class Plan:
    target: int
    steps: tuple[PlanStep, ...]
    reached: bool
    reason: str
    tensor_parallel: tuple[TpOption, ...] = ()


def _with_params(shape: ModelShape, inputs: BudgetInputs) -> ModelShape:
    """A shape with a parameter count: the model's own, or inferred from the given weights and dtype."""
    if shape.params is not None:
        return shape
    per_param = (inputs.weights_dtype or WeightsDtype.BF16).bytes_per_param
    return replace(shape, params=int(inputs.weights_bytes / per_param))


def _longest_len_reaching(inputs: BudgetInputs, target: int) -> int | None:
    """The longest tokens-per-request (a block multiple) at which `target` sequences fit, or None."""
    block = inputs.block_size
    lo, hi = 1, inputs.tokens_per_request // block
    if hi < 1 or _concurrency(replace(inputs, tokens_per_request=block)) < target:
        return None
    while lo < hi:  # largest k with concurrency(k × block) ≥ target; concurrency falls as k grows
        mid = (lo + hi + 1) // 2
        if _concurrency(replace(inputs, tokens_per_request=mid * block)) >= target:
            lo = mid
        else:
            hi = mid - 1
    return lo * block


def plan(inputs: BudgetInputs, target: int, workload_tokens: int | None = None) -> Plan:
    """Apply the budget method's steps in order until `target` concurrent requests fit."""
    if target <= 0:
        raise BudgetError(f"target concurrency must be positive, got {target}")
    steps = [_step("as configured", None, inputs)]
    current = inputs
    if steps[-1].concurrency >= target:
        return Plan(target, tuple(steps), True, "already reached as configured")

    if not (current.weights_dtype and current.weights_dtype.is_4bit):
        shape = _with_params(current.shape, current)
        current = replace(current, shape=shape, weights_dtype=WeightsDtype.AWQ, weights_estimated=True,
                          weights_bytes=estimate_weights_bytes(shape, WeightsDtype.AWQ))
        steps.append(_step("quantize weights to 4-bit (AWQ/GPTQ checkpoint)", "--quantization awq", current))
        if steps[-1].concurrency >= target:
            return Plan(target, tuple(steps), True, "reached by quantizing the weights")

    if current.kv_dtype is not KvDtype.FP8:
        current = replace(current, kv_dtype=KvDtype.FP8)
        steps.append(_step("FP8 KV cache", "--kv-cache-dtype fp8", current))
        if steps[-1].concurrency >= target:
            return Plan(target, tuple(steps), True, "reached with 4-bit weights and FP8 KV cache")

    longest = _longest_len_reaching(current, target)
    fits = f"{target} sequences fit only at ≤ {longest} tokens per request" if longest else (
        f"even one {current.block_size}-token block per request does not give {target} sequences")
    if workload_tokens is not None:
        if workload_tokens < current.tokens_per_request:
            current = replace(current, tokens_per_request=workload_tokens)
            steps.append(_step(f"cap max_model_len to the workload's {workload_tokens} tokens",
                               f"--max-model-len {workload_tokens}", current))
            if steps[-1].concurrency >= target:
                return Plan(target, tuple(steps), True, "reached by capping max_model_len to the workload")
        return Plan(target, tuple(steps), False,
                    f"out of reach on this card: {fits}, below the workload's {workload_tokens} "
                    "(P95 input + max output)", _tensor_parallel(inputs, current, target))
    if longest is None:
        return Plan(target, tuple(steps), False, f"out of reach on this card: {fits}",
                    _tensor_parallel(inputs, current, target))
    steps.append(_step(f"cap max_model_len to {longest} tokens", f"--max-model-len {longest}",
                       replace(current, tokens_per_request=longest)))
    return Plan(target, tuple(steps), True,
                f"reached by capping max_model_len — only if every request (input + output) fits in {longest} "
                "tokens; pass --input-p95 and --max-output to check against the real workload",
                _tensor_parallel(inputs, current, target))


def _tensor_parallel(original: BudgetInputs, stepped: BudgetInputs, target: int) -> tuple[TpOption, ...]:
    """For each TP size the model allows: concurrency as configured, and with the plan's steps applied."""
    options = []
    for tp in TP_SIZES:
        heads = original.shape.attention_heads
        if heads is not None and heads % tp:
            continue
        plain = _concurrency(replace(original, tp=tp))
        with_steps = _concurrency(replace(stepped, tp=tp))
        options.append(TpOption(tp, plain, with_steps))
        if with_steps >= target:
            break
    return tuple(options)
