"""The metric definitions: every family's name, help text and the field it shows, as plain data.

The exporter builds its families from these tables on each scrape; docs/metrics.md lists the same names
(a test checks it). Nothing here imports prometheus_client.
"""

from __future__ import annotations

Labels = tuple[str, ...]

# Restart-safe counters: totals key (the metric name without `deepinfer_`) → (help, label names). The
# daemon keeps their values in SQLite's `totals` table under the same keys.
COUNTERS: dict[str, tuple[str, Labels]] = {
    "events_total": ("Occurrences of classified events (OOM, preemption, pending, queue_full, deadline_exceeded, "
                     "http_429/503, request_failed, engine_dead, cuda_error, nccl_timeout, xid, gpu_lost): each event "
                     "adds its count (docs/metrics.md says what one increment means per kind).",
                     ("source", "server", "kind")),
    "gpu_xid_errors_total": ("NVIDIA driver Xid errors, from NVML events and the kernel log.", ("gpu", "xid")),
    "source_lines_total": ("Log lines delivered by the source.", ("source",)),
    "source_bytes_total": ("Bytes read by the source.", ("source",)),
    "source_rotations_total": ("Log rotations followed (rename, replace, delete, symlink swap).", ("source",)),
    "source_truncations_total": ("Truncations noticed (copytruncate).", ("source",)),
    "source_read_errors_total": ("Files that could not be opened or read.", ("source",)),
    "source_partial_flushes_total": ("Unfinished last lines delivered after a quiet time.", ("source",)),
    "source_invalid_utf8_total": ("Lines with bytes that are not UTF-8 (replaced).", ("source",)),
    "source_truncated_lines_total": ("Lines cut at max_line_bytes.", ("source",)),
    "source_framing_errors_total": ("Lines that did not parse as the source's envelope (Docker, CRI, journal).",
                              ("source",)),
    "source_restarts_total": ("journald: times journalctl exited and was restarted.", ("source",)),
    "source_emfile_total": ("Files that could not be opened because the agent ran out of file descriptors.",
                            ("source",)),
    "parse_errors_total": ("Lines a parser skipped because their numbers could not be read.", ("source",)),
    "nvml_errors_total": ("NVML calls that failed, by call.", ("call",)),
    "scrapes_total": ("Scrapes of an engine's /metrics.", ("target",)),
    "scrape_errors_total": ("Failed scrapes of an engine's /metrics.", ("target",)),
    "store_write_errors_total": ("SQLite write failures (full disk, locked or corrupt database).", ()),
    "store_dropped_records_total": ("Records dropped because the write buffer was full during a store outage.", ()),
    "config_reloads_total": ("Config reloads attempted (SIGHUP).", ()),
    "config_reload_errors_total": ("Config reloads rejected; the last good config stays in force.", ()),
    "rule_load_errors_total": ("Rule loads (start-up or SIGHUP) rejected; the last good rule set stays in force.",
                               ()),
}


# Totals keys whose first label is an engine: exported with `engine` first and the deprecated `source` last.
ENGINE_COUNTERS = frozenset({"events_total"})


SERVER_GAUGES: tuple[tuple[str, str, str], ...] = (
    # (metric suffix, ServerStats field, help): exported as the engine reported them, unscaled
    ("running_requests", "running", "Requests being computed (the engine's running batch)."),
    ("waiting_requests", "waiting", "Requests accepted but waiting for a slot."),
    ("swapped_requests", "swapped", "Requests whose KV cache was swapped to CPU (vLLM V0)."),
    ("kv_cache_usage_ratio", "kv_usage_ratio", "Share of the KV cache in use (0–1)."),
    ("prompt_tokens_per_second", "prompt_tps", "Prompt (prefill) throughput."),
    ("generation_tokens_per_second", "gen_tps", "Generation (decode) throughput."),
    ("prefix_cache_hit_ratio", "prefix_hit_ratio", "Prefix-cache hit ratio (0–1)."),
)
FACT_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("server_kv_cache_tokens", "kv_cache_tokens", "KV-cache capacity in tokens, as the engine reported it."),
    ("server_kv_cache_bytes", "kv_cache_bytes", "Memory the engine gave the KV cache."),
    ("server_max_concurrency", "max_concurrency",
     "Requests of tokens_per_request tokens the engine's KV cache holds at once, as it reported."),
    ("server_max_num_seqs", "max_num_seqs", "The engine's max_num_seqs, as it reported it."),
    ("server_max_model_len", "max_model_len", "The engine's max_model_len, as it reported it."),
    ("server_gpu_memory_utilization_ratio", "gpu_memory_utilization",
     "The share of each GPU's memory the engine may use (its gpu_memory_utilization), as it reported it."),
)
GPU_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("gpu_memory_total_bytes", "memory_total_bytes", "GPU memory in total."),
    ("gpu_memory_used_bytes", "memory_used_bytes", "GPU memory in use."),
    ("gpu_memory_free_bytes", "memory_free_bytes", "GPU memory free."),
    ("gpu_memory_reserved_bytes", "memory_reserved_bytes", "GPU memory reserved by the driver."),
    ("gpu_utilization_ratio", "utilization_gpu_ratio", "Share of time a kernel was running (0–1)."),
    ("gpu_memory_utilization_ratio", "utilization_memory_ratio",
     "Share of time GPU memory was being read or written (0–1)."),
    ("gpu_temperature_celsius", "temperature_celsius", "GPU temperature."),
    ("gpu_power_watts", "power_watts", "GPU power draw."),
    ("gpu_power_limit_watts", "power_limit_watts", "GPU power limit."),
)


# Scraped per-request histograms exported for histogram_quantile: signal → (metric, help).
LATENCY_HISTOGRAMS: dict[str, tuple[str, str]] = {
    "ttft_seconds": ("request_ttft_seconds", "Time to first token of the requests the engine finished, from its "
                     "/metrics (cumulative since the agent started)."),
    "queue_time_seconds": ("request_queue_time_seconds", "Time the engine's finished requests waited in its queue, "
                           "from its /metrics (cumulative since the agent started)."),
    "e2e_latency_seconds": ("request_e2e_latency_seconds", "End-to-end latency of the engine's finished requests, "
                            "from its /metrics (cumulative since the agent started)."),
}


BUDGET_GAUGES: tuple[tuple[str, str, str], ...] = (
    # (metric, key in Snapshot.budget / Snapshot.configured, help)
    ("budget_max_concurrency", "max_concurrency",
     "Max concurrent requests the computed KV budget allows (deepinfer-agent budget)."),
    ("budget_usable_kv_bytes", "usable_kv_bytes", "KV-cache memory per GPU in the computed budget."),
    ("budget_kv_bytes_per_token", "kv_bytes_per_token", "KV-cache bytes per token per GPU in the computed budget."),
    ("budget_tokens_per_request", "tokens_per_request", "Tokens per request the computed budget assumes."),
    ("config_max_num_seqs", "max_num_seqs", "max_num_seqs as configured (server.max_num_seqs)."),
    ("config_max_queue_size", "max_queue_size", "max_queue_size as configured (server.max_queue_size)."),
    ("config_max_model_len", "max_model_len", "max_model_len as configured (server.max_model_len)."),
)
