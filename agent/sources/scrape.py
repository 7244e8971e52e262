"""The engine scrape source: poll an engine's own Prometheus `/metrics` and turn it into the same records
the log parsers produce (ServerStats, CapacityFacts, preemption / pending / queue_full Events).

Logs alone miss things: vLLM V0 warns on every 50th preemption only and V1 logs none before 0.12, access
logs can be off, and the KV usage an engine computes is exact where a log line is rounded. One
`Scraper` per configured target; `poll(now)` fetches only when the target's interval has passed on the
caller's clock (no sleeping, no thread), so the loop and the tests step it.

Counters become events by their increase since the previous scrape, summed over series: the first
successful scrape is a baseline (history from before the agent started is not replayed); a series that
appears later started at 0, so all of it counts; a value below the previous one, or a changed
`process_start_time_seconds`, means the engine restarted, and the new value is the increase.

Several series of one gauge (vLLM data-parallel engines, SGLang DP ranks) are combined per target:
request counts are summed, ratios take the worst (max) engine, capacity facts are one engine's (the
first in label order: every engine of one server is configured alike). SGLang tensor- and
pipeline-parallel ranks other than 0 are ignored, since they describe the same requests.

A failed scrape never raises out of `poll`: the target is down, the failure is counted and logged once
per failure episode, and the next interval tries again. Self-metrics are plain data (`stats()`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

from agent import http
from agent.config import ScrapeTarget
from agent.prom import Samples, exposition_samples
from agent.records import CapacityFact, Event, EventKind, Phase, Record, Server, ServerStats, Severity

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 << 20  # a vLLM exposition with many histograms is well under 1 MiB
_PREFIXES = ((Server.VLLM, "vllm:"), (Server.SGLANG, "sglang:"), (Server.LLAMACPP, "llamacpp:"), (Server.TGI, "tgi_"))
_ENABLE_HINT = {
    Server.VLLM: "vLLM serves /metrics on its API port",
    Server.SGLANG: "SGLang needs --enable-metrics",
    Server.TGI: "TGI serves /metrics on its API port and on --prometheus-port (default 9000)",
    Server.LLAMACPP: "llama-server needs --metrics",
}

Labels = Mapping[str, str]


@dataclass(frozen=True)
class ScrapeStats:
    """A snapshot of one target's self-metrics; counters only grow while the agent runs.

    `scrapes_total` counts attempts, `errors_total` the failed ones; `up` is whether the last attempt
    succeeded (False before the first); `last_error` is kept after recovery so an operator can see
    what it was. `server` is the configured engine, or the detected one for `auto`.
    """

    target: str
    url: str
    server: Server
    up: bool = False
    scrapes_total: int = 0
    errors_total: int = 0
    last_error: str | None = None
    last_duration_seconds: float | None = None
    last_success_seconds: float | None = None


@dataclass
class _Reading:
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
    facts: dict[str, float | str] = field(default_factory=dict)


class _HttpStatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class _ScrapeError(Exception):
    """A response that is not an error at the HTTP level but cannot be used."""


def _primary(labels: Labels) -> bool:
    """False for SGLang's non-zero tensor/pipeline-parallel ranks, which report the same requests again."""
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"


def _label_is(name: str, value: str) -> Callable[[Labels], bool]:
    return lambda labels: labels.get(name, "") == value


def _values(samples: Samples, name: str) -> list[float]:
    return [value for labels, value in samples.get(name, ()) if _primary(labels)]


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


def _first(samples: Samples, name: str) -> float | None:
    """One engine's value (the first in label order): for capacity, which every engine shares."""
    series = sorted(((sorted(labels.items()), value) for labels, value in samples.get(name, ()) if _primary(labels)))
    return series[0][1] if series else None


def _detect(samples: Samples) -> Server | None:
    for server, prefix in _PREFIXES:
        if any(name.startswith(prefix) for name in samples):
            return server
    return None


# vllm:cache_config_info label → (capacity fact, conversion). Label values are str(attribute): "None" = unset.
_VLLM_CACHE_FACTS: dict[str, tuple[str, Callable[[str], float | str]]] = {
    "block_size": ("block_size", int),
    "gpu_memory_utilization": ("gpu_memory_utilization", float),
    "num_gpu_blocks": ("gpu_blocks", int),
    "num_cpu_blocks": ("cpu_blocks", int),
    "cache_dtype": ("kv_cache_dtype", str),
    "kv_cache_memory_bytes": ("kv_cache_bytes", int),
    "kv_cache_size_tokens": ("kv_cache_tokens", int),
    "kv_cache_max_concurrency": ("max_concurrency", float),
}


