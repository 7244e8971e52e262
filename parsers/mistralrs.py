"""mistral.rs's load line (parsers/catalogue/mistral-rs.yaml): its engine logger's interval summary
(mistralrs-core/src/engine/logger.rs, `IntervalLogger`), `Throughput (T/s) 320.60, Prefix cache hitrate 0.00%,
1 running, 0 waiting`, read by `GenericParser` as a load sample. It carries no KV usage.
"""

from __future__ import annotations

import re

HOT_WORDS = ("Throughput (T/s) ",)
_LOAD = re.compile(r"\bThroughput \(T/s\) [\d.]{1,12}, Prefix cache hitrate [\d.]{1,8}%, (\d{1,9}) running, "
                   r"(\d{1,9}) waiting\b")


def load_sample(msg: str) -> tuple[int | None, int | None, float | None] | None:
    """(running, waiting, no KV usage) of the interval line; None for any other line."""
    if (m := _LOAD.search(msg)) is None:
        return None
    return int(m.group(1)), int(m.group(2)), None
