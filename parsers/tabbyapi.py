"""TabbyAPI's own lines (theroyallab/tabbyAPI; catalogue: tabbyapi): the context and cache it sizes at load
(backends/exllamav3/model.py, `ExllamaV3Container.create`) as start-up facts, and each generation's metrics
(common/gen_logging.py, `log_metrics`) as a load sample that carries speeds alone: the line prints no cache use,
and a batch's other requests are not in it.
"""

from __future__ import annotations

import re

HOT_WORDS = ("max_seq_len", "cache_size")
METRICS_WORDS = ("Metrics (ID: ",)
_N = r"(\d{1,9})"
_FACTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("max_model_len", re.compile(r"\bUsing (?:configured max_seq_len|default max_seq_len from model): " + _N
                                 + r" tokens\.")),
    ("max_model_len", re.compile(r"\bmax_seq_len is undefined\. Defaulting to " + _N + r" tokens\.")),
    # the context is cut to the cache when larger: the limit it serves is the later line's
    ("max_model_len", re.compile(r"\bis larger than the cache size and will be limited to " + _N + r" tokens\.")),
    ("kv_cache_tokens", re.compile(r"\bUsing configured cache_size: " + _N + r" tokens\.")),
    ("kv_cache_tokens", re.compile(r"\bcache_size is undefined\. Defaulting to " + _N + r" tokens\.")),
)
_NUMBER = r"(\d{1,9}(?:\.\d{1,6})?)"
_METRICS = re.compile(r"\bMetrics \(ID: [^()\s]{1,80}\): \d{1,9} tokens generated in [\d.]{1,12} seconds \(Queue: "
                      r"[\d.]{1,12} s, Process: \d{1,9} cached tokens and -?\d{1,9} new tokens at " + _NUMBER
                      + r" T/s, Generate: " + _NUMBER + r" T/s")


def facts(msg: str) -> list[tuple[str, float]]:
    """(name, value) of each start-up size the line gives."""
    return [(name, float(m.group(1))) for name, pattern in _FACTS if (m := pattern.search(msg)) is not None]


def speed_sample(msg: str) -> tuple[float | None, float | None] | None:
    """(prompt tokens a second, generation tokens a second) of a generation's metrics; None for any other line."""
    if (m := _METRICS.search(msg)) is None:
        return None
    return float(m.group(1)), float(m.group(2))