class Scraper:
    """Polls one engine's `/metrics` on the caller's clock and keeps what the next scrape compares with.

    `source` is the name records and self-metrics carry (the config's `name`, default the URL).
    A body over `max_body_bytes` is refused (a wrong URL serving a file must not fill memory).
    `clock` only measures how long a scrape took; scheduling follows the `now` given to `poll`.
    """

    def __init__(self, url: str, *, server: Server = Server.VLLM, source: str | None = None,
                 interval_seconds: float = 10.0, timeout_seconds: float = 2.0,
                 max_body_bytes: int = MAX_BODY_BYTES, clock: Callable[[], float] = time.perf_counter) -> None:
        if server in (Server.KERNEL, Server.NVML):
            raise ValueError(f"scrape needs an engine (vllm, sglang, tgi, llamacpp or auto), not {server.value}")
        self.url = url
        self.server = server
        self.source = source or url
        self.interval_seconds = interval_seconds
        self.timeout_seconds = timeout_seconds
        self.max_body_bytes = max_body_bytes
        self._clock = clock
        # Engines are local: never send their scrape through an http_proxy from the environment.
        self._next_at = -math.inf
        self._detected: Server | None = None if server is Server.AUTO else server
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._next_counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._baseline = False  # a successful scrape has been seen: counters have something to compare with
        self._restarted = False
        self._start_time: float | None = None
        self._last_ok_at: float | None = None
        self._waiting = 0
        self._facts: dict[str, float | str] = {}
        self._up = False
        self._failing = False
        self._scrapes = 0
        self._errors = 0
        self._last_error: str | None = None
        self._last_duration: float | None = None

    @classmethod
    def from_target(cls, target: ScrapeTarget) -> Scraper:
        """A scraper for one `ScrapeTarget` of the config."""
        return cls(target.url, server=target.server, source=target.target_name(),
                   interval_seconds=target.interval_seconds, timeout_seconds=target.timeout())

    # -- state the metrics and status read -------------------------------------------------------

    def stats(self) -> ScrapeStats:
        return ScrapeStats(self.source, self.url, self._detected or self.server, self._up, self._scrapes,
                           self._errors, self._last_error, self._last_duration, self._last_ok_at)

    # -- the poll --------------------------------------------------------------------------------

    def poll(self, now: float) -> list[Record]:
        """Scrape when the interval has passed (at once on the first call); [] otherwise or on failure.

        A clock that went back by more than an interval does not stall the target: it is due again.
        """
        if now < self._next_at and self._next_at - now <= self.interval_seconds:
            return []
        self._next_at = now + self.interval_seconds
        self._scrapes += 1
        started = self._clock()
        try:
            samples = exposition_samples(self._fetch())
            records = self._records(samples, now)
        except (OSError, ValueError, _ScrapeError, _HttpStatusError, http.HttpTimeoutError,
                http.HttpConnectionError) as exc:
            self._last_duration = self._clock() - started
            self._fail(exc)
            return []
        except Exception as exc:  # a parser or mapping bug must cost this target, never the agent
            self._last_duration = self._clock() - started
            if not self._failing:
                log.exception("scrape %s: unexpected error reading %s", self.source, self.url)
                self._failing = True
            self._fail(exc)
            return []
        self._last_duration = self._clock() - started
        if self._failing:
            log.info("scrape %s: %s answers again", self.source, self.url)
        self._up, self._failing, self._last_ok_at = True, False, now
        return records

    def _fetch(self) -> str:
        try:
            reply = http.get(self.url, timeout_seconds=self.timeout_seconds, max_body_bytes=self.max_body_bytes,
                             headers={"Accept": "text/plain;version=0.0.4"})
        except http.HttpBodyTooLargeError as exc:
            raise _ScrapeError(f"{exc}; is this a /metrics URL?") from exc
        if reply.status >= 400:
            raise _HttpStatusError(reply.status)
        return reply.body.decode("utf-8", errors="replace")

    def _fail(self, exc: BaseException) -> None:
        self._up = False
        self._errors += 1
        self._last_error = self._describe(exc)
        if not self._failing:
            log.warning("scrape %s: %s: %s; the target is down until a scrape succeeds (retried every %g s)",
                        self.source, self.url, self._last_error, self.interval_seconds)
        self._failing = True

    def _describe(self, exc: BaseException) -> str:
        server = self._detected or self.server
        hint = _ENABLE_HINT.get(server, "")
        if isinstance(exc, _HttpStatusError):
            text = f"HTTP {exc.status} {_reason(exc.status)}".rstrip()
            return f"{text} ({hint}; check the URL's port and path)" if exc.status in (404, 501) and hint else text
        if isinstance(exc, http.HttpTimeoutError):
            return f"no answer within {self.timeout_seconds:g} s"
        if isinstance(exc, http.HttpConnectionError):
            return f"cannot connect: {str(exc).split(': ', 1)[-1][:300]}"
        if isinstance(exc, ValueError):
            return f"not a Prometheus text exposition: {str(exc)[:200]}"
        if isinstance(exc, _ScrapeError | OSError):
            return str(exc)[:300] or type(exc).__name__
        return f"unexpected {type(exc).__name__}: {str(exc)[:300]} (a bug: please report it)"

    # -- exposition → records -------------------------------------------------------------------

    def _records(self, samples: Samples, now: float) -> list[Record]:
        server: Server = self.server
        if server is Server.AUTO:
            server = _detect(samples) or Server.AUTO
        prefix = dict(_PREFIXES).get(server)
        if prefix is None or not any(name.startswith(prefix) for name in samples):
            found = _detect(samples)
            raise _ScrapeError(f"no {server.value} metrics in the response"
                               + (f" (it has {found.value} metrics: set server: {found.value})" if found else
                                  f" ({_ENABLE_HINT.get(server, 'is this an engine /metrics URL?')})"))
        self._detected = server
        had_baseline = self._baseline
        self._next_counters = {}
        start = _first(samples, "process_start_time_seconds")
        self._restarted = start is not None and self._start_time is not None and start != self._start_time
        elapsed = now - self._last_ok_at if self._last_ok_at is not None and now > self._last_ok_at else None
        reading = {Server.VLLM: self._vllm, Server.SGLANG: self._sglang, Server.TGI: self._tgi,
                   Server.LLAMACPP: self._llamacpp}[server](samples, elapsed)
        # Only a whole successful reading moves the comparison point.
        self._counters, self._baseline = self._next_counters, True
        self._start_time = start if start is not None else self._start_time
        return self._emit(server, reading, now, had_baseline)

    def _increase(self, samples: Samples, name: str, where: Callable[[Labels], bool] = _primary
                  ) -> tuple[float, float] | None:
        """(Increase since the previous scrape, current total) of a counter summed over its series; None
        when the exposition lacks it. See the module docstring for baselines and restarts."""
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
                increase += max(value, 0.0) if self._baseline else 0.0
            elif self._restarted or value < before:
                increase += max(value, 0.0)
            else:
                increase += value - before
        return increase, total

    def _count(self, samples: Samples, name: str, where: Callable[[Labels], bool] = _primary
               ) -> tuple[int, int] | None:
        result = self._increase(samples, name, where)
        return None if result is None else (round(result[0]), round(result[1]))

    def _rate(self, samples: Samples, name: str, elapsed: float | None) -> float | None:
        result = self._increase(samples, name)
        return None if result is None or elapsed is None else result[0] / elapsed

    def _vllm(self, samples: Samples, elapsed: float | None) -> _Reading:
        usage = _max(samples, "vllm:kv_cache_usage_perc")
        reading = _Reading(
            running=_sum_int(samples, "vllm:num_requests_running"),
            waiting=_sum_int(samples, "vllm:num_requests_waiting"),
            swapped=_sum_int(samples, "vllm:num_requests_swapped"),
            kv_usage_ratio=usage if usage is not None else _max(samples, "vllm:gpu_cache_usage_perc"),
            prompt_tps=self._rate(samples, "vllm:prompt_tokens", elapsed),
            gen_tps=self._rate(samples, "vllm:generation_tokens", elapsed),
            preemptions=self._count(samples, "vllm:num_preemptions"),
        )
        hits = self._increase(samples, "vllm:prefix_cache_hits")
        queries = self._increase(samples, "vllm:prefix_cache_queries")
        if hits is None or queries is None:  # 0.8.x spelling
            hits = self._increase(samples, "vllm:gpu_prefix_cache_hits")
            queries = self._increase(samples, "vllm:gpu_prefix_cache_queries")
        if hits is not None and queries is not None:
            reading.prefix_hit_ratio = hits[0] / queries[0] if queries[0] > 0 else None
        else:  # V0: a gauge the engine computes itself, negative when it has nothing to say
            rate = _max(samples, "vllm:gpu_prefix_cache_hit_rate")
            reading.prefix_hit_ratio = rate if rate is not None and rate >= 0 else None
        for reason in sorted({labels.get("reason", "") for labels, _ in samples.get("vllm:admission_rejections", ())}):
            rejected = self._count(samples, "vllm:admission_rejections", _label_is("reason", reason))
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
        return reading

    def _sglang(self, samples: Samples, elapsed: float | None) -> _Reading:
        preemptions = self._count(samples, "sglang:num_retracted_requests")  # 0.5.23: a counter
        if preemptions is None:
            preemptions = self._count(samples, "sglang:total_retracted_reqs")  # 0.4.10: a cumulative gauge
        reading = _Reading(
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
            value = _first(samples, metric)
            if value is not None and value > 0:
                reading.facts[fact] = int(value)
        return reading

    def _tgi(self, samples: Samples, elapsed: float | None) -> _Reading:
        reserved = _sum(samples, "tgi_batch_current_max_tokens")
        capacity = _first(samples, "tgi_batch_max_total_tokens")
        reading = _Reading(
            running=_sum_int(samples, "tgi_batch_current_size"),
            waiting=_sum_int(samples, "tgi_queue_size"),
            kv_usage_ratio=reserved / capacity if reserved is not None and capacity else None,
            kv_used_tokens=round(reserved) if reserved is not None else None,
        )
        if capacity:
            reading.facts["kv_cache_tokens"] = int(capacity)
        overloaded = self._count(samples, "tgi_request_failure", _label_is("err", "overloaded"))
        if overloaded is not None and overloaded[0] > 0:
            reading.rejections["max_concurrent_requests"] = (overloaded[0], 429)
        return reading

    def _llamacpp(self, samples: Samples, elapsed: float | None) -> _Reading:
        used = _sum_int(samples, "llamacpp:kv_cache_tokens")
        return _Reading(
            running=_sum_int(samples, "llamacpp:requests_processing"),
            waiting=_sum_int(samples, "llamacpp:requests_deferred"),
            kv_usage_ratio=_max(samples, "llamacpp:kv_cache_usage_ratio"),
            prompt_tps=_sum(samples, "llamacpp:prompt_tokens_seconds"),
            gen_tps=_sum(samples, "llamacpp:predicted_tokens_seconds"),
            kv_used_tokens=used,
        )

    def _emit(self, server: Server, r: _Reading, now: float, had_baseline: bool) -> list[Record]:
        out: list[Record] = []
        for name, value in r.facts.items():
            if self._facts.get(name) != value:  # on the first scrape, and when the engine came back changed
                out.append(CapacityFact(now, self.source, name, value))
                self._facts[name] = value
        count = r.preemptions[0] if r.preemptions is not None and had_baseline else None
        out.append(ServerStats(now, self.source, server, r.running, r.waiting, r.swapped, r.kv_usage_ratio,
                               r.prompt_tps, r.gen_tps, r.prefix_hit_ratio, count, r.kv_used_tokens))
        if r.waiting is not None:
            before, self._waiting = self._waiting, r.waiting
            if r.waiting > 0 and before == 0:
                out.append(Event(now, self.source, server, EventKind.PENDING, Severity.INFO, Phase.QUEUE,
                                 f"queue became non-empty: {r.waiting} waiting, {r.running} running",
                                 {"waiting": r.waiting, "running": r.running}))
        if r.preemptions is not None and r.preemptions[0] > 0:
            out.append(Event(now, self.source, server, EventKind.PREEMPTION, Severity.WARNING, Phase.RUNTIME,
                             f"{r.preemptions[0]} preemptions since the last scrape",
                             {"count": r.preemptions[0], "total_preemptions": r.preemptions[1]}))
        for reason, (rejected, status) in r.rejections.items():
            fields: dict[str, float | int | str | bool | None] = {"count": rejected, "reason": reason}
            if status is not None:
                fields["status"] = status
            out.append(Event(now, self.source, server, EventKind.QUEUE_FULL, Severity.WARNING, Phase.ADMISSION,
                             f"{rejected} requests rejected at admission ({reason}) since the last scrape", fields))
        return out
