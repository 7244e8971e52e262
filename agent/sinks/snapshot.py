"""What the exporter shows, as plain data: the snapshot the daemon hands over and which engines it knows.

Kept apart from the exporter (the one module that imports prometheus_client) so the daemon and the page
at `/` read it without that library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.bookkeeping import SourceStats
from agent.buildinfo import BuildInfo
from agent.capacity.capacity import Capacity
from agent.records import GpuProcessSample, GpuSample, HistogramWindow, ServerStats
from agent.sinks.families import ENGINE_COUNTERS, Labels
from agent.sources.nvml_model import GpuHealth
from agent.verdicts import Finding

Totals = Mapping[tuple[str, Labels], float]


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
    governing: Sequence[Finding] = ()  # of the active findings, the one that governs each (engine, knob)
    histograms: Mapping[tuple[str, str], HistogramWindow] = field(default_factory=dict)
    build: BuildInfo | None = None


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
