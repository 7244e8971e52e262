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

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

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
from agent.inert import printable
from agent.records import EventKind, GpuProcessSample, HistogramWindow, ServerStats
from agent.sinks.families import (
    BUDGET_GAUGES,
    COUNTERS,
    ENGINE_COUNTERS,
    FACT_GAUGES,
    GPU_GAUGES,
    LATENCY_HISTOGRAMS,
    SERVER_GAUGES,
    Labels,
)
from agent.sinks.httpserve import BoundedServer, Request, Response, ServingStats
from agent.sinks.landing import landing
from agent.sinks.snapshot import (
    Snapshot,
    TargetState,
    Totals,
    engines_of,
    source_of,
)
from agent.sources.nvml_model import CLOCKS_EVENT_REASONS, GpuHealth
from agent.verdicts import Finding


def _gauge(name: str, doc: str, labels: Labels = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"deepinfer_{name}", doc, labels=list(labels))


__all__ = ["COUNTERS", "MetricsServer", "Snapshot", "SnapshotCollector", "TargetState", "landing"]


class SnapshotCollector(Collector):
    """Builds fresh metric families from the latest snapshot on every scrape."""

    def __init__(self, latest: Callable[[], Snapshot]) -> None:
        self._latest = latest

    def collect(self) -> Iterator[Metric]:
        snap = self._latest()
        families = itertools.chain(_counters(_with_zero_events(snap.totals, snap.servers)), _agent(snap),
                                   _sources(snap.sources, engines_of(snap)), _servers(snap.servers, snap.facts),
                                   _latency(snap.histograms), _gpus(snap), _budget(snap),
                                   _findings(snap.findings, snap.governing))
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
    for suffix, attr, doc in SERVER_GAUGES:
        family = _gauge(f"server_{suffix}", doc, ("engine", "server", "source"))
        for engine, stats in sorted(servers.items()):
            value = getattr(stats, attr)
            if value is not None:
                family.add_metric([engine, stats.server.value, engine], float(value))
        yield family
    last = _gauge("server_last_sample_timestamp_seconds", "Time of the latest load sample (Unix time).",
                  ("engine", "server", "source"))
    for engine, stats in sorted(servers.items()):
        if stats.ts is not None:
            last.add_metric([engine, stats.server.value, engine], stats.ts)
    yield last
    for metric, name, doc in FACT_GAUGES:
        family = _gauge(metric, doc, ("engine", "source"))
        for engine, values in sorted(facts.items()):
            value = values.get(name)
            if isinstance(value, int | float):
                family.add_metric([engine, engine], float(value))
        yield family


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
    for metric, attr, doc in GPU_GAUGES:
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


def _budget(snap: Snapshot) -> Iterator[Metric]:
    for metric, key, doc in BUDGET_GAUGES:
        values = snap.budget if metric.startswith("budget_") else snap.configured
        yield _single(metric, doc, values.get(key))
    governing = _gauge("capacity_max_concurrency", "Requests the engine holds at once at the budget's tokens per "
                       "request: the engine's own figure once it reported one, else the paper budget "
                       "(`basis` says which).", ("engine", "basis", "source"))
    for engine, cap in sorted(snap.capacities.items()):
        if cap.max_concurrency is not None and cap.governs is not None:
            governing.add_metric([engine, cap.governs, engine], float(cap.max_concurrency))
    yield governing


def _findings(findings: Sequence[Finding], governing: Sequence[Finding]) -> Iterator[Metric]:
    """One series per active finding (rule × engine: both bounded, by the rule files and the config), and one
    recommended value per (engine, knob): the governing finding's (agent/judge/precedence.py), so a dashboard
    or an alert never shows two numbers for one knob."""
    active = _gauge("finding_active", "1 while the advisor's finding is active (docs/rules.md).",
                    ("rule", "engine", "severity"))
    value = _gauge("recommended_value", "The value the governing finding recommends for its knob (one per engine "
                   "and knob; `rule` names the finding that governs).", ("rule", "engine", "knob"))
    for f in findings:
        if f.active:
            active.add_metric([f.rule, f.engine, f.severity.value], 1.0)
    for f in governing:
        if f.knob is not None and isinstance(f.recommended, int | float):
            value.add_metric([f.rule, f.engine, f.knob.value], float(f.recommended))
    yield active
    yield value


# --- serving -----------------------------------------------------------------------------------------



class MetricsServer:
    """`/metrics` and a small landing page at `/`, on a background thread; port 0 picks a free port.

    prometheus_client's WSGI app renders (content negotiation, gzip, `name[]`); `BoundedServer` serves it,
    so that idle, slow or malformed clients are cut off by deadlines and counted, not given a thread each.
    """

    def __init__(self, latest: Callable[[], Snapshot], host: str, port: int, **limits: Any) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(latest))
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, resident memory, open fds (Linux)
        self._latest = latest
        self._app = make_wsgi_app(self.registry)
        self._http = BoundedServer(self._answer, host, port, **limits)
        self.registry.register(_ServingCollector(self._http.stats))
        self.host, self.port = host, self._http.port

    def _answer(self, request: Request) -> Response:
        if request.path in ("", "/"):
            return Response("200 OK", [("Content-Type", "text/html; charset=utf-8")], landing(self._latest()))
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
