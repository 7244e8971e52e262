"""Capacity limits in the argparse dump a server prints at start (`Namespace(…)`), for servers without a parser of
their own, read by `GenericParser`: koboldcpp (koboldcpp.py prints its parsed arguments: `contextsize` is the one
context its single generation slot has) and FastChat's model worker (fastchat/serve/model_worker.py logs `args:
Namespace(…)`: `limit_model_concurrency` is how many requests the worker runs at once before it makes them wait).
vLLM's and SGLang's own dumps are read by their parsers.
"""

from __future__ import annotations

import re

HOT_WORDS = ("Namespace(",)
_LIMITS = (
    ("max_model_len", re.compile(r"\bNamespace\([^)]{0,8000}?\bcontextsize=(\d{1,9})\b")),
    ("max_concurrent_requests", re.compile(r"\bNamespace\([^)]{0,8000}?\blimit_model_concurrency=(\d{1,9})\b")),
)


def facts(msg: str) -> list[tuple[str, float]]:
    """The limits a `Namespace(…)` dump sets; [] for any other line."""
    return [(name, float(m.group(1))) for name, pattern in _LIMITS if (m := pattern.search(msg)) is not None]
