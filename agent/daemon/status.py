"""What the running agent reports: its own /metrics (live state) and its store (history), read-only.

The store is opened read-only, so asking never blocks the running agent; when nothing answers on the
metrics port, `live` is None and the view says the agent is not running.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agent import histograms, http
from agent.config import Config
from agent.errors import AgentError, StoreError
from agent.prom import Samples, exposition_samples
from agent.records import Event, GpuSample, ServerStats
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.sinks.storefile import failure_hint
from agent.verdicts import Finding


@dataclass(frozen=True)
class StatusReport:
    metrics_url: str
    live: Samples | None  # the agent's own /metrics; None when it did not answer
    stats: dict[str, ServerStats] = field(default_factory=dict)
    facts: dict[str, dict[str, float | str]] = field(default_factory=dict)
    gpus: list[GpuSample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    totals: dict[tuple[str, str, str], int] = field(default_factory=dict)
    store_error: str | None = None
    findings: list[Finding] = field(default_factory=list)  # the advisor's active findings
    # per engine, per latency signal scraped over the last LATENCY_WINDOW_SECONDS: requests, p50, p95
    latency: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)


LATENCY_WINDOW_SECONDS = 900.0
LATENCY_SIGNALS = ("ttft_seconds", "queue_time_seconds", "e2e_latency_seconds")


def latency(queries: Queries, now: float) -> dict[str, dict[str, dict[str, float | None]]]:
    """What the engines' own histograms say about the recent requests (scraped /metrics only; empty for an
    engine known from its log alone): per engine and signal, the request count and p50/p95, the buckets of
    the window added up and interpolated as the rules do."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for engine in queries.engines():
        for signal in LATENCY_SIGNALS:
            windows = queries.window_histograms(now - LATENCY_WINDOW_SECONDS, now + 1.0, engine, signal)
            merged = histograms.add([histograms.Buckets(w.bounds, w.counts, w.sum) for w in windows])
            if merged is None or merged.count <= 0:
                continue
            out.setdefault(engine, {})[signal] = {"requests": merged.count,
                                                  "p50": histograms.quantile(merged, 0.50),
                                                  "p95": histograms.quantile(merged, 0.95)}
    return out


def gather(config: Config, timeout: float = 2.0) -> StatusReport:
    """Read the store and ask the running agent; neither failing stops the report."""
    host = "127.0.0.1" if config.metrics.listen in ("0.0.0.0", "::", "") else config.metrics.listen
    url = f"http://{host}:{config.metrics.port}/metrics"
    live: Samples | None
    try:
        reply = http.get(url, timeout_seconds=timeout)
        live = exposition_samples(reply.body.decode("utf-8", "replace")) if reply.status == 200 else None
    except (AgentError, ValueError):
        live = None
    try:
        store = Store.open_readonly(config.store.path)
    except StoreError as exc:
        return StatusReport(url, live, store_error=f"{exc} ({failure_hint(exc)})")
    try:
        events_total: dict[tuple[str, str, str], int] = {
            (labels[0], labels[1], labels[2]): int(v) for (name, labels), v in store.load_totals().items()
            if name == "events_total" and len(labels) == 3}
        q = Queries(store)
        return StatusReport(url, live, q.latest_stats(), q.latest_facts(), q.latest_gpu_samples(),
                            q.recent_events(limit=10), events_total, findings=q.findings(active_only=True),
                            latency=latency(q, time.time()))
    finally:
        store.close()
