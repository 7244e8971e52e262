"""Prometheus exposition: the only module that imports prometheus_client.

One custom collector rebuilds every metric family from an immutable `Snapshot` on each scrape, so a
source, a GPU or a scrape target that disappears takes its series with it, and the daemon's loop never
shares mutable state with the HTTP thread (it swaps in a new snapshot; the collector reads the latest).
Counters come from restart-safe totals kept in SQLite, so `rate()` sees no false reset after a restart.
Conventions: `deepinfer_` prefix, base units, `_total` counters, `_ratio` 0–1, labels bounded (source
names from the config, GPU indexes, event kinds, Xid codes, NVML call names) — never request ids,
prompts, pids or hostnames. Every series about one engine carries `engine` (the engine's name:
the source's, or `<source>/<file>` for a glob); the same value under `source` on those series is
deprecated (docs/metrics.md, "Deprecated labels") and goes in 0.3.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from agent.bookkeeping import SourceStats
from agent.buildinfo import BuildInfo
from agent.capacity.capacity import Capacity
from agent.records import EventKind, GpuProcessSample, GpuSample, HistogramWindow, ServerStats
from agent.sources.nvml_model import CLOCKS_EVENT_REASONS, GpuHealth
from agent.verdicts import Finding

Labels = tuple[str, ...]
Totals = Mapping[tuple[str, Labels], float]

# Restart-safe counters: totals key (the metric name without `deepinfer_`) → (help, label names). The
# daemon keeps their values in SQLite's `totals` table under the same keys.
COUNTERS: dict[str, tuple[str, Labels]] = {
    "events_total": ("Occurrences of classified events (OOM, preemption, pending, queue_full, deadline_exceeded, "
                     "http_429/503, engine_dead, cuda_error, nccl_timeout, xid, gpu_lost): each event adds its "
                     "count (docs/metrics.md says what one increment means per kind).", ("source", "server", "kind")),
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
    gpu_health: Sequence[GpuHealth] = ()
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
    histograms: Mapping[tuple[str, str], HistogramWindow] = field(default_factory=dict)
    build: BuildInfo | None = None


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
        yield from _counters(_with_zero_events(snap.totals, snap.servers))
        yield from _agent(snap)
        yield from _sources(snap.sources, engines_of(snap))
        yield from _servers(snap.servers, snap.facts)
        yield from _latency(snap.histograms)
        yield from _gpus(snap)
        yield from _budget(snap)
        yield from _findings(snap.findings)


def engines_of(snap: Snapshot) -> set[str]:
    """Every engine the snapshot knows of: by an event, a load sample, a start-up fact or a scrape."""
    engines = {labels[0] for (name, labels) in snap.totals if name in ENGINE_COUNTERS and labels}
    engines |= set(snap.servers) | set(snap.facts) | {t.target for t in snap.targets}
    return engines


def source_of(engine: str, sources: Iterable[str]) -> str | None:
    """The log source an engine's lines come from: the source itself, or the glob source `<source>/<file>`
    names (the longest match, since a source's name may itself contain `/`)."""
    matches = [s for s in sources if engine == s or engine.startswith(s + "/")]
    return max(matches, key=len) if matches else None


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
        engine_first = name in ENGINE_COUNTERS
        exported = ("engine", *label_names[1:], "source") if engine_first else label_names
        family = CounterMetricFamily(f"deepinfer_{name.removesuffix('_total')}", doc, labels=list(exported))
        if not label_names:  # a counter without labels is 0 until it moves, so its first step is seen
            by_name.setdefault(name, [((), 0.0)])
        for labels, value in sorted(by_name.get(name, [])):
            if len(labels) == len(label_names):
                family.add_metric([*labels, labels[0]] if engine_first else list(labels), value)
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
    build = snap.build or BuildInfo(version=snap.version)
    built = InfoMetricFamily("deepinfer_build", "What the running agent was built from (as node_exporter's "
                             "build_info): version, git revision and branch, Python version.",
                             labels=["version", "revision", "branch", "python"])
    built.add_metric([build.version, build.revision, build.branch, build.python], {})
    yield built
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
    up = _gauge("scrape_up", "1 when the last scrape of the engine's /metrics succeeded.", ("target", "engine"))
    duration = _gauge("scrape_duration_seconds", "How long the last scrape of the engine's /metrics took.",
                      ("target", "engine"))
    for t in snap.targets:
        up.add_metric([t.target, t.target], float(t.up))  # a target's records carry its name as their engine
        if t.last_duration_seconds is not None:
            duration.add_metric([t.target, t.target], t.last_duration_seconds)
    yield up
    yield duration


def _sources(sources: Sequence[SourceStats], engines: set[str]) -> Iterator[Metric]:
    up = _gauge("source_up", "1 while the log source can read; 0 when its path is missing, a directory, a dangling "
                "symlink, unreadable, or the agent's own store. One sample per engine the source feeds "
                "(`engine`; empty before its first line), so a dashboard can pick an engine and find its source.",
                ("source", "engine"))
    fed: dict[str, list[str]] = {}
    for engine in engines:
        source = source_of(engine, [s.source for s in sources])
        if source is not None:
            fed.setdefault(source, []).append(engine)
    lag = _gauge("source_lag_bytes", "Bytes written to the source's files but not read yet.", ("source",))
    files = _gauge("source_files", "Files the source has open (live and draining rotated ones).", ("source",))
    down = InfoMetricFamily("deepinfer_source_down", "Why a source is down (no sample while it is up).",
                            labels=["source", "reason"])
    for s in sources:
        for engine in sorted(fed.get(s.source, [""])):
            up.add_metric([s.source, engine], float(s.up))
        lag.add_metric([s.source], s.lag_bytes)
        files.add_metric([s.source], s.files)
        if not s.up and s.down_reason:
            down.add_metric([s.source, s.down_reason], {})
    yield from (up, lag, files, down)


def _servers(servers: Mapping[str, ServerStats], facts: Mapping[str, Mapping[str, float | str]]) -> Iterator[Metric]:
    # `source` repeats `engine` on these series: deprecated, kept until 0.3 (docs/metrics.md).
    for suffix, attr, doc, scale in _SERVER_GAUGES:
        family = _gauge(f"server_{suffix}", doc, ("engine", "server", "source"))
        for engine, stats in sorted(servers.items()):
            value = getattr(stats, attr)
            if value is not None:
                family.add_metric([engine, stats.server.value, engine], float(value) * scale)
        yield family
    last = _gauge("server_last_sample_timestamp_seconds", "Time of the latest load sample (Unix time).",
                  ("engine", "server", "source"))
    for engine, stats in sorted(servers.items()):
        if stats.ts is not None:
            last.add_metric([engine, stats.server.value, engine], stats.ts)
    yield last
    for metric, name, doc in _FACT_GAUGES:
        family = _gauge(metric, doc, ("engine", "source"))
        for engine, values in sorted(facts.items()):
            value = values.get(name)
            if isinstance(value, int | float):
                family.add_metric([engine, engine], float(value))
        yield family


# Scraped per-request histograms exported for histogram_quantile: signal → (metric, help).
LATENCY_HISTOGRAMS: dict[str, tuple[str, str]] = {
    "ttft_seconds": ("request_ttft_seconds", "Time to first token of the requests the engine finished, from its "
                     "/metrics (cumulative since the agent started)."),
    "queue_time_seconds": ("request_queue_time_seconds", "Time the engine's finished requests waited in its queue, "
                           "from its /metrics (cumulative since the agent started)."),
    "e2e_latency_seconds": ("request_e2e_latency_seconds", "End-to-end latency of the engine's finished requests, "
                            "from its /metrics (cumulative since the agent started)."),
}


def _latency(histograms: Mapping[tuple[str, str], HistogramWindow]) -> Iterator[Metric]:
    """The engines' latency histograms, accumulated from the scrape windows, in Prometheus' own histogram
    form (cumulative `_bucket{le}`, `_sum`, `_count`), so `histogram_quantile` reads them per engine."""
    for signal, (metric, doc) in LATENCY_HISTOGRAMS.items():
        family = HistogramMetricFamily(f"deepinfer_{metric}", doc, labels=["engine", "server"])
        for (engine, sig), h in sorted(histograms.items()):
            if sig != signal:
                continue
            buckets = [(_le(bound), count) for bound, count in zip(h.bounds, h.counts, strict=True)]
            family.add_metric([engine, h.server.value], buckets, h.sum)
        yield family


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _gpus(snap: Snapshot) -> Iterator[Metric]:
    info = InfoMetricFamily("deepinfer_gpu", "Identity of each GPU NVML reports (join on gpu: "
                            "`* on (instance, gpu) group_left (uuid, name) deepinfer_gpu_info`).",
                            labels=["gpu", "uuid", "name", "pci_bus_id"])
    for g in snap.gpus:
        info.add_metric([str(g.gpu), g.uuid, g.name, g.pci_bus_id or ""], {})
    yield info
    yield from _gpu_health(snap.gpu_health)
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


def _gpu_health(health: Sequence[GpuHealth]) -> Iterator[Metric]:
    """Clocks, throttle reasons, ECC and row remapping (dcgm-exporter's fields), and for each group whether
    the driver reports it: `deepinfer_gpu_field_up 0` says "not supported here", where no sample could
    only say "nothing"."""
    field_up = _gauge("gpu_field_up", "1 when NVML reports this group of fields on the GPU (clocks, "
                      "clocks_event_reasons, ecc, remapped_rows); 0 when the driver or card does not.",
                      ("gpu", "field"))
    clocks = _gauge("gpu_clock_hertz", "Current clock (sm, memory).", ("gpu", "clock"))
    reasons = _gauge("gpu_clocks_event_reason", "1 while this reason holds the clocks down (NVML's clocks event, "
                     "formerly throttle, reasons): sw_power_cap, hw_thermal_slowdown, …", ("gpu", "reason"))
    ecc = CounterMetricFamily("deepinfer_gpu_ecc_errors", "ECC errors over the GPU's life (aggregate), "
                              "corrected and uncorrected.", labels=["gpu", "type"])
    rows = _gauge("gpu_remapped_rows", "Memory rows remapped, by the kind of error that caused it.", ("gpu", "cause"))
    pending = _gauge("gpu_row_remap_pending", "1 when a row remap waits for a GPU reset.", ("gpu",))
    failed = _gauge("gpu_row_remap_failed", "1 when a row remap failed (the card needs service).", ("gpu",))
    for h in sorted(health, key=lambda h: h.gpu):
        gpu = str(h.gpu)
        field_up.add_metric([gpu, "clocks"], float(h.sm_clock_hz is not None or h.memory_clock_hz is not None))
        field_up.add_metric([gpu, "clocks_event_reasons"], float(h.clocks_event_reasons is not None))
        field_up.add_metric([gpu, "ecc"], float(h.ecc_corrected is not None or h.ecc_uncorrected is not None))
        field_up.add_metric([gpu, "remapped_rows"], float(h.remapped_rows is not None))
        for name, hz in (("sm", h.sm_clock_hz), ("memory", h.memory_clock_hz)):
            if hz is not None:
                clocks.add_metric([gpu, name], hz)
        if h.clocks_event_reasons is not None:
            for reason, bit in CLOCKS_EVENT_REASONS.items():
                reasons.add_metric([gpu, reason], float(bool(h.clocks_event_reasons & bit)))
        for kind, count in (("corrected", h.ecc_corrected), ("uncorrected", h.ecc_uncorrected)):
            if count is not None:
                ecc.add_metric([gpu, kind], float(count))
        if h.remapped_rows is not None:
            correctable, uncorrectable, is_pending, is_failed = h.remapped_rows
            rows.add_metric([gpu, "correctable"], float(correctable))
            rows.add_metric([gpu, "uncorrectable"], float(uncorrectable))
            pending.add_metric([gpu], float(bool(is_pending)))
            failed.add_metric([gpu], float(bool(is_failed)))
    yield from (field_up, clocks, reasons, ecc, rows, pending, failed)


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
                       "(`basis` says which).", ("engine", "basis", "source"))
    for engine, cap in sorted(snap.capacities.items()):
        if cap.max_concurrency is not None and cap.governs is not None:
            governing.add_metric([engine, cap.governs, engine], float(cap.max_concurrency))
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

