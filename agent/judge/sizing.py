"""Sizing by the method: the worst case and the expected case of one engine's capacity, and which governs.

The **worst case** is the capacity at the budget's request length — `max_model_len` once the config or the
engine gives it — the engine's own figure whenever it reported one (agent/capacity). The **expected case**
is the method's: requests of the workload's long percentile of input plus the output cap
(`workload.input_p95_tokens + limits.max_output_tokens`), from the same KV pool (the engine's KV tokens,
else the paper's usable KV bytes). When the workload is known the expected case governs — a node is sized
for the requests it serves, and every request is capped by max_output_tokens — and the worst case is shown
beside it; without a workload the worst case is all there is. Every rule and built-in that compares with
or recommends a capacity reads `governing` from here, so they give one number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.capacity.capacity import Capacity


@dataclass(frozen=True)
class Sizing:
    """Both cases in whole requests (None where unknown), the request lengths behind them, and which governs."""

    worst: int | None
    worst_tokens: int | None
    expected: int | None = None
    expected_tokens: int | None = None

    @property
    def governs(self) -> str | None:
        if self.expected is not None:
            return "expected"
        return "worst" if self.worst is not None else None

    @property
    def governing(self) -> int | None:
        return self.expected if self.expected is not None else self.worst

    @property
    def governing_tokens(self) -> int | None:
        return self.expected_tokens if self.expected is not None else self.worst_tokens

    def text(self) -> str:
        """`expected case 40 requests at 2,560 tokens (P95 input + output cap) governs; worst case 13 at 8,192`."""
        worst = (f"worst case {self.worst} at {self.worst_tokens:,} tokens (max_model_len)"
                 if self.worst is not None and self.worst_tokens else "worst case unknown")
        if self.expected is None or self.expected_tokens is None:
            return f"{worst}; no workload known (workload.input_p95_tokens + limits.max_output_tokens), so it governs"
        return (f"expected case {self.expected} at {self.expected_tokens:,} tokens (P95 input + output cap) "
                f"governs; {worst}")


def sizing(cap: Capacity | None, workload_tokens: float | None) -> Sizing:
    """The two cases of `cap` for requests of `workload_tokens` (P95 input + output cap; None: unknown)."""
    if cap is None:
        return Sizing(None, None)
    worst = Sizing(cap.max_concurrency, cap.tokens_per_request)
    if not workload_tokens or workload_tokens <= 0:
        return worst
    length = int(workload_tokens)
    if cap.tokens_per_request:
        length = min(length, cap.tokens_per_request)  # no request is longer than max_model_len
    block = cap.block_size or 16
    rounded = math.ceil(length / block) * block
    if cap.engine_kv_cache_tokens:
        expected = math.floor(cap.engine_kv_cache_tokens / rounded + 1e-9)
    elif cap.engine_max_concurrency is not None and cap.tokens_per_request:
        expected = math.floor(cap.engine_max_concurrency * cap.tokens_per_request / rounded + 1e-9)
    elif cap.usable_kv_bytes and cap.kv_bytes_per_token:
        expected = cap.usable_kv_bytes // (cap.kv_bytes_per_token * rounded)
    else:
        return worst
    return Sizing(cap.max_concurrency, cap.tokens_per_request, expected, length)
