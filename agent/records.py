"""Records that cross module boundaries. Frozen, typed, `None` for missing, units in the field names.

Only the records the current modules exchange live here; the tailer, parsers and sinks add theirs as
they arrive, so nothing here is unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Server(str, Enum):
    """Inference servers the parsers understand; `auto` detects from the first lines."""

    AUTO = "auto"
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"


# The closed vocabulary of capacity facts an engine reports at start-up. Sizes in bytes, ratios 0–1.
FACT_NAMES = frozenset({
    "model", "quantization", "kv_cache_dtype", "block_size", "tensor_parallel_size", "max_model_len",
    "max_num_seqs", "gpu_memory_utilization", "total_gpu_memory_bytes", "requested_memory_bytes",
    "weights_bytes", "activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes", "non_kv_cache_bytes",
    "kv_cache_bytes", "kv_cache_tokens", "gpu_blocks", "cpu_blocks", "max_concurrency", "tokens_per_request",
    "required_kv_bytes", "estimated_max_model_len",
})


@dataclass(frozen=True)
class CapacityFact:
    """One start-up number an engine printed, e.g. `kv_cache_tokens = 176240`.

    `ts` is epoch seconds when the line carried a usable time (None otherwise); `source` names where
    the line came from (a path, a unit, `-` for stdin).
    """

    ts: float | None
    source: str
    name: str
    value: float | str

    def __post_init__(self) -> None:
        if self.name not in FACT_NAMES:
            raise ValueError(f"unknown capacity fact {self.name!r}")
