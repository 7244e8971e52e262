"""LMDeploy's capacity facts: its engine configuration, printed once as the dataclass's repr
(parsers/catalogue/lmdeploy.yaml says where and why these fields).

LMDeploy has no parser of its own: its stream is read by `GenericParser`, which asks here for the facts of a
line holding `TurbomindEngineConfig(` or `PytorchEngineConfig(`. A field left `None` (filled in later, on the
`updated backend_config=` line) gives no fact.
"""

from __future__ import annotations

import re

HOT_WORDS = ("EngineConfig(",)
_CONFIG = re.compile(r"\b(?:Turbomind|Pytorch)EngineConfig\((?P<body>[^()]{0,4000})")
_FIELD = re.compile(r"(?<![\w.])(tp|session_len|max_batch_size|cache_block_seq_len|block_size)=(\d{1,9})\b")
_NAMES = {"tp": "tensor_parallel_size", "session_len": "max_model_len", "max_batch_size": "max_num_seqs",
          "cache_block_seq_len": "block_size", "block_size": "block_size"}


def facts(msg: str) -> list[tuple[str, float]]:
    """The capacity facts of an LMDeploy engine configuration's repr (none for any other line)."""
    m = _CONFIG.search(msg)
    if m is None:
        return []
    return [(_NAMES[f.group(1)], float(f.group(2))) for f in _FIELD.finditer(m.group("body"))]
