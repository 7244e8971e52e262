"""Computed budget vs what the engine itself reported at start-up, with the differences explained.

The paper budget uses an *estimated* overhead; the engine measures its own: a profiling forward pass
(activation peak, which grows with max_num_batched_tokens), non-torch memory (CUDA context, NCCL
buffers) and, from vLLM 0.21, CUDA-graph memory. Once the engine has spoken, its numbers are the truth
for live comparisons; this module shows where the paper plan was off and by how much.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.capacity.budget import GIB, Budget
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


# Sizes every tensor-parallel rank prints for itself: the engine sizes the KV cache by the rank with the least
# memory left (vLLM takes the minimum over workers), and the heaviest rank's weights and graphs bind.
_PER_RANK_MIN = frozenset({"kv_cache_bytes"})
_PER_RANK_MAX = frozenset({"weights_bytes", "cuda_graph_estimate_bytes", "cuda_graph_bytes"})


def latest(facts: Iterable[CapacityFact]) -> dict[str, float | str]:
    """One value per fact for the start-up `startup_facts` kept (the last one in the file): the last value
    printed, except per-rank sizes, where the binding rank's (least KV memory, most weights) wins."""
    out: dict[str, float | str] = {}
    for fact in facts:
        before, value = out.get(fact.name), fact.value
        if isinstance(before, int | float) and isinstance(value, int | float):
            if fact.name in _PER_RANK_MIN:
                value = min(before, value)
            elif fact.name in _PER_RANK_MAX:
                value = max(before, value)
        out[fact.name] = value
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
    peak_torch = _num(facts, "peak_torch_bytes")
    if activation is None and peak_torch is not None and weights is not None:
        activation = max(0.0, peak_torch - weights)  # 0.6.2–0.6.4 print the torch peak with the weights in it
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
    required = _num(facts, "required_kv_bytes")
    fits = _num(facts, "estimated_max_model_len")
    failed_len = _num(facts, "max_model_len") if required is not None or fits is not None else None
    per_token: float | None = None
    if failed_len:
        # V1 refused to start: the estimated maximum model length is what the available KV memory holds, and
        # "X GiB KV cache is needed" for max_model_len tokens (when printed above 0.0 GiB) is the engine's own
        # per-token size. Token counts printed by an earlier, successful start belong to other settings.
        per_token = required / failed_len if required else None
        tokens = fits or tokens
    else:
        per_token = kv_bytes / tokens if kv_bytes and kv_bytes > 0 and tokens else None
    dcp = _num(facts, "dcp_world_size")
    if dcp and dcp > 1 and per_token is not None and required is None:
        # Decode context parallelism: each GPU keeps 1/dcp of every sequence, and vLLM multiplies the token
        # count it prints by dcp_world_size; the bytes per token each GPU stores are dcp times the ratio.
        per_token *= dcp
    engine_conc = _num(facts, "max_concurrency")
    engine_len = failed_len or _num(facts, "tokens_per_request") or _num(facts, "max_model_len")
    if failed_len and tokens:
        engine_conc = tokens / failed_len
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
    estimate = _num(facts, "cuda_graph_estimate_bytes")
    if estimate is not None:
        notes.append(f"the engine estimated {_gib(estimate)} of CUDA-graph memory per GPU during profiling and "
                     "already took it out of the KV budget (vLLM 0.21+), so it is part of the overhead above.")
    elif graphs is not None:
        notes.append(f"CUDA graphs took {_gib(graphs)} after profiling; vLLM before 0.21 does not subtract "
                     "it from the KV budget, so the real headroom is that much smaller.")
    if kv.engine is not None and kv.engine <= 0:
        notes.append(f"the engine had no memory left for the KV cache ({_gib(kv.engine)}): weights, activation "
                     "peak and non-torch memory already exceed util × VRAM, so it cannot start (\"No available "
                     "memory for the cache blocks\"). Raise --gpu-memory-utilization, quantize the weights, "
                     "lower max_num_batched_tokens / max_model_len, or add tensor parallelism.")
    required, fits = _num(facts, "required_kv_bytes"), _num(facts, "estimated_max_model_len")
    failed_len = _num(facts, "max_model_len") if required is not None or fits is not None else None
    if failed_len:
        need = (f"{_gib(required)} of KV cache, more than the {_gib(kv.engine)} available" if required
                else "more KV cache than is available (vLLM printed both sizes as 0.0 GiB: under 0.05 GiB)")
        notes.append(f"the engine refused to start: one request of max_model_len {int(failed_len)} needs {need}"
                     + (f"; the longest that fits is {int(fits)} tokens" if fits else "")
                     + ". Lower --max-model-len, use --kv-cache-dtype fp8, or free memory (util, TP, quantization).")
    dcp = _num(facts, "dcp_world_size")
    if dcp and dcp > 1:
        notes.append(f"decode context parallelism {int(dcp)}: the engine's token count is multiplied by {int(dcp)} "
                     "(each GPU holds a slice of every sequence), so KV cache tokens and concurrency are "
                     f"{int(dcp)}× what one GPU's memory alone gives; bytes per token are compared per GPU.")
    per_token_note = _per_token_note(budget, per_token, facts)
    if per_token_note:
        notes.append(per_token_note)
    if _off(kv.computed, kv.engine) and kv.engine is not None and kv.engine > 0:
        notes.append(f"usable KV cache differs by {_delta(kv)}; from now on the agent compares live "
                     "usage with the engine's own figure.")
    override = _num(facts, "num_gpu_blocks_override")
    if override is not None:
        notes.append(f"the engine's KV cache was fixed at {int(override)} blocks by --num-gpu-blocks-override, "
                     "whatever memory it found: its token count and concurrency are set by that flag, not by the "
                     "memory budget.")
    unexplained = [r for r in rows if _row_off(r) and r.unit in ("tokens", "x")]
    for row in unexplained:
        notes.append(f"{row.label}: computed {_value(row, row.computed)}, engine {_value(row, row.engine)} "
                     f"({_ratio(row)}); the engine's figure governs live comparisons.")
    if not notes and all(r.engine is None for r in rows if r.label != "util × VRAM"):
        notes.append("the log holds no capacity numbers to compare (only settings such as the model, max_model_len "
                     "or TP, which were used above); the engine's KV cache, weights or token lines are needed for a "
                     "check.")
    elif not notes and not any(_row_off(r) for r in rows):
        notes.append("computed and engine-reported budgets agree (within 3 % or 0.1 GiB).")
    return notes


