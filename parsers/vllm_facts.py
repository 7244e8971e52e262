"""vLLM's start-up capacity facts: the sizes a line states (KV cache, weights, blocks, memory profile) and the
engine arguments of its config dump, whatever the era (facts match anywhere in the message).

Kept apart from the parser (parsers/vllm.py), which asks `line_facts` for each line that is not a stats
line or a request log. vLLM prints sizes in GiB ("GB" in 0.4–0.7 divides by 2**30 too), so sizes are
rebuilt as bytes and carry that rounding.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator

from parsers.signature import hot

GIB = 1024**3
_NUM = r"(\d[\d,]*(?:\.\d+)?)"
_SNUM = r"(-?\d[\d,]*(?:\.\d+)?)"  # signed: V0 prints a negative KV budget when nothing is left


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _gib(text: str) -> int:
    return round(_num(text) * GIB)


def _printed_gib(text: str) -> int | None:
    """A size vLLM printed to 0.1 GiB: "0.0 GiB" means below 0.05 GiB (a small model's whole KV cache), not
    zero, so it states nothing (None) rather than "no memory left"."""
    value = _num(text)
    return round(value * GIB) if value > 0 else None


# (fact name, pattern, converter of group 1); several facts may come from one line.
_Conv = Callable[[str], float | str | None]  # None: the line's number says nothing (below print precision)
_FACTS: tuple[tuple[str, str, _Conv], ...] = (
    ("kv_cache_tokens", r"\b(?:GPU|CUDA|[XNHT]PU|CPU)(?: \+ host)? KV cache size: " + _NUM + " tokens", _num),
    ("tokens_per_request", r"Maximum concurrency for " + _NUM + r" tokens per request", _num),
    ("max_concurrency", r"Maximum concurrency for [\d,]+ tokens per request: " + _NUM + r"x", _num),
    ("gpu_blocks", r"# (?:GPU|cuda|CUDA|gpu) blocks: " + _NUM, _num),
    ("cpu_blocks", r"# CPU blocks: " + _NUM, _num),
    ("gpu_blocks", r"with initialization after num_gpu_blocks is: " + _NUM, _num),
    ("weights_bytes", r"(?:Model loading took|Loading model weights took) " + _NUM + r" ?Gi?B", _gib),
    ("kv_cache_bytes", r"Available KV cache memory: " + _NUM + r" ?GiB", _gib),
    ("kv_cache_bytes", r"the rest of the memory reserved for KV Cache is " + _SNUM + r" ?GiB", _gib),
    # 0.6.2 – 0.6.4 V0: one `Memory profiling results: key=valueGiB …` line (space- or comma-separated).
    ("total_gpu_memory_bytes", r"Memory profiling results:.*?\btotal_gpu_memory=" + _NUM + r" ?GiB", _gib),
    ("peak_torch_bytes", r"Memory profiling results:.*?\bpeak_torch_memory=" + _NUM + r" ?GiB", _gib),
    ("non_torch_bytes", r"Memory profiling results:.*?\bnon_torch_memory=" + _NUM + r" ?GiB", _gib),
    ("kv_cache_bytes", r"Memory profiling results:.*?\bkv_cache_size=" + _SNUM + r" ?GiB", _gib),
    ("gpu_memory_utilization", r"Memory profiling results:.*?\bgpu_memory_utilization=" + _NUM, _num),
    # 0.21+: CUDA-graph memory estimated during profiling and taken out of the KV budget (per rank).
    ("cuda_graph_estimate_bytes", r"Estimated CUDA graph memory: " + _NUM + r" ?GiB", _gib),
    # Hybrid attention + Mamba models: the attention block is stretched to the Mamba page (0.11+).
    ("hybrid_block_size", r"Setting attention block size to " + _NUM + r" tokens to ensure", _num),
    ("dcp_world_size", r"Multiplying the GPU KV cache size by the dcp_world_size " + _NUM, _num),
    # V0 and V1 alike: nothing was left for the KV cache (the numbers, if any, came on earlier lines).
    ("kv_cache_bytes", r"(No) available memory for the cache blocks", lambda _: 0),
    # 0.19+ start-up logo: `█▄█▀ █ … █  model   <name or path>` names the served model.
    ("model", r"█  model\s+(\S+)\s*$", str),
    ("total_gpu_memory_bytes", r"total_gpu_memory \(" + _NUM + r" ?GiB\)", _gib),
    ("gpu_memory_utilization", r"x gpu_memory_utilization \(" + _NUM + r"\)", _num),
    ("requested_memory_bytes", r"x gpu_memory_utilization \([\d.]+\) = " + _NUM + r" ?GiB", _gib),
    ("weights_bytes", r"model weights take " + _NUM + r" ?GiB", _gib),
    ("weights_bytes", r"; weights memory: " + _NUM + r" ?GiB", _gib),
    # the Gaudi fork's HPU runner (vllm/worker/hpu_model_runner.py, HabanaModelRunner.load_model)
    ("weights_bytes", r"Pre-loading model weights on \S+ took " + _NUM + r" ?GiB of device memory", _gib),
    ("non_torch_bytes", r"non_torch_memory takes " + _NUM + r" ?GiB", _gib),
    ("non_torch_bytes", r"non-torch forward increase memory: " + _NUM + r" ?GiB", _gib),
    ("activation_peak_bytes", r"PyTorch activation peak memory takes " + _NUM + r" ?GiB", _gib),
    ("activation_peak_bytes", r"torch peak memory increase: " + _NUM + r" ?GiB", _gib),
    ("non_kv_cache_bytes", r"Total non KV cache memory: " + _NUM + r" ?GiB", _gib),
    ("cuda_graph_bytes", r"Graph capturing finished in [\d.]+ secs?, took " + _NUM + r" ?GiB", _gib),
    ("block_size", r"Forcing kv cache block size to " + _NUM, _num),
    ("gpu_memory_utilization", r"The current --gpu-memory-utilization=" + _NUM + r" is equivalent", _num),
    ("max_model_len", r"max seq len \(" + _NUM + r"\)", _num),
    ("kv_cache_tokens", r"maximum number of tokens that can be stored in KV cache \(" + _NUM + r"\)", _num),
    ("required_kv_bytes", r"\(" + _NUM + r" GiB KV cache is needed", _printed_gib),
    ("kv_cache_bytes", r"larger than the available KV cache memory \(" + _NUM + r" GiB\)", _printed_gib),
    # `--num-gpu-blocks-override N`: the cache has N blocks whatever memory the profile found
    ("num_gpu_blocks_override", r"Overriding num_gpu_blocks=\d+ with num_gpu_blocks_override=" + _NUM, _num),
    ("gpu_blocks", r"Overriding num_gpu_blocks=\d+ with num_gpu_blocks_override=" + _NUM, _num),
    # which vLLM: the 0.19+ logo (`version 0.32.0`), the API server's banner, the engine's own first line
    ("engine_version", r"(?:█  version|vLLM API server version|vLLM server version) v?(\d+\.\d+[\w.+-]*)", str),
    ("engine_version", r"Initializing an? (?:V1 )?LLM engine \(v(\d+\.\d+[\w.+-]*)\)", str),
    ("engine_core", r"Initializing an? (V1 )?LLM engine \(v", lambda v1: "v1" if v1 else "v0"),
    ("estimated_max_model_len", r"the estimated maximum model length is " + _NUM, _num),
)


@functools.cache
def _patterns() -> tuple[tuple[str, re.Pattern[str], _Conv], ...]:
    """`_FACTS` compiled, on the first line that passes the filter: a log without start-up lines (a `scan` of an
    excerpt, a daemon attached to a running server) never needs them, and compiling the 42 cost ~3 % of a
    `scan`'s start-up."""
    return tuple((name, re.compile(pattern), conv) for name, pattern, conv in _FACTS)


# Engine arguments as they appear in the config dump (`key=value, `), `args: Namespace(key=value, …)`
# and `non-default args: {'key': value, …}`. The config dump calls max_model_len `max_seq_len`.
_ARG_NAMES = {
    "max_seq_len": "max_model_len", "max_model_len": "max_model_len", "max_num_seqs": "max_num_seqs",
    "gpu_memory_utilization": "gpu_memory_utilization", "block_size": "block_size",
    "kv_cache_dtype": "kv_cache_dtype", "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "quantization": "quantization", "model": "model", "model_tag": "model",
}
# A config dump pasted without its `with config:` head still opens with `model='…', speculative_config=` or
# `model='…', tokenizer=`.
_ARG_LINE = re.compile(r"with config: |\bargs: Namespace\(|non-default args: \{"
                       r"|^model='[^']*', (?:speculative_config|tokenizer)=")
_ARG = re.compile(
    r"(?<![\w.])'?(" + "|".join(_ARG_NAMES) + r")'?(?:=|: )('[^']*'|\"[^\"]*\"|[\w.:/-]+)"
)
_NUMERIC_ARGS = {"max_model_len", "max_num_seqs", "gpu_memory_utilization", "block_size", "tensor_parallel_size",
                 "pipeline_parallel_size"}
FACT_WORDS = ("KV cache", "Maximum concurrency", "blocks:", "took", "memory", "max seq len", "block size",
               "dcp_world_size", "No available memory", "speculative_config=", "', tokenizer=", "█  model",
               "estimated maximum", "with config: ", "args: ", "num_gpu_blocks is", "num_gpu_blocks_override",
               "version", "LLM engine (v")
_FACT_FILTER = hot(*FACT_WORDS)


def _arg_facts(line: str) -> Iterator[tuple[str, float | str]]:
    for match in _ARG.finditer(line):
        name = _ARG_NAMES[match.group(1)]
        raw = match.group(2)
        if raw.startswith(("'", '"')):
            raw = raw[1:-1]  # a repr'd string; the quotes bound it (no escapes in names and paths worth keeping)
        if raw in ("None", "", "null"):
            continue
        if name in _NUMERIC_ARGS:
            try:
                yield name, float(raw)
            except ValueError:
                continue
        else:
            yield name, raw


def line_facts(msg: str) -> list[tuple[str, float | str]]:
    """(fact name, value) of every fact the message states, in pattern order, then its engine arguments."""
    if _FACT_FILTER.search(msg) is None:
        return []
    out: list[tuple[str, float | str]] = []
    for name, pattern, conv in _patterns():
        fm = pattern.search(msg)
        if fm is not None and (value := conv(fm.group(1) or "")) is not None:
            out.append((name, value))
    if _ARG_LINE.search(msg) is not None:
        out.extend(_arg_facts(msg))
    return out
