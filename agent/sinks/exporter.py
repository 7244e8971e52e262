"""Prometheus exposition: the only module that imports prometheus_client.

One custom collector rebuilds every metric family from an immutable `Snapshot` on each scrape, so a
source, a GPU or a scrape target that disappears takes its series with it, and the daemon's loop never
shares mutable state with the HTTP thread (it swaps in a new snapshot; the collector reads the latest).
Counters come from restart-safe totals kept in SQLite, so `rate()` sees no false reset after a restart.
Conventions: `deepinfer_` prefix, base units, `_total` counters, `_ratio` 0–1, labels bounded (source
names from the config, GPU indexes, event kinds, Xid codes, NVML call names) — never request ids,
prompts, pids or hostnames.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.bookkeeping import SourceStats
from agent.capacity.capacity import Capacity
from agent.inert import printable
from agent.records import EventKind, GpuProcessSample, GpuSample, ServerStats
from agent.sinks.httpserve import BoundedServer, Request, Response, ServingStats
from agent.verdicts import Finding

Labels = tuple[str, ...]
Totals = Mapping[tuple[str, Labels], float]

# Restart-safe counters: totals key (the metric name without `deepinfer_`) → (help, label names). The
# daemon keeps their values in SQLite's `totals` table under the same keys.
COUNTERS: dict[str, tuple[str, Labels]] = {
    "events_total": ("Classified events (OOM, preemption, pending, queue_full, deadline_exceeded, http_429/503, "
               "engine_dead, cuda_error, nccl_timeout, xid, gpu_lost).", ("source", "server", "kind")),
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


@dataclass(frozen=True)
class TargetState:
    """One engine /metrics target as the exporter reports it."""

    target: str
    up: bool
    last_duration_seconds: float | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything the exporter shows, taken at one instant by the daemon loop."""

    version: str
    started_at: float
    totals: Totals = field(default_factory=dict)
    sources: Sequence[SourceStats] = ()
    servers: Mapping[str, ServerStats] = field(default_factory=dict)
    facts: Mapping[str, Mapping[str, float | str]] = field(default_factory=dict)
    gpus: Sequence[GpuSample] = ()
    gpu_processes: Sequence[GpuProcessSample] = ()
    nvml_enabled: bool = False
    nvml_up: bool = False
    targets: Sequence[TargetState] = ()
    store_up: bool = True
    store_buffered_records: int = 0
    store_size_bytes: int | None = None
    budget: Mapping[str, float] = field(default_factory=dict)
    capacities: Mapping[str, Capacity] = field(default_factory=dict)
    configured: Mapping[str, float] = field(default_factory=dict)
    config_last_reload_ok: bool = True
    findings: Sequence[Finding] = ()


def _gauge(name: str, doc: str, labels: Labels = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"deepinfer_{name}", doc, labels=list(labels))


