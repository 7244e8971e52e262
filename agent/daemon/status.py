"""What the running agent reports: its own /metrics (live state) and its store (history), read-only.

The store is opened read-only, so asking never blocks the running agent; when nothing answers on the
metrics port, `live` is None and the view says the agent is not running.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent import http
from agent.config import Config
from agent.errors import AgentError, StoreError
from agent.prom import Samples, exposition_samples
from agent.records import Event, Finding, GpuSample, ServerStats
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.sinks.storefile import failure_hint


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
                            q.recent_events(limit=10), events_total, findings=q.findings(active_only=True))
    finally:
        store.close()
