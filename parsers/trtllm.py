"""TensorRT-LLM's KV budget as its KV cache manager prints it (parsers/catalogue/tensorrt-llm.yaml).

TensorRT-LLM has no parser of its own: its streams (trtllm-serve, Triton's tensorrtllm backend) are read by
`GenericParser`, whose catalogued signatures give its start-up failures. What the generic path cannot give
without this table is the KV budget, which only these lines state: the tokens the paged KV cache holds and its
bytes (`[MemUsageChange] Allocated 26.91 GiB for max tokens in paged KV cache (220480).`, or before 0.8
`Max tokens in paged KV cache: 117760. Allocating 54022635520 bytes.`), the tokens per block, the blocks of the
primary (GPU) pool. The wordings are TensorRT-LLM's own, so no other engine's line matches them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

GIB = 1024**3

FACTS: tuple[tuple[str, re.Pattern[str], Callable[[str], float]], ...] = (
    ("kv_cache_bytes", re.compile(r"\bAllocated ([\d.]+) GiB for max tokens in paged KV cache \(\d+\)"),
     lambda v: float(v) * GIB),
    ("kv_cache_tokens", re.compile(r"\bAllocated [\d.]+ GiB for max tokens in paged KV cache \((\d+)\)"), float),
    ("kv_cache_tokens", re.compile(r"\bMax tokens in paged KV cache: (\d+)\. Allocating \d+ bytes"), float),
    ("kv_cache_bytes", re.compile(r"\bMax tokens in paged KV cache: \d+\. Allocating (\d+) bytes"), float),
    ("block_size", re.compile(r"\bNumber of tokens per block: (\d+)\b"), float),
    ("gpu_blocks", re.compile(r"\bNumber of blocks in KV cache primary pool: (\d+)\b"), float),
    ("block_size", re.compile(r"\bMax KV cache blocks per sequence: \d+ .{0,40}?tokens per block=(\d+)"), float),
    ("gpu_blocks", re.compile(r"\bMax KV cache blocks per sequence: .{0,80}?primary blocks=(\d+)"), float),
)
HOT_WORDS = ("paged KV cache", "tokens per block", "KV cache primary pool", "KV cache blocks per sequence")


def facts(msg: str) -> list[tuple[str, float]]:
    """The capacity facts one TensorRT-LLM line states (none for any other line)."""
    out: list[tuple[str, float]] = []
    for name, pattern, conv in FACTS:
        m = pattern.search(msg)
        if m is not None:
            out.append((name, conv(m.group(1))))
    return out
