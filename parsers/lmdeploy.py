"""LMDeploy's capacity facts: its engine configuration, printed once as the dataclass's repr
(parsers/catalogue/lmdeploy.yaml says where and why these fields).

LMDeploy has no parser of its own: its stream is read by `GenericParser`, which asks here for the facts of a
line holding `TurbomindEngineConfig(` or `PytorchEngineConfig(` (a field left `None`, filled in later on the
`updated backend_config=` line, gives no fact), the PyTorch engine's `CacheConfig(…)`, or one of TurboMind's
sizing lines; and for the load its metrics logger prints each interval (`--enable-metrics`,
lmdeploy/metrics/loggers.py `LoggingStatLogger`): `Engine (running/waiting): 45 / 5, KV cache: 21.6%`.
"""

from __future__ import annotations

import re

LOAD_WORDS = ("Engine (running/waiting): ",)
HOT_WORDS = ("EngineConfig(", "CacheConfig(", "[BlockManager] max_block_count", "No enough blocks for",
             "`max_context_token_num` is not set", *LOAD_WORDS)
_LOAD = re.compile(r"\bEngine \(running/waiting\): (\d{1,9}) / (\d{1,9}), KV cache: (\d{1,3}(?:\.\d{1,3})?)%")
_CONFIG = re.compile(r"\b(?:Turbomind|Pytorch)EngineConfig\((?P<body>[^()]{0,4000})")
_FIELD = re.compile(r"(?<![\w.])(tp|session_len|max_batch_size|cache_block_seq_len|block_size)=(\d{1,9})\b")
_NAMES = {"tp": "tensor_parallel_size", "session_len": "max_model_len", "max_batch_size": "max_num_seqs",
          "cache_block_seq_len": "block_size", "block_size": "block_size"}
# The PyTorch engine's `Building CacheEngine with config: \n{cache_config}` (pytorch/engine/executor/base.py): the
# blocks it allocated (0.7 on), the sequences a batch holds, the tokens per block
_CACHE = re.compile(r"^CacheConfig\((?P<body>[^()]{0,2000})")
_CACHE_FIELD = re.compile(r"(?<![\w.])(max_batches|block_size|num_gpu_blocks)=(\d{1,9})\b")
_CACHE_NAMES = {"max_batches": "max_num_seqs", "block_size": "block_size", "num_gpu_blocks": "gpu_blocks"}
# TurboMind's C++ side (src/turbomind): BlockManager's blocks, the session length cut to what they hold
# (LlamaBatch.cc), the prefill budget defaulted (LlamaTritonModel.cc, turbomind.cc)
_TURBOMIND = (
    ("gpu_blocks", re.compile(r"\[BlockManager\] max_block_count = (\d{1,12})\b")),
    ("max_model_len", re.compile(r"No enough blocks for `session_len` \(\d{1,12}\), `session_len` truncated to "
                                 r"(\d{1,12})\b")),
    ("max_batch_prefill_tokens", re.compile(r"`max_context_token_num` is not set, default to (\d{1,12})\b")),
)


def facts(msg: str) -> list[tuple[str, float]]:
    """The capacity facts of an LMDeploy engine configuration's repr or of a TurboMind sizing line (none for any
    other line)."""
    if (m := _CONFIG.search(msg)) is not None:
        return [(_NAMES[f.group(1)], float(f.group(2))) for f in _FIELD.finditer(m.group("body"))]
    if (m := _CACHE.search(msg)) is not None:
        found = [(_CACHE_NAMES[f.group(1)], float(f.group(2))) for f in _CACHE_FIELD.finditer(m.group("body"))]
        return [(name, value) for name, value in found if not (name == "gpu_blocks" and value == 0)]
    return [(name, float(m.group(1))) for name, pattern in _TURBOMIND if (m := pattern.search(msg)) is not None]


def load_sample(msg: str) -> tuple[int | None, int | None, float | None] | None:
    """(running, waiting, KV usage ratio) of the metrics logger's interval line; None for any other line."""
    if (m := _LOAD.search(msg)) is None:
        return None
    return int(m.group(1)), int(m.group(2)), min(float(m.group(3)) / 100, 1.0)
