"""koboldcpp's summary of each request (koboldcpp.py, the generate handler's closing print): `CtxLimit:3768/4096,
Amt:…, Process:0.44s (442.0ms/T = 2.26T/s), Generate:…, Total:0.45s (2.25T/s)` (`ContextLimit: 614/2048,
Processing:…, Generation:…, Total:…` before 1.50), read as a load sample by the generic and llama.cpp paths.

koboldcpp serves one request at a time (its multiuser mode queues the rest), and its KV cache holds that one
sequence's context, up to `--contextsize`: the line's context over its limit is the cache's use, with one request
running, when the request ends. It tells no queue.
"""

from __future__ import annotations

import re

HOT_WORDS = ("CtxLimit:", "ContextLimit:")
_LOAD = re.compile(r"\b(?:CtxLimit|ContextLimit): ?(\d{1,9})/(\d{1,9}),[^\n]{0,400}?\bTotal: ?\d{1,7}(?:\.\d{1,4})?s "
                   r"\(\d{1,7}(?:\.\d{1,4})? ?T/s\)")


def load_sample(msg: str) -> tuple[int | None, int | None, float | None] | None:
    """(one running, no queue told, the context's share of the limit) of the summary line; None for any other."""
    if (m := _LOAD.search(msg)) is None:
        return None
    used, limit = int(m.group(1)), int(m.group(2))
    return (1, None, used / limit) if limit > 0 and used <= limit else None
