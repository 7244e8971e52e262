"""text-generation-webui's summary of each generation (modules/text_generation.py, `generate_reply_HF` and the
other loaders' wrappers): `Output generated in 9.62 seconds (2.49 tokens/s, 24 tokens, context 1951, …)`,
read by the generic path as a load sample that carries the generation's speed alone (no queue, no cache: the
web UI runs one generation at a time and prints no KV use).
"""

from __future__ import annotations

import re

HOT_WORDS = ("Output generated in ",)
_SPEED = re.compile(r"\bOutput generated in \d{1,7}(?:\.\d{1,4})? seconds \((\d{1,9}(?:\.\d{1,4})?) tokens/s, "
                    r"\d{1,9} tokens, context \d{1,9}, ")


def speed_sample(msg: str) -> tuple[float | None, float | None] | None:
    """(no prompt speed, the generation's tokens a second) of the summary line; None for any other line."""
    if (m := _SPEED.search(msg)) is None:
        return None
    return None, float(m.group(1))
