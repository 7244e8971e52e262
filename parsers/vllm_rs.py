"""vllm.rs (guoqingbao/vllm.rs, a Rust reimplementation of vLLM): its periodic KV usage line, read by the
generic path (parsers/catalogue/vllm-rs.yaml holds its swap-out statements).

The scheduler (src/core/scheduler.rs, `Scheduler::print_free_blocks`) logs `GPU Kvcache: {free} blocks
({tokens} tokens) free, used {pct:.1}% ({used:.2}GB/{total:.2}GB); CPU swap used …` as it schedules: the
only load figure vllm.rs prints, and the one that tells a swap-out was near (it swaps past a usage threshold).
"""

from __future__ import annotations

import re

STATS_WORD = "GPU Kvcache: "
_LINE = re.compile(r"\bGPU Kvcache: \d{1,12} blocks \(\d{1,15} tokens\) free, used (?P<pct>\d{1,3}(?:\.\d{1,3})?)%")


def kv_usage(msg: str) -> float | None:
    """The KV usage ratio (0–1) a vllm.rs usage line states, None for any other line."""
    m = _LINE.search(msg)
    return None if m is None else min(float(m.group("pct")) / 100, 1.0)
