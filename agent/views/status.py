"""`deepinfer-agent status`: what the agent sees now, in a screenful — the first thing an operator types.

History comes from the store (opened read-only, so it never blocks the running agent): the latest load
sample per source against the KV budget, GPUs, the latest engine capacity facts, the last events and
the event totals. What only the live process knows — whether each source can read and how far behind
it is, whether NVML answers, whether the store is writable — comes from the agent's own /metrics;
when nothing answers there, the report says the agent is not running.
"""

from __future__ import annotations

import time

from agent.config import Config
from agent.daemon.status import StatusReport
from agent.views.advice_text import finding_line
from agent.views.units import size


def _live(report: StatusReport, name: str, **labels: str) -> float | None:
    for sample_labels, value in (report.live or {}).get(name, []):
        if all(sample_labels.get(k) == v for k, v in labels.items()):
            return value
    return None


def _ago(ts: float | None, now: float) -> str:
    if ts is None:
        return "time unknown"
    seconds = max(0.0, now - ts)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h ago"
    return f"{seconds / 86400:.0f}d ago"


def render(report: StatusReport, config: Config, budget_max: int | None, now: float | None = None) -> str:
    now = time.time() if now is None else now
    out: list[str] = []
    if report.live is None:
        out.append(f"agent: NOT RUNNING (no answer on {report.metrics_url}); showing what the store holds")
    else:
        started = _live(report, "deepinfer_agent_start_time_seconds")
        store_up = _live(report, "deepinfer_store_up")
        out.append(f"agent: running, up {_ago(started, now).removesuffix(' ago')}; store "
                   f"{'ok' if store_up else 'FAILING (records are buffered)'}; metrics {report.metrics_url}")
    if report.store_error:
        out.append(f"store: cannot read {config.store.path}: {report.store_error}")
    out.append("")
    out.append("sources:")
    for section in config.sources:
        name = section.source_name()
        where = section.path or section.unit or "kernel log"
        if report.live is None:
            state = "?"
        else:
            up = _live(report, "deepinfer_source_up", source=name)
            lag = _live(report, "deepinfer_source_lag_bytes", source=name)
            state = ("up" if up else "DOWN") + (f", lag {size(lag)}" if lag else ", no lag")
        lines = _live(report, "deepinfer_source_lines", source=name)
        read = f", {lines:,.0f} lines read" if lines is not None else ""
        out.append(f"  {name:<20} {state}{read}  ({section.format}: {where})")
    if not config.sources:
        out.append("  (none configured)")
    out.append("")
    out.append("load vs budget:")
    for source, stats in sorted(report.stats.items()):
        facts = report.facts.get(source, {})
        engine_max = facts.get("max_concurrency")
        parts = [f"running {stats.running}" if stats.running is not None else "running ?",
                 f"waiting {stats.waiting}" if stats.waiting is not None else "waiting ?"]
        if stats.kv_usage_ratio is not None:
            parts.append(f"KV cache {stats.kv_usage_ratio:.0%}")
        limits = []
        if budget_max is not None:
            limits.append(f"budget {budget_max}")
        if isinstance(engine_max, float | int):
            limits.append(f"engine reports {engine_max:.2f}x")
        if config.server.max_num_seqs is not None:
            limits.append(f"max_num_seqs {config.server.max_num_seqs}")
        out.append(f"  {source:<20} {', '.join(parts)} ({_ago(stats.ts, now)})"
                   + (f"; concurrency limits: {', '.join(limits)}" if limits else ""))
    if not report.stats:
        out.append("  no load samples yet" + (f" (budget {budget_max})" if budget_max is not None else ""))
    out.append("")
    nvml_up = _live(report, "deepinfer_nvml_up")
    nvml = "" if report.live is None else (" (NVML up)" if nvml_up else " (NVML DOWN: see the agent's log)")
    out.append(f"gpus:{nvml}")
    for g in report.gpus:
        used = f"{size(g.memory_used_bytes)} / {size(g.memory_total_bytes)}" if g.memory_used_bytes is not None \
            and g.memory_total_bytes is not None else "memory ?"
        util = f", util {g.utilization_gpu_ratio:.0%}" if g.utilization_gpu_ratio is not None else ""
        temp = f", {g.temperature_celsius:.0f}°C" if g.temperature_celsius is not None else ""
        out.append(f"  gpu {g.gpu} {g.name}: {used}{util}{temp} ({_ago(g.ts, now)})")
    if not report.gpus:
        out.append("  no GPU samples")
    out.append("")
    out.append("findings (active):" if report.findings else "findings: none active")
    for f in report.findings:
        out.append(f"  {finding_line(f)} ({_ago(f.since, now)})")
        out.append(f"      {f.message[:200]}")
    out.append("")
    totals = sorted(report.totals.items(), key=lambda kv: -kv[1])
    out.append("events (all time): " + (", ".join(f"{kind} {n}" for (_, _, kind), n in totals[:8]) or "none"))
    for e in report.events:
        out.append(f"  {_ago(e.ts, now):>10}  {e.severity.value:<8} {e.kind.value:<17} {e.source}: {e.message[:100]}")
    return "\n".join(out)