def _row_off(row: Row) -> bool:
    """A row outside its tolerance: 3 % (and 0.1 GiB for memory); token and concurrency rows have no floor."""
    return _off(row.computed, row.engine, MEMORY_FLOOR if row.unit == "bytes" else 0.0)


def _value(row: Row, value: float | None) -> str:
    if value is None:
        return "?"
    if row.unit == "bytes":
        return _gib(value)
    return f"{value:,.2f}x" if row.unit == "x" else f"{value:,.0f}"


def _ratio(row: Row) -> str:
    """How far apart, as a factor a person reads at once: "2,045× fewer in the engine"."""
    if not row.computed or not row.engine or row.computed <= 0 or row.engine <= 0:
        return "no common scale"
    factor = row.computed / row.engine
    return f"{factor:,.1f}× fewer in the engine" if factor >= 1 else f"{1 / factor:,.1f}× more in the engine"


def _per_token_note(budget: Budget, row: Row, facts: dict[str, float | str]) -> str | None:
    """Why the engine's bytes per token differ from the shape's, naming the likeliest cause."""
    inputs, shape = budget.inputs, budget.inputs.shape
    computed, engine = row.computed, row.engine
    if computed is None or engine is None or engine <= 0:
        return None
    hybrid = facts.get("hybrid_block_size")
    if hybrid is not None:
        return (f"the engine runs a hybrid (attention + Mamba / linear-attention) model: it stretched the "
                f"attention block to {int(float(hybrid))} tokens to match the Mamba page, and its token count is "
                "derived from max concurrency × max_model_len, so KV bytes per token "
                f"({_fmt_bytes(engine)}) is not a per-token cost and cannot check the shape here.")
    if not _off(computed, engine, floor=0):
        return None
    ratio = computed / engine
    kv_dtype = facts.get("kv_cache_dtype", inputs.kv_dtype.value)
    head = (f"KV bytes per token differ ({_fmt_bytes(computed)} computed, {_fmt_bytes(engine)} implied by the "
            "engine): ")
    pp = facts.get("pipeline_parallel_size")
    if isinstance(pp, int | float) and pp > 1:
        return head + (f"the engine runs pipeline parallel {int(pp)}: each GPU holds only its stage's layers, so "
                       f"its bytes per token are about 1/{int(pp)} of the whole model's (uneven splits differ); "
                       "this budget does not model pipeline stages.")
    if shape.is_mla and str(kv_dtype).startswith("fp8_ds_mla"):
        return head + (f"the engine stores the MLA latent as fp8_ds_mla, 656 bytes per token per layer (fp8 latent "
                       f"+ scales + a 16-bit rope part), i.e. {_fmt_bytes(shape.layers * 656.0)} for {shape.layers} "
                       "layers, which no --kv-dtype here describes.")
    if shape.is_mla and ratio < 0.5:
        return head + (f"{shape.name} is an MLA model, but the engine caches full K and V per head — vLLM before "
                       "0.7.1 (or VLLM_MLA_DISABLE=1) ran DeepSeek-V2/V3 without MLA, so its KV cache is "
                       f"{1 / ratio:.0f}× larger than the latent this budget assumes.")
    if shape.sliding_layers:
        return head + (f"{shape.name} has {shape.sliding_layers} sliding-window layers; vLLM versions differ in "
                       "whether the token count covers them, so the per-token figure is not comparable. Compare "
                       "max concurrency instead.")
    for k in (2, 4, 8, 16):
        if abs(ratio - k) / k < SIGNIFICANT:
            causes = []
            if not shape.is_mla and shape.kv_heads % (inputs.tp * k) == 0:
                more = (f" (or more: past {shape.kv_heads} ranks the heads are replicated)"
                        if inputs.tp * k == shape.kv_heads else "")
                causes.append(f"the engine splits the KV heads over tensor parallel {inputs.tp * k}{more} "
                              f"(here {inputs.tp}): pass --tp {inputs.tp * k}")
            if k == 2 and inputs.kv_dtype.bytes == 2:
                causes.append("the engine stores the KV cache in fp8 (pass --kv-dtype fp8)")
            if causes:
                return head + f"{k}× fewer bytes per token than assumed; likely " + ", or ".join(causes) + "."
        if abs(1 / ratio - k) / k < SIGNIFICANT and inputs.tp % k == 0:
            return head + (f"{k}× more bytes per token than assumed; the engine runs tensor parallel "
                           f"{inputs.tp // k}, not {inputs.tp} (pass --tp {inputs.tp // k}).")
    return head + (f"the model shape, kv_cache_dtype ({kv_dtype}) or tensor parallel size here is not what the "
                   "engine runs; check --model, --kv-dtype and --tp.")


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value / GIB:.2f} GiB"


def _delta(row: Row) -> str:
    """Engine minus computed, signed, so '+1.20 GiB' reads 'the engine used 1.2 GiB more'."""
    return "?" if row.difference is None else f"{row.difference / GIB:+.2f} GiB"


def _fmt_bytes(value: float | None) -> str:
    return "?" if value is None else f"{value / 1024:.1f} KiB"
