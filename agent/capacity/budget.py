"""The KV-cache budget (docs/budget.md): the arithmetic, with every intermediate number kept for display.

    kv_bytes_per_token = 2 × layers × kv_heads_per_gpu × head_dim × kv_dtype_bytes   (K and V)
                         layers × (kv_lora_rank + qk_rope_head_dim) × bytes           (MLA: one latent)
    usable_kv_bytes    = util × VRAM − weights / tp − overhead                        (per GPU)
    blocks_per_request = ceil(tokens_per_request / block_size)                        (paged KV)
    max_concurrency    = floor(usable_kv_bytes / (kv_bytes_per_token × block_size × blocks_per_request))

Pure: no I/O, no clock. Sizes are bytes (ints) throughout; GiB only appear in the CLI's text.
Sliding-window layers hold at most `window` tokens plus one partly filled block per request, as vLLM's
`SlidingWindowSpec` does (the extra prefill chunk it also keeps is ignored: it is a few blocks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.capacity.shapes import ModelShape
from agent.errors import BudgetError
from agent.records import KvDtype, WeightsDtype

GIB = 1024**3
MIB = 1024**2
KIB = 1024


def estimate_weights_bytes(shape: ModelShape, dtype: WeightsDtype) -> int:
    """Weights from the parameter count: quantized layers at `dtype`, embeddings/LM head at 16 bit."""
    if shape.params is None:
        raise BudgetError(
            f"the weights of {shape.name} cannot be estimated (no parameter count): pass --weights-gib or --params-b"
        )
    embedding = shape.embedding_params or 0
    if dtype in (WeightsDtype.BF16, WeightsDtype.FP16):
        return shape.params * 2
    return int((shape.params - embedding) * dtype.bytes_per_param + embedding * 2)


@dataclass(frozen=True)
class BudgetInputs:
    """Everything the arithmetic depends on; `weights_bytes` is the whole model, split over `tp` GPUs."""

    shape: ModelShape
    vram_bytes: int
    util: float
    weights_bytes: int
    overhead_bytes: int
    tokens_per_request: int
    kv_dtype: KvDtype = KvDtype.AUTO
    block_size: int = 16
    tp: int = 1
    weights_dtype: WeightsDtype | None = None
    weights_estimated: bool = False

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.util <= 1:
            problems.append(f"util must be in (0, 1], got {self.util}")
        if self.vram_bytes <= 0:
            problems.append("VRAM must be positive")
        if self.weights_bytes < 0 or self.overhead_bytes < 0:
            problems.append("weights and overhead must not be negative")
        if self.tokens_per_request <= 0:
            problems.append(f"tokens per request must be positive, got {self.tokens_per_request}")
        if self.block_size <= 0:
            problems.append(f"block size must be positive, got {self.block_size}")
        if self.tp <= 0:
            problems.append(f"tensor parallel size must be positive, got {self.tp}")
        elif self.shape.attention_heads is not None and self.shape.attention_heads % self.tp:
            problems.append(
                f"tensor parallel size {self.tp} does not divide {self.shape.name}'s "
                f"{self.shape.attention_heads} attention heads"
            )
        if problems:
            raise BudgetError("; ".join(problems))


@dataclass(frozen=True)
class Budget:
    """The result, with each step of the arithmetic so that a person can check it by hand."""

    inputs: BudgetInputs
    memory_for_instance_bytes: int
    weights_per_gpu_bytes: int
    usable_kv_bytes: int
    kv_heads_per_gpu: int
    kv_bytes_per_token_layer: int
    kv_bytes_per_token: int
    block_bytes: int
    blocks_per_request: int
    kv_bytes_per_request: int
    kv_cache_blocks: int
    kv_cache_tokens: int
    max_concurrency: int
    max_concurrency_unrounded: float

    @property
    def max_model_len_that_fits(self) -> int:
        """The longest request one sequence could hold (vLLM's 'estimated maximum model length')."""
        return self.kv_cache_tokens


def _sliding_tokens(shape: ModelShape, tokens: int, block_size: int) -> int:
    """Tokens a sliding-window layer holds for one request: the window plus one partial block."""
    assert shape.sliding_window is not None
    if tokens <= shape.sliding_window:
        return math.ceil(tokens / block_size) * block_size
    return (math.ceil(shape.sliding_window / block_size) + 1) * block_size


def compute(inputs: BudgetInputs) -> Budget:
    """Compute the budget; raise BudgetError saying by how much the fixed costs overflow the card."""
    shape, tp = inputs.shape, inputs.tp
    memory = int(inputs.util * inputs.vram_bytes)
    weights_per_gpu = math.ceil(inputs.weights_bytes / tp)
    usable = memory - weights_per_gpu - inputs.overhead_bytes
    if usable <= 0:
        raise BudgetError(
            f"no memory left for the KV cache: weights per GPU ({weights_per_gpu / GIB:.2f} GiB) + overhead "
            f"({inputs.overhead_bytes / GIB:.2f} GiB) = {(weights_per_gpu + inputs.overhead_bytes) / GIB:.2f} GiB "
            f"exceed util × VRAM = {inputs.util:g} × {inputs.vram_bytes / GIB:.2f} GiB = {memory / GIB:.2f} GiB "
            f"by {-usable / GIB:.2f} GiB. Quantize the weights, raise util, or add tensor parallelism."
        )
    per_layer = shape.kv_bytes_per_token_layer(inputs.kv_dtype.bytes, tp)
    per_token = shape.layers * per_layer
    block = inputs.block_size
    tokens = inputs.tokens_per_request
    blocks_per_request = math.ceil(tokens / block)
    per_request = shape.full_layers * per_layer * blocks_per_request * block
    if shape.sliding_layers:
        per_request += shape.sliding_layers * per_layer * _sliding_tokens(shape, tokens, block)
    kv_blocks = usable // (per_token * block)
    exact_tokens = shape.full_layers * tokens
    if shape.sliding_layers:
        exact_tokens += shape.sliding_layers * min(tokens, shape.sliding_window or tokens)
    return Budget(
        inputs=inputs,
        memory_for_instance_bytes=memory,
        weights_per_gpu_bytes=weights_per_gpu,
        usable_kv_bytes=usable,
        kv_heads_per_gpu=shape.kv_heads_per_gpu(tp),
        kv_bytes_per_token_layer=per_layer,
        kv_bytes_per_token=per_token,
        block_bytes=per_token * block,
        blocks_per_request=blocks_per_request,
        kv_bytes_per_request=per_request,
        kv_cache_blocks=kv_blocks,
        kv_cache_tokens=kv_blocks * block,
        max_concurrency=usable // per_request,
        max_concurrency_unrounded=usable / (per_layer * exact_tokens),
    )