def landing(snap: Snapshot) -> bytes:
    """The page at `/` (as mtail's): each source, whether it reads, the lines it delivered and how far it
    is behind, then the engines it feeds; a link to /metrics. Every name is escaped (paths are the
    operator's, but a file name is anyone's)."""
    from html import escape

    lines = {labels[0]: v for (name, labels), v in snap.totals.items() if name == "source_lines_total" and labels}
    engines = engines_of(snap)
    rows = []
    for s in snap.sources:
        fed = sorted(e for e in engines if source_of(e, [x.source for x in snap.sources]) == s.source)
        state = "up" if s.up else f"down: {s.down_reason or 'cannot read'}"
        rows.append(f"<tr><td>{escape(s.source)}</td><td>{escape(state)}</td><td>{int(lines.get(s.source, 0)):,}</td>"
                    f"<td>{s.lag_bytes:,}</td><td>{s.files}</td><td>{escape(', '.join(fed))}</td></tr>")
    table = ("<table><tr><th>source</th><th>state</th><th>lines read</th><th>lag (bytes)</th><th>open files</th>"
             f"<th>engines</th></tr>{''.join(rows)}</table>" if rows else "<p>No log sources configured.</p>")
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>deepinfer-agent</title></head><body>"
            f"<h1>deepinfer-agent {escape(snap.version)}</h1>{table}"
            f"<p>Prometheus metrics: <a href=\"/metrics\">/metrics</a></p></body></html>\n").encode()


MAX_CONNECTIONS = 16  # scrapes are short; more at once are refused rather than allowed to eat descriptors
IDLE_SECONDS = 5.0  # a connection that sends no complete request in this long is closed


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.refused = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _QuietHandler(WSGIRequestHandler):
    timeout = IDLE_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds are not news; errors still reach the exporter's own counters."""


class MetricsServer:
    """`/metrics` and a small landing page at `/`, on a background thread; port 0 picks a free port."""

    def __init__(self, latest: Callable[[], Snapshot], host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(latest))
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, resident memory, open fds (Linux)
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") in ("", "/"):
                start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
                return [landing(latest())]
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]

        self._httpd = make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
        self.host, self.port = host, int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
