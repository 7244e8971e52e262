"""Xinference's capacity facts: the engine arguments it launches vLLM or SGLang with, printed once per model as
a Python dict (parsers/catalogue/xinference.yaml says where).

Xinference has no parser of its own: its stream is read by `GenericParser`, which asks here for the facts of a
line holding `with following model config: {`. Only the dict's values that are numbers give facts (a `None`,
an engine default left unset, gives none); SGLang's names are mapped to the names vLLM's give, as the SGLang
parser maps its own `server_args` (`mem_fraction_static` is the fraction of the device SGLang takes).
"""

from __future__ import annotations

import re

HOT_WORDS = ("following model config: {",)
_CONFIG = re.compile(r"\bwith following model config: \{(?P<body>[^\n]{0,8000})")
_FIELD = re.compile(r"'(tensor_parallel_size|pipeline_parallel_size|block_size|gpu_memory_utilization|max_num_seqs"
                    r"|max_model_len|tp_size|mem_fraction_static|max_running_requests|context_length|page_size)'"
                    r": (\d{1,9}(?:\.\d{1,6})?)(?=[,}])")
_NAMES = {"tp_size": "tensor_parallel_size", "mem_fraction_static": "gpu_memory_utilization",
          "max_running_requests": "max_num_seqs", "context_length": "max_model_len", "page_size": "block_size"}


def facts(msg: str) -> list[tuple[str, float]]:
    """The capacity facts of Xinference's model-config line (none for any other line)."""
    m = _CONFIG.search(msg)
    if m is None:
        return []
    return [(_NAMES.get(f.group(1), f.group(1)), float(f.group(2))) for f in _FIELD.finditer(m.group("body"))]
