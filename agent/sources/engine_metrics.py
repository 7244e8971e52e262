"""What each engine's `/metrics` says, read into one `Reading`: the per-engine metric names, and the
counter and histogram state one scrape is compared with (`Deltas`). agent/sources/scrape.py fetches
the exposition and turns the reading into records; docs/sources.md lists every name read here.

Counters become increases since the previous scrape, summed over series: the first successful scrape
is a baseline (history from before the agent started is not replayed); a series that appears later
started at 0, so all of it counts; a value below the previous one, or a changed
`process_start_time_seconds`, means the engine restarted, and the new value is the increase. Histograms
follow the same rules per bucket (agent/histograms.py): what a scrape keeps is the window of requests
that finished since the previous one.

Several series of one gauge (vLLM data-parallel engines, SGLang DP ranks) are combined per target:
request counts are summed, ratios take the worst (max) engine, capacity facts are one engine's (the
first in label order: every engine of one server is configured alike), histograms are added. SGLang
tensor- and pipeline-parallel ranks other than 0 are ignored, since they describe the same requests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent import histograms
from agent.histograms import Buckets
from agent.prom import Samples
from agent.records import EventKind, Server

Labels = Mapping[str, str]
_Key = tuple[str, tuple[tuple[str, str], ...]]

# Histogram signal (agent.records.HISTOGRAM_SIGNALS) → the engine's histogram of it, per engine.
HISTOGRAMS: dict[Server, dict[str, str]] = {
    Server.VLLM: {
        "ttft_seconds": "vllm:time_to_first_token_seconds",
        "queue_time_seconds": "vllm:request_queue_time_seconds",
        "e2e_latency_seconds": "vllm:e2e_request_latency_seconds",
        "inference_time_seconds": "vllm:request_inference_time_seconds",
        "prompt_tokens": "vllm:request_prompt_tokens",
        "output_tokens": "vllm:request_generation_tokens",
    },
    Server.SGLANG: {
        "ttft_seconds": "sglang:time_to_first_token_seconds",
        "queue_time_seconds": "sglang:queue_time_seconds",
        "e2e_latency_seconds": "sglang:e2e_request_latency_seconds",
        "prompt_tokens": "sglang:prompt_tokens_histogram",
        "output_tokens": "sglang:generation_tokens_histogram",
    },
    Server.TGI: {
        "queue_time_seconds": "tgi_request_queue_duration",
        "e2e_latency_seconds": "tgi_request_duration",
        "inference_time_seconds": "tgi_request_inference_duration",
        "prompt_tokens": "tgi_request_input_length",
        "output_tokens": "tgi_request_generated_tokens",
    },
    Server.LLAMACPP: {},
}


@dataclass
class Reading:
    """What one exposition says, before it becomes records."""

    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    kv_usage_ratio: float | None = None
    prompt_tps: float | None = None
    gen_tps: float | None = None
    prefix_hit_ratio: float | None = None
    kv_used_tokens: int | None = None
    preemptions: tuple[int, int] | None = None  # (increase since the last scrape, current total)
    rejections: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # reason → (count, status)
    rejections_counted: bool = False  # the exposition has the engine's admission-rejection counter
    facts: dict[str, float | str] = field(default_factory=dict)
    histograms: dict[str, Buckets] = field(default_factory=dict)  # signal → the window since the last scrape

    def counted(self) -> frozenset[EventKind]:
        """The event kinds this reading counts exactly (every occurrence, from the engine's own counters)."""
        kinds = set()
        if self.preemptions is not None:
            kinds.add(EventKind.PREEMPTION)
        if self.rejections_counted:
            kinds.add(EventKind.QUEUE_FULL)
        if self.waiting is not None:
            kinds.add(EventKind.PENDING)
        return frozenset(kinds)


def primary(labels: Labels) -> bool:
    """False for SGLang's non-zero tensor/pipeline-parallel ranks, which report the same requests again."""
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"


def _label_is(name: str, value: str) -> Callable[[Labels], bool]:
    return lambda labels: labels.get(name, "") == value


def _values(samples: Samples, name: str) -> list[float]:
    return [value for labels, value in samples.get(name, ()) if primary(labels)]


def _sum_int(samples: Samples, name: str) -> int | None:
    values = _values(samples, name)
    return round(sum(values)) if values else None


def _sum(samples: Samples, name: str) -> float | None:
    values = _values(samples, name)
    return sum(values) if values else None


def _max(samples: Samples, name: str) -> float | None:
    values = _values(samples, name)
    return max(values) if values else None


def _mean(samples: Samples, name: str) -> float | None:
    values = _values(samples, name)
    return sum(values) / len(values) if values else None


def first(samples: Samples, name: str) -> float | None:
    """One engine's value (the first in label order): for capacity, which every engine shares."""
    series = sorted(((sorted(labels.items()), value) for labels, value in samples.get(name, ()) if primary(labels)))
    return series[0][1] if series else None


class Deltas:
    """The counters and histogram buckets of the last successful scrape, and the ones being read now.

    `begin` starts a reading (saying whether the engine restarted); `commit` makes it the comparison point
    once the whole reading succeeded, so a failed or half-read scrape never moves it.
    """

    def __init__(self) -> None:
        self._counters: dict[_Key, float] = {}
        self._next_counters: dict[_Key, float] = {}
        self._buckets: dict[_Key, Buckets] = {}
        self._next_buckets: dict[_Key, Buckets] = {}
        self.baseline = False  # a successful scrape has been seen: counters have something to compare with
        self.restarted = False

    def begin(self, restarted: bool) -> None:
        self._next_counters, self._next_buckets, self.restarted = {}, {}, restarted

    def commit(self) -> None:
        self._counters, self._buckets, self.baseline = self._next_counters, self._next_buckets, True

    def increase(self, samples: Samples, name: str, where: Callable[[Labels], bool] = primary
                 ) -> tuple[float, float] | None:
        """(Increase since the previous scrape, current total) of a counter summed over its series; None
        when the exposition lacks it."""
        series = samples.get(name)
        if series is None:
            return None
        increase = total = 0.0
        for labels, value in series:
            if not where(labels):
                continue
            key = (name, tuple(sorted(labels.items())))
            self._next_counters[key] = value
            total += value
            before = self._counters.get(key)
            if before is None:  # a counter never goes below 0: a negative value is garbage, not a decrease
                increase += max(value, 0.0) if self.baseline else 0.0
            elif self.restarted or value < before:
                increase += max(value, 0.0)
            else:
                increase += value - before
        return increase, total

    def count(self, samples: Samples, name: str, where: Callable[[Labels], bool] = primary) -> tuple[int, int] | None:
        result = self.increase(samples, name, where)
        return None if result is None else (round(result[0]), round(result[1]))

    def rate(self, samples: Samples, name: str, elapsed: float | None) -> float | None:
        result = self.increase(samples, name)
        return None if result is None or elapsed is None else result[0] / elapsed

    def histogram(self, samples: Samples, name: str) -> Buckets | None:
        """The requests observed since the previous scrape, all primary series added; None when the
        exposition lacks the histogram or on the baseline scrape (its history is not replayed)."""
        per_series: dict[tuple[tuple[str, str], ...], list[tuple[str, float]]] = {}
        for labels, value in samples.get(f"{name}_bucket", ()):
            if primary(labels):
                rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
                per_series.setdefault(rest, []).append((labels.get("le", ""), value))
        if not per_series:
            return None
        sums = {tuple(sorted(labels.items())): value for labels, value in samples.get(f"{name}_sum", ())}
        windows: list[Buckets] = []
        for rest, series in per_series.items():
            now = histograms.from_series(series, sums.get(rest, 0.0))
            if now is None:
                continue
            key = (name, rest)
            self._next_buckets[key] = now
            before = self._buckets.get(key)
            if before is None and not self.baseline:
                continue
            windows.append(histograms.delta(before, now, self.restarted))
        return histograms.add(windows) if self.baseline else None


# vllm:cache_config_info label → (capacity fact, conversion). Label values are str(attribute): "None" = unset.
_VLLM_CACHE_FACTS: dict[str, tuple[str, Callable[[str], float | str]]] = {
    "block_size": ("block_size", int),
    "gpu_memory_utilization": ("gpu_memory_utilization", float),
    "num_gpu_blocks": ("gpu_blocks", int),
    "num_cpu_blocks": ("cpu_blocks", int),
    "cache_dtype": ("kv_cache_dtype", str),
    # not `kv_cache_memory_bytes`: it is the size asked for (--kv-cache-memory-bytes, or VLLM_CPU_KVCACHE_SPACE on
    # the CPU backend: 1 GiB for a cache of 32 blocks × 32 tokens × 512 B = 512 KiB, measured), not the cache built
    "kv_cache_size_tokens": ("kv_cache_tokens", int),
    "kv_cache_max_concurrency": ("max_concurrency", float),
}


def _histograms(server: Server, samples: Samples, deltas: Deltas, reading: Reading) -> Reading:
    for signal, name in HISTOGRAMS[server].items():
        window = deltas.histogram(samples, name)
        if window is not None:
            reading.histograms[signal] = window
    return reading


def read_vllm(samples: Samples, deltas: Deltas, elapsed: float | None) -> Reading:
    usage = _max(samples, "vllm:kv_cache_usage_perc")
    reading = Reading(
        running=_sum_int(samples, "vllm:num_requests_running"),
        waiting=_sum_int(samples, "vllm:num_requests_waiting"),
        swapped=_sum_int(samples, "vllm:num_requests_swapped"),
        kv_usage_ratio=usage if usage is not None else _max(samples, "vllm:gpu_cache_usage_perc"),
        prompt_tps=deltas.rate(samples, "vllm:prompt_tokens", elapsed),
        gen_tps=deltas.rate(samples, "vllm:generation_tokens", elapsed),
        preemptions=deltas.count(samples, "vllm:num_preemptions"),
        rejections_counted="vllm:admission_rejections" in samples,
    )
    hits = deltas.increase(samples, "vllm:prefix_cache_hits")
    queries = deltas.increase(samples, "vllm:prefix_cache_queries")
    if hits is None or queries is None:  # 0.8.x spelling
        hits = deltas.increase(samples, "vllm:gpu_prefix_cache_hits")
        queries = deltas.increase(samples, "vllm:gpu_prefix_cache_queries")
    if hits is not None and queries is not None:
        reading.prefix_hit_ratio = hits[0] / queries[0] if queries[0] > 0 else None
    else:  # V0: a gauge the engine computes itself, negative when it has nothing to say
        rate = _max(samples, "vllm:gpu_prefix_cache_hit_rate")
        reading.prefix_hit_ratio = rate if rate is not None and rate >= 0 else None
    for reason in sorted({labels.get("reason", "") for labels, _ in samples.get("vllm:admission_rejections", ())}):
        rejected = deltas.count(samples, "vllm:admission_rejections", _label_is("reason", reason))
        if rejected is not None and rejected[0] > 0:
            reading.rejections[reason or "unknown"] = (rejected[0], None)
    configs = sorted(samples.get("vllm:cache_config_info", ()), key=lambda s: sorted(s[0].items()))
    if configs:
        labels = configs[0][0]
        for label, (fact, convert) in _VLLM_CACHE_FACTS.items():
            text = labels.get(label)
            if text is None or text in ("None", ""):
                continue
            try:
                reading.facts[fact] = convert(text)
            except ValueError:
                continue
    return _histograms(Server.VLLM, samples, deltas, reading)


def read_sglang(samples: Samples, deltas: Deltas, elapsed: float | None) -> Reading:
    preemptions = deltas.count(samples, "sglang:num_retracted_requests")  # 0.5.23: a counter
    if preemptions is None:
        preemptions = deltas.count(samples, "sglang:total_retracted_reqs")  # 0.4.10: a cumulative gauge
    reading = Reading(
        running=_sum_int(samples, "sglang:num_running_reqs"),
        waiting=_sum_int(samples, "sglang:num_queue_reqs"),
        kv_usage_ratio=_max(samples, "sglang:token_usage"),
        gen_tps=_sum(samples, "sglang:gen_throughput"),
        prefix_hit_ratio=_mean(samples, "sglang:cache_hit_rate"),
        kv_used_tokens=_sum_int(samples, "sglang:num_used_tokens"),
        preemptions=preemptions,
    )
    for metric, fact in (("sglang:max_total_num_tokens", "kv_cache_tokens"),
                         ("sglang:context_len", "max_model_len"), ("sglang:page_size", "block_size")):
        value = first(samples, metric)
        if value is not None and value > 0:
            reading.facts[fact] = int(value)
    return _histograms(Server.SGLANG, samples, deltas, reading)


def read_tgi(samples: Samples, deltas: Deltas, elapsed: float | None) -> Reading:
    reserved = _sum(samples, "tgi_batch_current_max_tokens")
    capacity = first(samples, "tgi_batch_max_total_tokens")
    reading = Reading(
        running=_sum_int(samples, "tgi_batch_current_size"),
        waiting=_sum_int(samples, "tgi_queue_size"),
        kv_usage_ratio=reserved / capacity if reserved is not None and capacity else None,
        kv_used_tokens=round(reserved) if reserved is not None else None,
        rejections_counted="tgi_request_failure" in samples,
    )
    if capacity:
        reading.facts["kv_cache_tokens"] = int(capacity)
    overloaded = deltas.count(samples, "tgi_request_failure", _label_is("err", "overloaded"))
    if overloaded is not None and overloaded[0] > 0:
        reading.rejections["max_concurrent_requests"] = (overloaded[0], 429)
    return _histograms(Server.TGI, samples, deltas, reading)


def read_llamacpp(samples: Samples, deltas: Deltas, elapsed: float | None) -> Reading:
    used = _sum_int(samples, "llamacpp:kv_cache_tokens")
    return Reading(
        running=_sum_int(samples, "llamacpp:requests_processing"),
        waiting=_sum_int(samples, "llamacpp:requests_deferred"),
        kv_usage_ratio=_max(samples, "llamacpp:kv_cache_usage_ratio"),
        # throughput from the token counters: `prompt_tokens_seconds` / `predicted_tokens_seconds` are the speed
        # of one busy slot while it computed (26,475 prompt tok/s where ~2 k were served, measured), not a rate
        prompt_tps=deltas.rate(samples, "llamacpp:prompt_tokens", elapsed),
        gen_tps=deltas.rate(samples, "llamacpp:tokens_predicted", elapsed),
        kv_used_tokens=used,
    )


READERS: dict[Server, Callable[[Samples, Deltas, float | None], Reading]] = {
    Server.VLLM: read_vllm, Server.SGLANG: read_sglang, Server.TGI: read_tgi, Server.LLAMACPP: read_llamacpp}
