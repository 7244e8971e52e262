"""Computed budget vs what the engine itself reported at start-up, with the differences explained.

The paper budget uses an *estimated* overhead; the engine measures its own: a profiling forward pass
(activation peak, which grows with max_num_batched_tokens), non-torch memory (CUDA context, NCCL
buffers) and, from vLLM 0.21, CUDA-graph memory. Once the engine has spoken, its numbers are the truth
for live comparisons; this module shows where the paper plan was off and by how much.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.budget import GIB, Budget
from agent.records import CapacityFact

SIGNIFICANT = 0.03  # relative: under 3 % is rounding in the engine's two-decimal GiB lines
MEMORY_FLOOR = 0.1 * GIB  # absolute: memory differences under 0.1 GiB are noise, however small the total


@dataclass(frozen=True)
class Row:
    label: str
    unit: str  # "bytes", "tokens", "x" (concurrency), "ratio"
    computed: float | None
    engine: float | None

    @property
    def difference(self) -> float | None:
        if self.computed is None or self.engine is None:
            return None
        return self.engine - self.computed


@dataclass(frozen=True)
class Reconciliation:
    rows: tuple[Row, ...]
    explanations: tuple[str, ...]
    engine_max_concurrency: float | None
    engine_tokens_per_request: int | None


def latest(facts: Iterable[CapacityFact]) -> dict[str, float | str]:
    """The last value of each fact: after a restart the later start-up is the one running now."""
    out: dict[str, float | str] = {}
    for fact in facts:
        out[fact.name] = fact.value
    return out


def _num(facts: dict[str, float | str], name: str) -> float | None:
    value = facts.get(name)
    return float(value) if isinstance(value, int | float) else None


def _off(a: float | None, b: float | None, floor: float = MEMORY_FLOOR) -> bool:
    if a is None or b is None:
        return False
    return abs(a - b) > max(SIGNIFICANT * max(abs(a), abs(b)), floor)


def reconcile(budget: Budget, facts: dict[str, float | str]) -> Reconciliation:
    """Line the budget up against the engine's facts and explain each significant difference."""
    inputs = budget.inputs
    weights = _num(facts, "weights_bytes")
    kv_bytes = _num(facts, "kv_cache_bytes")
    requested = _num(facts, "requested_memory_bytes")
    util = _num(facts, "gpu_memory_utilization")
    if requested is None and util is not None:
        total = _num(facts, "total_gpu_memory_bytes") or inputs.vram_bytes
        requested = util * total
    activation = _num(facts, "activation_peak_bytes")
    non_torch = _num(facts, "non_torch_bytes")
    graphs = _num(facts, "cuda_graph_bytes")
    measured = [v for v in (activation, non_torch) if v is not None]
    overhead: float | None = sum(measured) if measured else None
    if overhead is None and weights is not None and kv_bytes is not None:
        # V1 prints no breakdown: what is neither weights nor KV cache is overhead. Without the engine's
        # own util × VRAM line, the one assumed here stands in (the note says so).
        overhead = (requested if requested is not None else budget.memory_for_instance_bytes) - weights - kv_bytes
    tokens = _num(facts, "kv_cache_tokens")
    blocks = _num(facts, "gpu_blocks")
    if tokens is None and blocks is not None:
        tokens = blocks * inputs.block_size
    per_token = kv_bytes / tokens if kv_bytes and tokens else None
    engine_conc = _num(facts, "max_concurrency")
    engine_len = _num(facts, "tokens_per_request") or _num(facts, "max_model_len")
    if engine_conc is None and tokens is not None and engine_len:
        engine_conc = tokens / engine_len
    per_gpu_weights = weights  # vLLM logs the weights each worker loaded, i.e. per GPU
    rows = (
        Row("util × VRAM", "bytes", budget.memory_for_instance_bytes, requested),
        Row("weights (per GPU)", "bytes", budget.weights_per_gpu_bytes, per_gpu_weights),
        Row("activations + framework overhead", "bytes", inputs.overhead_bytes, overhead),
        Row("usable KV cache", "bytes", budget.usable_kv_bytes, kv_bytes),
        Row("KV bytes per token (per GPU)", "bytes", budget.kv_bytes_per_token, per_token),
        Row("KV cache tokens", "tokens", budget.kv_cache_tokens, tokens),
        Row(f"max concurrency at {int(engine_len or inputs.tokens_per_request)} tokens", "x",
            budget.kv_cache_tokens / (engine_len or inputs.tokens_per_request), engine_conc),
    )
    return Reconciliation(rows, tuple(_explain(budget, rows, activation, non_torch, graphs, facts)),
                          engine_conc, int(engine_len) if engine_len else None)


