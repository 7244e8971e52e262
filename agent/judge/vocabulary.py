"""The rule files' closed vocabulary: every signal, aggregate, reference, filter and category a rule may
name, the one duration parser (rule windows, `advise --since`, `report --since`), and how a reference
is named in a finding's evidence. agent/judge/rules.py validates against these; docs/rules.md lists them.
"""

from __future__ import annotations

import re

from agent.records import EventKind

# Signal name → what it is (docs/rules.md repeats this table). `events.<kind>` is one per EventKind.
SIGNALS: dict[str, str] = {
    "kv_usage_ratio": "KV-cache usage 0–1 from the engine's stats lines or /metrics",
    "running": "requests being computed (engine stats)",
    "waiting": "requests accepted and waiting for a slot (engine stats)",
    "swapped": "requests swapped to CPU (vLLM V0 stats)",
    "preemptions": "preemptions an engine stats sample reports for its interval (vLLM V1 0.12+)",
    "request_tokens": "KV tokens held per running request (kv_used_tokens, or kv_usage_ratio × the engine's "
                      "KV-cache tokens, ÷ running): the observed request length",
    "gen_tps": "tokens generated per second by all running requests together (engine stats)",
    "request_duration_seconds": "how long each finished request took, from access lines (nginx rt=/urt=, Envoy, "
                                "Ollama's GIN) and per-request lines (TGI total_time, llama.cpp total time)",
    "gpu_memory_used_ratio": "NVML: the fullest GPU's used ÷ total memory, per sample",
    "ttft_seconds": "time to first token of the requests that finished (scraped histogram)",
    "queue_time_seconds": "time requests waited before they were scheduled (scraped histogram)",
    "e2e_latency_seconds": "end-to-end duration of the requests that finished (scraped histogram)",
    "inference_time_seconds": "time requests spent running: prefill and decode (scraped histogram)",
    "prompt_tokens": "prompt length of the requests that finished (scraped histogram)",
    "output_tokens": "tokens generated per finished request (scraped histogram)",
    **{f"events.{k.value}": f"`{k.value}` events (optionally filtered by `where`; `field` aggregates a number "
                            "they carry)" for k in EventKind},
}
AGGREGATES = ("p50", "p95", "p99", "max", "min", "mean", "last", "sum", "count", "rate", "growth")
# Values a condition may compare with (besides a number); None at evaluation makes the condition false.
REFERENCES: dict[str, str] = {
    "capacity.max_concurrency": "the governing capacity: the expected case (P95 input + output cap) when the "
                                "workload is known, else the worst case (agent/judge/sizing.py)",
    "capacity.worst_max_concurrency": "the capacity at max_model_len (engine figure once reported, else paper)",
    "capacity.expected_max_concurrency": "the capacity at P95 input + output cap (None without a workload)",
    "capacity.paper_max_concurrency": "the paper budget's max concurrency",
    "capacity.engine_max_concurrency": "the engine's own figure at the budget's request length",
    "capacity.tokens_per_request": "tokens per request of the governing case",
    "capacity.disagreement_ratio": "|engine ÷ paper − 1|",
    "config.max_num_seqs": "server.max_num_seqs (or the engine's reported max_num_seqs)",
    "config.max_queue_size": "server.max_queue_size",
    "config.max_model_len": "server.max_model_len",
    "config.request_timeout_ms": "limits.request_timeout_ms",
    "config.request_timeout_seconds": "limits.request_timeout_ms ÷ 1000 (to compare with *_seconds signals)",
    "config.queue_timeout_ms": "limits.queue_timeout_ms",
    "config.queue_timeout_seconds": "limits.queue_timeout_ms ÷ 1000",
    "config.max_output_tokens": "limits.max_output_tokens",
    "config.max_session_tokens": "session.max_session_tokens",
    "config.gpu_memory_utilization": "server.gpu_memory_fraction (or the engine's reported value)",
    "config.max_batch_prefill_tokens": "TGI's --max-batch-prefill-tokens, as the engine reported it at start-up",
    "file.max_num_seqs": "server.max_num_seqs as the config file says (config.* is what the engine runs with)",
    "file.max_model_len": "server.max_model_len as the config file says",
    "file.gpu_memory_utilization": "server.gpu_memory_fraction as the config file says",
    "engine.estimated_max_model_len": "the longest request the engine said its KV cache holds (vLLM start-up)",
    "engine.total_gpu_memory_bytes": "the card's memory as the engine measured it",
    "engine.non_kv_cache_bytes": "the memory the engine needs outside the KV cache (weights, activation peak, "
                                 "non-torch)",
    "engine.kv_cache_tokens": "the engine's KV-cache size in tokens (llama.cpp: n_ctx, the cells of all slots)",
    "engine.kv_cache_bytes": "the KV cache's size in bytes as the engine allocated it",
    "engine.weights_bytes": "the weights' size on the GPU as the engine loaded them",
    "engine.device_free_bytes": "llama.cpp, SGLang: the GPU's free memory before the weights loaded",
    "engine.kv_buffer_failed_bytes": "llama.cpp: the KV-cache buffer that failed to allocate at start-up",
    "engine.compute_buffer_failed_bytes": "llama.cpp: the compute-graph buffer that failed to allocate at start-up",
}
WHERE_KEYS = ("scope", "knob", "phase", "reason", "timeout_by", "timeout_on", "cause")
# The per-sample signals a `same_sample` group may test together: one engine stats sample carries them all.
SAMPLE_SIGNALS = ("running", "waiting", "swapped", "kv_usage_ratio", "preemptions", "request_tokens")
# The series a `together` group may test point by point (each value has a time), besides `events.<kind>`.
POINT_SIGNALS = (*SAMPLE_SIGNALS, "gpu_memory_used_ratio")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)?$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(text: str | float) -> float:
    """`90s`, `10m`, `2h`, `1d` or a bare number of seconds → seconds (positive, finite); ValueError otherwise.

    The one duration parser: rule windows, `advise --since` and `report --since` all read durations here, so
    what one accepts the others accept."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _DURATION.match(str(text).strip())
        if not m:
            raise ValueError(f"expected a duration like 90s, 10m, 2h or 1d, got {text!r}")
        value = float(m.group(1)) * _UNIT[m.group(2) or "s"]
    if not 0 < value <= MAX_DURATION_SECONDS:
        raise ValueError(f"expected a positive duration like 90s, 10m, 2h or 1d, up to {MAX_DURATION_DAYS:,}d, "
                         f"got {text!r}")
    return value


MAX_DURATION_DAYS = 36_500  # a century: longer reaches before any clock the agent can have stored
MAX_DURATION_SECONDS = MAX_DURATION_DAYS * 86_400.0


def ref_key(ref: str) -> str:
    """A reference's evidence name: `capacity.x` and `config.x` are `x`; `file.x`, `engine.x` are `file_x`, …"""
    prefix, name = ref.split(".", 1)
    return name if prefix in ("capacity", "config") else f"{prefix}_{name}"
