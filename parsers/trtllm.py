"""TensorRT-LLM's KV budget as its KV cache manager prints it (parsers/catalogue/tensorrt-llm.yaml).

TensorRT-LLM has no parser of its own: its streams (trtllm-serve, Triton's tensorrtllm backend) are read by
`GenericParser`, whose catalogued signatures give its start-up failures. What the generic path cannot give
without this table is the KV budget, which only these lines state: the tokens the paged KV cache holds and its
bytes (`[MemUsageChange] Allocated 26.91 GiB for max tokens in paged KV cache (220480).`, or before 0.8
`Max tokens in paged KV cache: 117760. Allocating 54022635520 bytes.`), the tokens per block, the blocks of the
primary (GPU) pool. The wordings are TensorRT-LLM's own, so no other engine's line matches them.

Its load figures are the executor's iteration statistics, `IterationStats` serialised by nlohmann::json
(cpp/tensorrt_llm/executor/jsonSerialization.cpp; keys in alphabetical order): what trtllm-serve's `/metrics`
answers (a JSON list of the iterations since the last call) and what users paste from it or log. Each object
gives the requests running (`numActiveRequests`), the requests waiting for admission (`numQueuedRequests`) and
the primary pool's blocks in use (`kvCacheStats.usedNumBlocks` of `maxNumBlocks`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

GIB = 1024**3
MIB = 1024**2

FACTS: tuple[tuple[str, re.Pattern[str], Callable[[str], float]], ...] = (
    ("kv_cache_bytes", re.compile(r"\bAllocated ([\d.]+) GiB for max tokens in paged KV cache \(\d+\)"),
     lambda v: float(v) * GIB),
    ("kv_cache_tokens", re.compile(r"\bAllocated [\d.]+ GiB for max tokens in paged KV cache \((\d+)\)"), float),
    ("kv_cache_tokens", re.compile(r"\bMax tokens in paged KV cache: (\d+)\. Allocating \d+ bytes"), float),
    ("kv_cache_tokens", re.compile(r"\bUsing (\d+) tokens in paged KV cache\b"), float),
    # the engine's weights and the execution context's activations, once the runtime has loaded the engine
    # (cpp/tensorrt_llm/runtime/tllmRuntime.cpp, `TllmRuntime`'s constructor and `setNbContexts`)
    ("weights_bytes", re.compile(r"\bLoaded engine size: (\d+) MiB\b"), lambda v: float(v) * MIB),
    ("activation_peak_bytes", re.compile(r"\bAllocated ([\d.]+) MiB for execution context memory\b"),
     lambda v: float(v) * MIB),
    # the limits the model was built with (batch_manager/trtGptModel.h, `TrtGptModel`'s constructor)
    ("max_num_seqs", re.compile(r"\bTRTGptModel maxNumSequences: (\d+)\b"), float),
    ("max_model_len", re.compile(r"\bTRTGptModel maxSequenceLen: (\d+)\b"), float),
    ("kv_cache_bytes", re.compile(r"\bMax tokens in paged KV cache: \d+\. Allocating (\d+) bytes"), float),
    ("block_size", re.compile(r"\bNumber of tokens per block: (\d+)\b"), float),
    ("gpu_blocks", re.compile(r"\bNumber of blocks in KV cache primary pool: (\d+)\b"), float),
    ("block_size", re.compile(r"\bMax KV cache blocks per sequence: \d+ .{0,40}?tokens per block=(\d+)"), float),
    ("gpu_blocks", re.compile(r"\bMax KV cache blocks per sequence: .{0,80}?primary blocks=(\d+)"), float),
)
STATS_WORD = '"numActiveRequests":'  # every IterationStats object has it
_ITERATION = re.compile(r'\{"cpuMemUsage":')  # where each object of a list starts (its first key)
_COUNT = {name: re.compile(rf'"{name}":(\d{{1,12}})\b') for name in
          ("numActiveRequests", "numQueuedRequests", "usedNumBlocks", "maxNumBlocks")}
LEGACY_WORDS = ('"Active Request Count":',)
HOT_WORDS = ("TRTGptModel max", "paged KV cache", "tokens per block", "KV cache primary pool",
             "KV cache blocks per sequence", "Loaded engine size", "for execution context memory", *LEGACY_WORDS)
# the batch manager's older iteration log (GptManager, `logIterationData`: Triton's tensorrtllm backend before the
# executor API), one JSON object a line with its keys in words; no queue count in it
_LEGACY = {name: re.compile(rf'"{name}":(\d{{1,12}})\b') for name in
           ("Active Request Count", "Used KV cache blocks", "Max KV cache blocks")}


def facts(msg: str) -> list[tuple[str, float]]:
    """The capacity facts one TensorRT-LLM line states (none for any other line)."""
    out: list[tuple[str, float]] = []
    for name, pattern, conv in FACTS:
        m = pattern.search(msg)
        if m is not None:
            out.append((name, conv(m.group(1))))
    return out


def iteration_stats(msg: str) -> list[tuple[int, int, float | None]]:
    """(running, waiting, KV usage ratio or None) of each IterationStats object on the line, in order; [] for
    any other line. A list pasted cut short gives the objects whose counts it still holds."""
    starts = [m.start() for m in _ITERATION.finditer(msg)] or [0]
    out: list[tuple[int, int, float | None]] = []
    for begin, end in zip(starts, [*starts[1:], len(msg)], strict=True):
        chunk = msg[begin:end]
        found = {name: int(m.group(1)) for name, pattern in _COUNT.items() if (m := pattern.search(chunk))}
        if "numActiveRequests" not in found or "numQueuedRequests" not in found:
            continue
        total = found.get("maxNumBlocks")
        ratio = min(found["usedNumBlocks"] / total, 1.0) if total and "usedNumBlocks" in found else None
        out.append((found["numActiveRequests"], found["numQueuedRequests"], ratio))
    return out


def legacy_iteration_stats(msg: str) -> tuple[int | None, int | None, float | None] | None:
    """(running, no queue count, KV usage ratio or None) of the batch manager's older iteration line; None for any
    other line."""
    found = {name: int(m.group(1)) for name, pattern in _LEGACY.items() if (m := pattern.search(msg))}
    if "Active Request Count" not in found:
        return None
    total = found.get("Max KV cache blocks")
    used = found.get("Used KV cache blocks")
    return found["Active Request Count"], None, (min(used / total, 1.0) if total and used is not None else None)
