"""LightLLM's router (ModelTC/LightLLM, lightllm/server/router/manager.py): at DEBUG its loop logs each data-parallel
rank's batch in one record of several lines — `dp_i 0 current batch size: 1`, `… paused req num: 0`, `… token used
ratio: 0.0024 not contain prompt cache tree unrefed token`, `… token used ratio: 0.0025 contain prompt cache tree
unrefed token` — each line behind LightLLM's logger prefix, which is vLLM's shape (`DEBUG 01-12 13:52:23
[manager.py:251] …`), so the stream may be read as vLLM's. The ratio that counts the prompt cache's unreferenced tokens
is the token pool's whole use: read as a load sample's KV usage, by the vLLM and the generic paths.
"""

from __future__ import annotations

import re

HOT_WORDS = ("contain prompt cache tree unrefed token",)
_RATIO = re.compile(r"\btoken used ratio: (\d(?:\.\d{1,20})?(?:[eE]-?\d{1,3})?) contain prompt cache tree unrefed "
                    r"token\b")


def load_sample(msg: str) -> tuple[int | None, int | None, float | None] | None:
    """(no running count, no queue, the pool's use) of the ratio line with the cache's tokens; None otherwise."""
    if (m := _RATIO.search(msg)) is None or (usage := float(m.group(1))) > 1.0:
        return None
    return None, None, usage
