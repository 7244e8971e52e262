"""Gauges of an engine's `/metrics` exposition pasted into a log (an issue's `curl …/metrics`, a CI's dump): each
sample line of a load gauge is a load sample of its one field.

The names are the engines' own, the ones agent/sources/engine_metrics.py reads from a live scrape (vLLM, SGLang,
TGI, llama.cpp), and Triton's per-model queue depth (`nv_inference_pending_request_count`, a gauge of the requests
waiting to run). A line is `name{labels} value` as the text format writes it; `# HELP` and `# TYPE` lines, and a
counter's samples, are not load. Percent-named vLLM gauges hold ratios (0–1), as the scrape reads them.
"""

from __future__ import annotations

import re

# gauge name -> the ServerStats field it is
GAUGES = {
    "vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage_ratio", "vllm:gpu_cache_usage_perc": "kv_usage_ratio",
    "sglang:num_running_reqs": "running", "sglang:num_queue_reqs": "waiting", "sglang:token_usage": "kv_usage_ratio",
    "tgi_batch_current_size": "running", "tgi_queue_size": "waiting",
    "llamacpp:requests_processing": "running", "llamacpp:requests_deferred": "waiting",
    "llamacpp:kv_cache_usage_ratio": "kv_usage_ratio",
    "nv_inference_pending_request_count": "waiting",
    # trtllm-serve's /metrics (tensorrt_llm/metrics: the `pytrtllm:` prefix)
    "pytrtllm:num_requests_running": "running", "pytrtllm:num_requests_waiting": "waiting",
}
HOT_WORDS = ("vllm:num_requests_", "cache_usage_perc", "sglang:num_", "sglang:token_usage", "tgi_batch_current_size",
             "tgi_queue_size", "llamacpp:requests_", "llamacpp:kv_cache_usage", "nv_inference_pending_request_count",
             "pytrtllm:num_requests_")
_SAMPLE = re.compile(r"^\s*(" + "|".join(re.escape(name) for name in GAUGES) + r")(?:\{[^{}\n]{0,1000}\})? "
                     r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?: -?\d{1,16})?\s*$")


def gauge(msg: str) -> tuple[str, float] | None:
    """(field, value) of a load gauge's sample line, None for any other line."""
    m = _SAMPLE.match(msg)
    if m is None:
        return None
    value = float(m.group(2))
    if value < 0 or (GAUGES[m.group(1)] == "kv_usage_ratio" and value > 1):
        return None
    return GAUGES[m.group(1)], value
