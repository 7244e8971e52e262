"""MLC LLM's capacity facts: the engine configuration it infers from the device's memory at start, as its
`InferrableEngineConfig` logs it (parsers/catalogue/mlc-llm.yaml says where).

MLC LLM has no parser of its own: its stream is read by `GenericParser`, which asks here for the facts of a line
holding one of these wordings, MLC's own. The sizes are megabytes as `BytesToMegabytesString` prints them
(bytes / 1024 / 1024). The per-mode lines (`Under mode "local", …`) are estimates for modes not chosen and give
no fact; the RNN-state models' `max RNN state token capacity` counts no KV-cache tokens, so only its batch size
is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable

MIB = 1024**2
HOT_WORDS = ("The actual engine mode is", "Estimated total single GPU memory usage", "Estimated KVCacheConfig")
_MB = r"(\d{1,9}(?:\.\d{1,6})?) MB"
FACTS: tuple[tuple[str, re.Pattern[str], Callable[[str], float]], ...] = (
    ("max_num_seqs", re.compile(r"\bThe actual engine mode is \"\w+\"\. So max batch size is (\d{1,9}), "), float),
    ("kv_cache_tokens", re.compile(r"\bThe actual engine mode is \"\w+\"\. So max batch size is \d{1,9}, "
                                   r"max KV cache token capacity is (\d{1,12}), "), float),
    ("weights_bytes", re.compile(r"\bEstimated total single GPU memory usage: [\d.]+ MB \(Parameters: " + _MB),
     lambda v: float(v) * MIB),
    ("kv_cache_bytes", re.compile(r"\bEstimated total single GPU memory usage: [\d.]+ MB \(Parameters: [\d.]+ MB\. "
                                  r"KVCache: " + _MB), lambda v: float(v) * MIB),
    ("kv_cache_tokens", re.compile(r"\bEstimated KVCacheConfig \"max_total_sequence_length\": (\d{1,12})\."), float),
)


def facts(msg: str) -> list[tuple[str, float]]:
    """The capacity facts of one of MLC LLM's engine-configuration lines (none for any other line)."""
    return [(name, convert(m.group(1))) for name, pattern, convert in FACTS if (m := pattern.search(msg))]