_SERVER_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    # (metric suffix, ServerStats field, help, scale)
    ("running_requests", "running", "Requests being computed (the engine's running batch).", 1.0),
    ("waiting_requests", "waiting", "Requests accepted but waiting for a slot.", 1.0),
    ("swapped_requests", "swapped", "Requests whose KV cache was swapped to CPU (vLLM V0).", 1.0),
    ("kv_cache_usage_ratio", "kv_usage_ratio", "Share of the KV cache in use (0–1).", 1.0),
    ("prompt_tokens_per_second", "prompt_tps", "Prompt (prefill) throughput.", 1.0),
    ("generation_tokens_per_second", "gen_tps", "Generation (decode) throughput.", 1.0),
    ("prefix_cache_hit_ratio", "prefix_hit_ratio", "Prefix-cache hit ratio (0–1).", 1.0),
)
_FACT_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("server_kv_cache_tokens", "kv_cache_tokens", "KV-cache capacity in tokens, as the engine reported it."),
    ("server_kv_cache_bytes", "kv_cache_bytes", "Memory the engine gave the KV cache."),
    ("server_max_concurrency", "max_concurrency",
     "Requests of tokens_per_request tokens the engine's KV cache holds at once, as it reported."),
    ("server_max_num_seqs", "max_num_seqs", "The engine's max_num_seqs, as it reported it."),
    ("server_max_model_len", "max_model_len", "The engine's max_model_len, as it reported it."),
    ("server_gpu_memory_utilization_ratio", "gpu_memory_utilization",
     "The share of each GPU's memory the engine may use (its gpu_memory_utilization), as it reported it."),
)
_GPU_GAUGES: tuple[tuple[str, str, str], ...] = (
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


class SnapshotCollector(Collector):
    """Builds fresh metric families from the latest snapshot on every scrape."""

    def __init__(self, latest: Callable[[], Snapshot]) -> None:
        self._latest = latest

    def collect(self) -> Iterator[Metric]:
        snap = self._latest()
        families = itertools.chain(_counters(_with_zero_events(snap.totals, snap.servers)), _agent(snap),
                                   _sources(snap.sources), _servers(snap.servers, snap.facts), _gpus(snap),
                                   _budget(snap), _findings(snap.findings))
        for family in families:
            yield _inert_labels(family)


def _inert_labels(family: Metric) -> Metric:
    """Label values made `printable`: a source is named after its file (`vllm/<file>`), and a file name may
    hold terminal escapes that a person reading /metrics, or a dashboard, would otherwise be shown raw."""
    if any(printable(v, keep_newlines=False) != v for s in family.samples for v in s.labels.values()):
        family.samples = [s._replace(labels={k: printable(v, keep_newlines=False) for k, v in s.labels.items()})
                          for s in family.samples]
    return family


def _with_zero_events(totals: Totals, servers: Mapping[str, ServerStats]) -> dict[tuple[str, Labels], float]:
    """Every event kind at 0 for each engine already known (by an event or a load sample), so that the first
    OOM of an engine is a step from 0 to 1 that `increase()` and `rate()` can see, not a series born at 1."""
    out = dict(totals)
    engines = {(labels[0], labels[1]) for (name, labels) in totals if name == "events_total" and len(labels) == 3}
    engines |= {(source, stats.server.value) for source, stats in servers.items()}
    for source, server in engines:
        for kind in EventKind:
            out.setdefault(("events_total", (source, server, kind.value)), 0.0)
    return out


def _counters(totals: Totals) -> Iterator[Metric]:
    by_name: dict[str, list[tuple[Labels, float]]] = {}
    for (name, labels), value in totals.items():
        by_name.setdefault(name, []).append((labels, value))
    for name, (doc, label_names) in COUNTERS.items():
        family = CounterMetricFamily(f"deepinfer_{name.removesuffix('_total')}", doc, labels=list(label_names))
        for labels, value in sorted(by_name.get(name, [])):
            if len(labels) == len(label_names):
                family.add_metric(list(labels), value)
        yield family


def _single(name: str, doc: str, value: float | None) -> GaugeMetricFamily:
    """A gauge with one unlabelled sample, or none when the value is unknown."""
    family = _gauge(name, doc)
    if value is not None:
        family.add_metric([], float(value))
    return family


def _agent(snap: Snapshot) -> Iterator[Metric]:
    info = InfoMetricFamily("deepinfer_agent", "The agent's version.", labels=["version"])
    info.add_metric([snap.version], {})
    yield info
    yield _single("agent_start_time_seconds", "When the agent process started (Unix time).", snap.started_at)
    yield _single("store_up", "1 while SQLite writes succeed; 0 while records are buffered or dropped.",
                  snap.store_up)
    yield _single("store_buffered_records", "Records held in memory while the database cannot be written.",
                  snap.store_buffered_records)
    yield _single("store_size_bytes", "Size of the SQLite database (no sample while it cannot be opened).",
                  snap.store_size_bytes)
    yield _single("config_last_reload_success", "1 when the last config reload was accepted.",
                  snap.config_last_reload_ok)
    yield _single("nvml_up", "1 while NVML answers for every GPU; 0 when the driver is missing or a GPU is lost.",
                  snap.nvml_up if snap.nvml_enabled else None)
    up = _gauge("scrape_up", "1 when the last scrape of the engine's /metrics succeeded.", ("target",))
    duration = _gauge("scrape_duration_seconds", "How long the last scrape of the engine's /metrics took.",
                      ("target",))
    for t in snap.targets:
        up.add_metric([t.target], float(t.up))
        if t.last_duration_seconds is not None:
            duration.add_metric([t.target], t.last_duration_seconds)
    yield up
    yield duration


def _sources(sources: Iterable[SourceStats]) -> Iterator[Metric]:
    up = _gauge("source_up", "1 while the log source can read; 0 when its path is missing, a directory, a dangling "
                "symlink, unreadable, or the agent's own store.", ("source",))
    lag = _gauge("source_lag_bytes", "Bytes written to the source's files but not read yet.", ("source",))
    files = _gauge("source_files", "Files the source has open (live and draining rotated ones).", ("source",))
    down = InfoMetricFamily("deepinfer_source_down", "Why a source is down (no sample while it is up).",
                            labels=["source", "reason"])
    for s in sources:
        up.add_metric([s.source], float(s.up))
        lag.add_metric([s.source], s.lag_bytes)
        files.add_metric([s.source], s.files)
        if not s.up and s.down_reason:
            down.add_metric([s.source, s.down_reason], {})
    yield from (up, lag, files, down)


def _servers(servers: Mapping[str, ServerStats], facts: Mapping[str, Mapping[str, float | str]]) -> Iterator[Metric]:
    for suffix, attr, doc, scale in _SERVER_GAUGES:
        family = _gauge(f"server_{suffix}", doc, ("source", "server"))
        for source, stats in sorted(servers.items()):
            value = getattr(stats, attr)
            if value is not None:
                family.add_metric([source, stats.server.value], float(value) * scale)
        yield family
    last = _gauge("server_last_sample_timestamp_seconds", "Time of the latest load sample (Unix time).",
                  ("source", "server"))
    for source, stats in sorted(servers.items()):
        if stats.ts is not None:
            last.add_metric([source, stats.server.value], stats.ts)
    yield last
    for metric, name, doc in _FACT_GAUGES:
        family = _gauge(metric, doc, ("source",))
        for source, values in sorted(facts.items()):
            value = values.get(name)
            if isinstance(value, int | float):
                family.add_metric([source], float(value))
        yield family


def _gpus(snap: Snapshot) -> Iterator[Metric]:
    info = InfoMetricFamily("deepinfer_gpu", "Identity of each GPU NVML reports.", labels=["gpu", "uuid", "name"])
    for g in snap.gpus:
        info.add_metric([str(g.gpu), g.uuid, g.name], {})
    yield info
    for metric, attr, doc in _GPU_GAUGES:
        family = _gauge(metric, doc, ("gpu",))
        for g in snap.gpus:
            value = getattr(g, attr)
            if value is not None:
                family.add_metric([str(g.gpu)], float(value))
        yield family
    used = _gauge("gpu_process_memory_used_bytes",
                  "GPU memory held by compute processes (the engine's own share), summed per GPU.", ("gpu",))
    count = _gauge("gpu_processes", "Compute processes on the GPU.", ("gpu",))
    per_gpu: dict[int, list[GpuProcessSample]] = {}
    for p in snap.gpu_processes:
        per_gpu.setdefault(p.gpu, []).append(p)
    for gpu, procs in sorted(per_gpu.items()):
        count.add_metric([str(gpu)], len(procs))
        known = [p.used_memory_bytes for p in procs if p.used_memory_bytes is not None]
        if known:
            used.add_metric([str(gpu)], float(sum(known)))
    yield used
    yield count


_BUDGET_GAUGES: tuple[tuple[str, str, str], ...] = (
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


def _budget(snap: Snapshot) -> Iterator[Metric]:
    for metric, key, doc in _BUDGET_GAUGES:
        values = snap.budget if metric.startswith("budget_") else snap.configured
        yield _single(metric, doc, values.get(key))
    governing = _gauge("capacity_max_concurrency", "Requests the engine holds at once at the budget's tokens per "
                       "request: the engine's own figure once it reported one, else the paper budget "
                       "(`basis` says which).", ("source", "basis"))
    for source, cap in sorted(snap.capacities.items()):
        if cap.max_concurrency is not None and cap.governs is not None:
            governing.add_metric([source, cap.governs], float(cap.max_concurrency))
    yield governing


def _findings(findings: Sequence[Finding]) -> Iterator[Metric]:
    """One series per active finding (rule × engine: both bounded, by the rule files and the config)."""
    active = _gauge("finding_active", "1 while the advisor's finding is active (docs/rules.md).",
                    ("rule", "engine", "severity"))
    value = _gauge("recommended_value", "The value an active finding recommends for its knob.",
                   ("rule", "engine", "knob"))
    for f in findings:
        if not f.active:
            continue
        active.add_metric([f.rule, f.engine, f.severity.value], 1.0)
        if f.knob is not None and isinstance(f.recommended, int | float):
            value.add_metric([f.rule, f.engine, f.knob.value], float(f.recommended))
    yield active
    yield value


# --- serving -----------------------------------------------------------------------------------------

_LANDING = b"""<!doctype html><html><head><title>deepinfer-agent</title></head><body>
<h1>deepinfer-agent</h1><p>Prometheus metrics: <a href="/metrics">/metrics</a></p></body></html>
"""


class MetricsServer:
    """`/metrics` and a small landing page at `/`, on a background thread; port 0 picks a free port.

    prometheus_client's WSGI app renders (content negotiation, gzip, `name[]`); `BoundedServer` serves it,
    so that idle, slow or malformed clients are cut off by deadlines and counted, not given a thread each.
    """

    def __init__(self, latest: Callable[[], Snapshot], host: str, port: int, **limits: Any) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(latest))
        self._app = make_wsgi_app(self.registry)
        self._http = BoundedServer(self._answer, host, port, **limits)
        self.registry.register(_ServingCollector(self._http.stats))
        self.host, self.port = host, self._http.port

    def _answer(self, request: Request) -> Response:
        if request.path in ("", "/"):
            return Response("200 OK", [("Content-Type", "text/html; charset=utf-8")], _LANDING)
        environ = {"REQUEST_METHOD": request.method, "PATH_INFO": request.path, "QUERY_STRING": request.query}
        for name, key in (("accept", "HTTP_ACCEPT"), ("accept-encoding", "HTTP_ACCEPT_ENCODING")):
            if name in request.headers:
                environ[key] = request.headers[name]
        answer: list[Any] = []
        body = b"".join(self._app(environ, lambda status, headers: answer.extend((status, headers))))
        return Response(answer[0], list(answer[1]), body)

    @property
    def stats(self) -> ServingStats:
        return self._http.stats

    def start(self) -> None:
        self._http.start()

    def close(self) -> None:
        self._http.close()


class _ServingCollector(Collector):
    """The metrics port's own counters: how connections ended, and accepts that failed."""

    def __init__(self, stats: ServingStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        ended = CounterMetricFamily("deepinfer_exporter_connections", "Connections to the metrics port, by how "
                                    "they ended (served, timed_out, evicted, refused, malformed, reset).",
                                    labels=["outcome"])
        for outcome, n in self._stats.outcomes.items():
            ended.add_metric([outcome], float(n))
        yield ended
        failed = CounterMetricFamily("deepinfer_exporter_accept_errors", "Connections the metrics port could not "
                                     "accept (the agent was out of file descriptors).")
        failed.add_metric([], float(self._stats.accept_errors))
        yield failed