def _explain(budget: Budget, rows: tuple[Row, ...], activation: float | None, non_torch: float | None,
             graphs: float | None, facts: dict[str, float | str]) -> list[str]:
    inputs = budget.inputs
    by = {r.label.split(" (")[0].split(" at ")[0]: r for r in rows}
    notes: list[str] = []
    mem, weights, over = by["util × VRAM"], by["weights"], by["activations + framework overhead"]
    kv, per_token = by["usable KV cache"], by["KV bytes per token"]
    if _off(mem.computed, mem.engine):
        notes.append(f"util × VRAM differs by {_delta(mem)}: the engine's card or "
                     "gpu_memory_utilization is not the one assumed here (pass --vram-gib / --util).")
    if _off(weights.computed, weights.engine):
        cause = "an estimate from the parameter count" if inputs.weights_estimated else "the value given"
        notes.append(f"weights differ by {_delta(weights)}: the computed figure is {cause}; the "
                     "engine measured what it loaded (quantization, tied embeddings, vision towers change it).")
    if _off(over.computed, over.engine):
        parts = []
        if activation is not None:
            parts.append(f"activation peak {_gib(activation)} (profiling forward pass; grows with "
                         "max_num_batched_tokens)")
        if non_torch is not None:
            parts.append(f"non-torch memory {_gib(non_torch)} (CUDA context, NCCL and allocator buffers)")
        if not parts:
            parts.append(f"{_gib(over.engine)} as util × VRAM − loaded weights − KV cache (V1 prints no breakdown; "
                         "activation peak, non-torch memory and CUDA graphs together)")
        notes.append(f"overhead differs by {_delta(over)}: the engine measured "
                     f"{'; '.join(parts)}, against the {_gib(over.computed)} assumed here.")
    if graphs is not None:
        notes.append(f"CUDA graphs took {_gib(graphs)} after profiling; vLLM before 0.21 does not subtract "
                     "it from the KV budget, so the real headroom is that much smaller.")
    if _off(per_token.computed, per_token.engine, floor=0):
        notes.append(f"KV bytes per token differ ({_fmt_bytes(per_token.computed)} computed, "
                     f"{_fmt_bytes(per_token.engine)} implied by the engine): the model shape, kv_cache_dtype "
                     f"({facts.get('kv_cache_dtype', inputs.kv_dtype.value)}) or tensor parallel size here "
                     "is not what the engine runs; check --model, --kv-dtype and --tp.")
    if _off(kv.computed, kv.engine) and kv.engine is not None:
        notes.append(f"usable KV cache differs by {_delta(kv)}; from now on the agent compares live "
                     "usage with the engine's own figure.")
    if not notes:
        notes.append("computed and engine-reported budgets agree (within 3 % or 0.1 GiB).")
    return notes


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value / GIB:.2f} GiB"


def _delta(row: Row) -> str:
    """Engine minus computed, signed, so '+1.20 GiB' reads 'the engine used 1.2 GiB more'."""
    return "?" if row.difference is None else f"{row.difference / GIB:+.2f} GiB"


def _fmt_bytes(value: float | None) -> str:
    return "?" if value is None else f"{value / 1024:.1f} KiB"
