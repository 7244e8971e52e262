"""Grafana dashboards as code: writes grafana/dashboards/*.json and the provisioning YAML.

    python grafana/generate.py                 write the files (commit them)
    python grafana/generate.py --check         exit 1 when a committed file differs from what this makes
    python grafana/generate.py --list-metrics  JSON: dashboard → panel → the metric names its queries use

Why a generator: one fleet dashboard has dozens of PromQL queries that must stay in step with the
agent's metric names; written as data here, every query can be listed, run against a real Prometheus
and checked against the exporter (tests/integration/test_deploy.py). The JSON is built with Grafana's
own typed builders (grafana-foundation-sdk, pinned in pyproject.toml), so the schema is Grafana's,
not a guess. Each dashboard serves a fleet: `datasource`, `job`, `instance` and `engine` variables
(`engine` is the agent's `engine` label: one engine instance, a source's name or `<source>/<file>` for a
glob; its list comes from `deepinfer_source_up` and `deepinfer_scrape_up`, which carry it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as gcommon
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import stat as gstat
from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as md
from grafana_foundation_sdk.models import prometheus as mp

HERE = Path(__file__).resolve().parent

# Selectors every query uses; the tests replace the variables with `.*` (what "All" means here) and with
# each value the dropdowns offer.
NODE = 'job=~"$job", instance=~"$instance"'
ENGINE = f'{NODE}, engine=~"$engine"'
ADVISOR = ENGINE
# A source's own self-metrics are per source: this keeps the sources that feed the chosen engines.
OF_ENGINE = f"and on (job, instance, source) deepinfer_source_up{{{ENGINE}}}"
ENGINE_VARIABLE = ('label_values({__name__=~"deepinfer_source_up|deepinfer_scrape_up", job=~"$job", '
                   'instance=~"$instance"}, engine)')
RATE = "$__rate_interval"

# Metrics a panel queries that the agent does not export yet. A test skips their queries with this
# message and fails once the metric is exported, so the entry is removed when the work lands.
PENDING_ADVISOR: dict[str, str] = {}
PENDING_EXPORTER: dict[str, str] = {}
# Made by Prometheus itself, not by the agent.
PROMETHEUS_METRICS = frozenset({"up"})
# prometheus_client's process collector, on the agent's endpoint but not deepinfer_-prefixed.
PROCESS_METRICS = frozenset({"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"})
# Exported on purpose but on no panel, each with its reason (the test checks this list is exact).
NOT_ON_A_PANEL: dict[str, str] = {
    "deepinfer_rule_load_errors_total": "a rejected rule file is rare and logged with every problem (file, line, "
                                        "rule, field); `deepinfer-agent rules check` shows them",
    "deepinfer_gpu_memory_free_bytes": "total − used, already drawn on the memory panel",
    "deepinfer_gpu_memory_reserved_bytes":
        "driver-reserved memory is constant per card; `deepinfer-agent status` shows it",
    "deepinfer_source_bytes_total": "lines per second says the same about a source's activity",
    "deepinfer_source_partial_flushes_total": "normal at the end of a burst (an unfinished last line), not a problem",
    "deepinfer_source_restarts_total": "journald sources only; journalctl restarts show as a source going down",
    "deepinfer_source_down_info": "the reason text behind deepinfer_source_up 0 (on the source panel); "
                                  "`deepinfer-agent status` prints it",
    "deepinfer_agent_info": "the Job and Node dropdowns are drawn from it; deepinfer_build_info, on the Agents "
                            "panel, carries the version too",
    "process_virtual_memory_bytes": "resident memory, on the Agents panel, is what a node runs out of",
    "process_max_fds": "the limit behind process_open_fds; deepinfer_source_emfile_total counts hitting it",
    "process_start_time_seconds": "deepinfer_agent_start_time_seconds, on the Agents panel, says the same",
    "deepinfer_source_emfile_total": "descriptor exhaustion also takes the source down (deepinfer_source_up 0), "
                                     "which the source panel and the DeepinferSourceDown alert show",
}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    unit: str | None = None  # when it differs from the panel's unit

    def metrics(self) -> set[str]:
        return metrics_in(self.expr)


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: Sequence[Query]
    kind: str = "timeseries"  # timeseries | bars | stat | table
    unit: str = "short"
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    stacked: bool = False
    thresholds: Sequence[tuple[float, str]] = ()

    def metrics(self) -> list[str]:
        return sorted(set().union(*(q.metrics() for q in self.queries)))


@dataclass(frozen=True)
class Row:
    title: str
    panels: Sequence[Panel]


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: Sequence[Row]
    tags: Sequence[str] = field(default=("deepinfer", "gpu", "inference"))


def metrics_in(expr: str) -> set[str]:
    """Metric names a PromQL expression reads (ours start with deepinfer_; `up` is Prometheus's)."""
    names = set(re.findall(r"\bdeepinfer_[a-z0-9_]+", expr))
    names |= {m for m in re.findall(r"\b([a-z_]+)\s*\{", expr) if m in PROMETHEUS_METRICS | PROCESS_METRICS}
    return names


def events(kinds: str, legend: str = "{{instance}} {{engine}}") -> Query:
    """Occurrences of the given event kinds (a regex) per graph interval."""
    by = "instance, engine, kind" if "|" in kinds else "instance, engine"
    return Query(f'sum by ({by}) (increase(deepinfer_events_total{{{ENGINE}, kind=~"{kinds}"}}[{RATE}]))',
                 legend if "|" not in kinds else legend + " {{kind}}")


def per_second(metric: str, labels: str, legend: str) -> Query:
    by = f"instance, {labels}" if labels else "instance"
    of = f" {OF_ENGINE}" if labels == "source" else ""
    return Query(f"sum by ({by}) (rate({metric}{{{NODE}}}[{RATE}]){of})", legend, unit="ops")


def latency(signal: str, title: str, what: str) -> Panel:
    """p50/p95/p99 of one of the engines' latency histograms, per engine, from the buckets' rate."""
    metric = f"deepinfer_request_{signal}_bucket"
    return Panel(title, f"{what} The engine's own histogram (its /metrics, scraped by the agent); the quantile "
                 "is interpolated inside a bucket, as fine as the engine's buckets.",
                 tuple(Query(f"histogram_quantile({q}, sum by (instance, engine, le) (rate({metric}{{{ENGINE}}}"
                             f"[{RATE}])))", f"{{{{instance}}}} {{{{engine}}}} p{round(q * 100)}")
                       for q in (0.5, 0.95, 0.99)),
                 unit="s", width=8, min=0)


NODE_OVERVIEW = Dashboard(
    uid="deepinfer-node-overview",
    title="deepinfer-agent / Node overview",
    description="GPU memory, KV cache and load against the limits that size them, events by kind, and the "
                "advisor's findings, per node and engine. Incidents in detail: the Incidents dashboard.",
    rows=(
        Row("GPU memory", (
            Panel("GPU memory: used vs total vs the engine's ceiling",
                  "Per GPU: memory in use, held by compute processes (the engine), the card's total, and the "
                  "ceiling the engine was allowed (gpu_memory_utilization × total). Used at the ceiling with "
                  "OOMs below means concurrency or context is too large for the KV budget.",
                  (Query(f"deepinfer_gpu_memory_used_bytes{{{NODE}}}", "{{instance}} GPU {{gpu}} used"),
                   Query(f"deepinfer_gpu_process_memory_used_bytes{{{NODE}}}",
                         "{{instance}} GPU {{gpu}} held by the engine"),
                   Query(f"deepinfer_gpu_memory_total_bytes{{{NODE}}}", "{{instance}} GPU {{gpu}} total"),
                   Query(f"deepinfer_gpu_memory_total_bytes{{{NODE}}} * on (job, instance) group_left () "
                         f"max by (job, instance) (deepinfer_server_gpu_memory_utilization_ratio{{{ENGINE}}})",
                         "{{instance}} GPU {{gpu}} engine ceiling")),
                  unit="bytes", min=0),
            Panel("GPU utilization",
                  "Share of time a kernel ran, and share of time memory was read or written. Memory not full but "
                  "latency climbing means compute-bound: lowering concurrency will not help.",
                  (Query(f"deepinfer_gpu_utilization_ratio{{{NODE}}}", "{{instance}} GPU {{gpu}} compute"),
                   Query(f"deepinfer_gpu_memory_utilization_ratio{{{NODE}}}", "{{instance}} GPU {{gpu}} memory")),
                  unit="percentunit", min=0, max=1),
            Panel("GPU temperature and power",
                  "Temperature and power draw against the power limit (throttling shows as draw pinned at the limit).",
                  (Query(f"deepinfer_gpu_temperature_celsius{{{NODE}}}", "{{instance}} GPU {{gpu}} temperature",
                         unit="celsius"),
                   Query(f"deepinfer_gpu_power_watts{{{NODE}}}", "{{instance}} GPU {{gpu}} power", unit="watt"),
                   Query(f"deepinfer_gpu_power_limit_watts{{{NODE}}}", "{{instance}} GPU {{gpu}} power limit",
                         unit="watt")),
                  unit="short", min=0),
            Panel("GPU clocks and throttling",
                  "SM and memory clocks, and each reason NVML gives for holding them down (1 while it holds): "
                  "sw_power_cap or hw_thermal_slowdown under load means the card, not the engine, sets the pace.",
                  (Query(f"deepinfer_gpu_clock_hertz{{{NODE}}}", "{{instance}} GPU {{gpu}} {{clock}}", unit="hertz"),
                   Query(f"deepinfer_gpu_clocks_event_reason{{{NODE}}} == 1", "{{instance}} GPU {{gpu}} {{reason}}")),
                  min=0),
            Panel("GPU memory health",
                  "ECC errors in the interval, rows remapped, a remap waiting for a reset or failed, and which of "
                  "these the card reports at all (0: not supported by this card or driver).",
                  (Query(f"sum by (instance, gpu, type) (increase(deepinfer_gpu_ecc_errors_total{{{NODE}}}[{RATE}]))",
                         "{{instance}} GPU {{gpu}} ECC {{type}}"),
                   Query(f"deepinfer_gpu_remapped_rows{{{NODE}}}", "{{instance}} GPU {{gpu}} remapped ({{cause}})"),
                   Query(f"deepinfer_gpu_row_remap_pending{{{NODE}}}", "{{instance}} GPU {{gpu}} remap pending"),
                   Query(f"deepinfer_gpu_row_remap_failed{{{NODE}}}", "{{instance}} GPU {{gpu}} remap failed"),
                   Query(f"deepinfer_gpu_field_up{{{NODE}}}", "{{instance}} GPU {{gpu}} reports {{field}}")),
                  min=0),
            Panel("GPUs",
                  "Which card each index is (NVML: UUID, model, PCI bus), with the compute processes on it.",
                  (Query(f"deepinfer_gpu_info{{{NODE}}}", instant=True),
                   Query(f"deepinfer_gpu_processes{{{NODE}}}", instant=True)),
                  kind="table"),
        )),
        Row("KV cache", (
            Panel("KV cache: tokens in use vs capacity",
                  "Tokens held in the KV cache (usage × the capacity the engine reported at start-up) against "
                  "that capacity. At capacity the engine preempts running requests or queues new ones.",
                  (Query(f"deepinfer_server_kv_cache_usage_ratio{{{ENGINE}}} * on (job, instance, engine) "
                         f"group_left () deepinfer_server_kv_cache_tokens{{{ENGINE}}}",
                         "{{instance}} {{engine}} in use"),
                   Query(f"deepinfer_server_kv_cache_tokens{{{ENGINE}}}", "{{instance}} {{engine}} capacity")),
                  unit="short", min=0),
            Panel("KV cache usage and prefix-cache hits",
                  "Share of the KV cache in use (the alert fires at 95% for 10 minutes), and the prefix-cache hit "
                  "ratio.",
                  (Query(f"deepinfer_server_kv_cache_usage_ratio{{{ENGINE}}}", "{{instance}} {{engine}} KV used"),
                   Query(f"deepinfer_server_prefix_cache_hit_ratio{{{ENGINE}}}",
                         "{{instance}} {{engine}} prefix hits")),
                  unit="percentunit", min=0, max=1, thresholds=((0.95, "red"),)),
            Panel("KV memory: the budget vs the engine",
                  "KV-cache memory per GPU in the agent's budget (deepinfer-agent budget) and what the engine "
                  "actually allocated; the per-token cost the budget used.",
                  (Query(f"deepinfer_budget_usable_kv_bytes{{{NODE}}}", "{{instance}} budget"),
                   Query(f"deepinfer_server_kv_cache_bytes{{{ENGINE}}}", "{{instance}} {{engine}} engine"),
                   Query(f"deepinfer_budget_kv_bytes_per_token{{{NODE}}}", "{{instance}} per token", unit="bytes")),
                  kind="stat", unit="bytes", width=8),
            Panel("Concurrency: the budget vs the engine",
                  "Requests of the assumed length the KV cache holds at once: the agent's arithmetic and the "
                  "engine's own start-up figure.",
                  (Query(f"deepinfer_budget_max_concurrency{{{NODE}}}", "{{instance}} budget"),
                   Query(f"deepinfer_server_max_concurrency{{{ENGINE}}}", "{{instance}} {{engine}} engine")),
                  kind="stat", width=8),
            Panel("Context length",
                  "Tokens per request the budget assumes, and max_model_len as configured and as the engine reported.",
                  (Query(f"deepinfer_budget_tokens_per_request{{{NODE}}}", "{{instance}} budget tokens/request"),
                   Query(f"deepinfer_config_max_model_len{{{NODE}}}", "{{instance}} max_model_len (config)"),
                   Query(f"deepinfer_server_max_model_len{{{ENGINE}}}", "{{instance}} {{engine}} max_model_len")),
                  kind="stat", width=8),
        )),
        Row("Load vs limits", (
            Panel("Running and waiting vs max_num_seqs",
                  "Requests computed at once and waiting for a slot, against max_num_seqs (configured and as the "
                  "engine reported) and the concurrency the KV budget allows. Running pinned at max_num_seqs "
                  "with a queue: capacity-bound. max_num_seqs above the budget line: OOM or preemption risk.",
                  (Query(f"deepinfer_server_running_requests{{{ENGINE}}}", "{{instance}} {{engine}} running"),
                   Query(f"deepinfer_server_waiting_requests{{{ENGINE}}}", "{{instance}} {{engine}} waiting"),
                   Query(f"deepinfer_server_swapped_requests{{{ENGINE}}}", "{{instance}} {{engine}} swapped"),
                   Query(f"deepinfer_config_max_num_seqs{{{NODE}}}", "{{instance}} max_num_seqs (config)"),
                   Query(f"deepinfer_server_max_num_seqs{{{ENGINE}}}", "{{instance}} {{engine}} max_num_seqs (engine)"),
                   Query(f"deepinfer_budget_max_concurrency{{{NODE}}}", "{{instance}} KV budget"),
                   Query(f"deepinfer_capacity_max_concurrency{{{ENGINE}}}",
                         "{{instance}} {{engine}} KV capacity ({{basis}})")),
                  min=0),
            Panel("Queue vs max_queue_size",
                  "Waiting requests against the configured queue size: beyond it requests are rejected (429/503).",
                  (Query(f"deepinfer_server_waiting_requests{{{ENGINE}}}", "{{instance}} {{engine}} waiting"),
                   Query(f"deepinfer_config_max_queue_size{{{NODE}}}", "{{instance}} max_queue_size")),
                  min=0),
            Panel("Throughput",
                  "Prompt (prefill) and generation (decode) tokens per second, as the engine reported them.",
                  (Query(f"deepinfer_server_prompt_tokens_per_second{{{ENGINE}}}", "{{instance}} {{engine}} prompt"),
                   Query(f"deepinfer_server_generation_tokens_per_second{{{ENGINE}}}",
                         "{{instance}} {{engine}} generation")),
                  unit="short", min=0),
            Panel("Events per minute by kind",
                  "Classified events per minute: OOM, preemption, pending, queue_full, deadline_exceeded, "
                  "http_429/503, engine_dead, cuda_error, nccl_timeout, xid, gpu_lost.",
                  (Query(f"sum by (instance, kind) (rate(deepinfer_events_total{{{ENGINE}}}[{RATE}])) * 60",
                         "{{instance}} {{kind}}"),),
                  kind="bars", stacked=True, min=0),
        )),
        Row("Latency", (
            latency("ttft_seconds", "Time to first token", "How long a request waited for its first token: "
                    "queueing plus prefill."),
            latency("queue_time_seconds", "Queue time", "How long requests waited for a slot before running: "
                    "grows when running is pinned at max_num_seqs."),
            latency("e2e_latency_seconds", "End-to-end latency", "From arrival to the last token: what a client "
                    "timeout is compared with."),
        )),
        Row("Advisor", (
            Panel("Active findings",
                  "Rules of the advisor that hold now (1 while active), by rule, engine and severity. The "
                  "evidence and the arithmetic: deepinfer-agent report --since 1h on the node.",
                  (Query(f"deepinfer_finding_active{{{ADVISOR}}} == 1", instant=True),),
                  kind="table"),
            Panel("Recommended values",
                  "The value each active finding recommends for its knob (max_num_seqs, max_queue_size, "
                  "request_timeout_ms, max_model_len, gpu_memory_fraction …).",
                  (Query(f"deepinfer_recommended_value{{{ADVISOR}}}", instant=True),),
                  kind="table"),
        )),
    ),
)

INCIDENTS = Dashboard(
    uid="deepinfer-incidents",
    title="deepinfer-agent / Incidents",
    description="OOM, preemption, rejections, timeouts, engine failures and Xid errors over time, and whether "
                "the agent can see everything it should (sources, NVML, engine /metrics, its store).",
    rows=(
        Row("Incidents", (
            Panel("CUDA out of memory", "OOM events per interval (start-up and runtime).",
                  (events("oom"),), kind="bars", min=0),
            Panel("Preemptions", "KV-pressure preemption events (vLLM preempt/recompute/swap, SGLang retract).",
                  (events("preemption"),), kind="bars", min=0),
            Panel("Rejections at admission", "Requests refused before any token: HTTP 429, 503 and full queues.",
                  (events("http_429|http_503|queue_full"),), kind="bars", stacked=True, min=0),
            Panel("Timeouts", "Requests that hit their deadline after work began (tokens were produced).",
                  (events("deadline_exceeded"),), kind="bars", min=0),
            Panel("Engine failures", "Engine deaths, CUDA errors, NCCL timeouts and lost GPUs.",
                  (events("engine_dead|cuda_error|nccl_timeout|gpu_lost"),), kind="bars", stacked=True, min=0),
            Panel("Xid errors", "NVIDIA driver Xid errors by GPU and code (NVML events and the kernel log).",
                  (Query(f"sum by (instance, gpu, xid) (increase(deepinfer_gpu_xid_errors_total{{{NODE}}}[{RATE}]))",
                         "{{instance}} GPU {{gpu}} Xid {{xid}}"),), kind="bars", stacked=True, min=0),
        )),
        Row("What the agent sees", (
            Panel("Sources up",
                  "1 when up: each log source, NVML, each engine /metrics the agent scrapes, the agent's store, and "
                  "Prometheus's own scrape of the agent.",
                  (Query(f"max by (job, instance, source) (deepinfer_source_up{{{ENGINE}}})",
                         "{{instance}} source {{source}}"),
                   Query(f"deepinfer_nvml_up{{{NODE}}}", "{{instance}} NVML"),
                   Query(f"deepinfer_scrape_up{{{ENGINE}}}", "{{instance}} {{target}}"),
                   Query(f"deepinfer_store_up{{{NODE}}}", "{{instance}} store"),
                   Query(f"up{{{NODE}}}", "{{instance}} agent")),
                  min=0, max=1),
            Panel("Log sources: lines per second and lag",
                  "Lines each source delivers, and bytes written but not read yet (a growing lag: the agent is "
                  "behind).",
                  (per_second("deepinfer_source_lines_total", "source", "{{instance}} {{source}} lines/s"),
                   Query(f"deepinfer_source_lag_bytes{{{NODE}}} {OF_ENGINE}", "{{instance}} {{source}} lag",
                         unit="bytes"),
                   Query(f"deepinfer_source_files{{{NODE}}} {OF_ENGINE}", "{{instance}} {{source}} open files")),
                  min=0),
            Panel("Seconds since the last load sample",
                  "How old the latest stats line of each engine is: an engine that stopped logging stats is stuck "
                  "or dead.",
                  (Query(f"time() - deepinfer_server_last_sample_timestamp_seconds{{{ENGINE}}}",
                         "{{instance}} {{engine}}"),),
                  unit="s", min=0),
            Panel("Rotations and truncations", "Log rotations followed and copytruncate truncations seen.",
                  (per_second("deepinfer_source_rotations_total", "source", "{{instance}} {{source}} rotations"),
                   per_second("deepinfer_source_truncations_total", "source", "{{instance}} {{source}} truncations")),
                  min=0),
            Panel("Read and parse problems",
                  "Per second: files that could not be read, envelope framing errors, undecodable bytes, lines cut "
                  "at max_line_bytes, lines whose numbers could not be parsed.",
                  (per_second("deepinfer_source_read_errors_total", "source", "{{instance}} {{source}} read errors"),
                   per_second("deepinfer_source_framing_errors_total", "source", "{{instance}} {{source}} framing"),
                   per_second("deepinfer_source_invalid_utf8_total", "source", "{{instance}} {{source}} invalid UTF-8"),
                   per_second("deepinfer_source_truncated_lines_total", "source", "{{instance}} {{source}} cut lines"),
                   per_second("deepinfer_parse_errors_total", "source", "{{instance}} {{source}} parse errors")),
                  min=0),
            Panel("NVML and engine scrapes",
                  "NVML call failures by call; engine /metrics scrapes, failures and how long the last one took.",
                  (per_second("deepinfer_nvml_errors_total", "call", "{{instance}} NVML {{call}}"),
                   per_second("deepinfer_scrapes_total", "target", "{{instance}} scrapes {{target}}"),
                   per_second("deepinfer_scrape_errors_total", "target", "{{instance}} failed {{target}}"),
                   Query(f"deepinfer_scrape_duration_seconds{{{ENGINE}}}", "{{instance}} last scrape {{target}}",
                         unit="s")),
                  min=0),
            Panel("Metrics port",
                  "How connections to the agent's /metrics ended per second: served, or cut off (timed out, "
                  "evicted to make room, refused, malformed, reset) so that idle or slow clients never starve a "
                  "scraper; accepts that failed (out of file descriptors).",
                  (per_second("deepinfer_exporter_connections_total", "outcome", "{{instance}} {{outcome}}"),
                   per_second("deepinfer_exporter_accept_errors_total", "", "{{instance}} accept errors")),
                  min=0),
            Panel("Store",
                  "SQLite: size, records held in memory while it cannot be written, write failures and records "
                  "dropped per second.",
                  (Query(f"deepinfer_store_size_bytes{{{NODE}}}", "{{instance}} size", unit="bytes"),
                   Query(f"deepinfer_store_buffered_records{{{NODE}}}", "{{instance}} buffered records"),
                   per_second("deepinfer_store_write_errors_total", "", "{{instance}} write errors"),
                   per_second("deepinfer_store_dropped_records_total", "", "{{instance}} dropped records")),
                  min=0),
            Panel("Config reloads",
                  "Reloads (SIGHUP) attempted and rejected in the interval, and whether the last one was accepted.",
                  (Query(f"sum by (instance) (increase(deepinfer_config_reloads_total{{{NODE}}}[{RATE}]))",
                         "{{instance}} reloads"),
                   Query(f"sum by (instance) (increase(deepinfer_config_reload_errors_total{{{NODE}}}[{RATE}]))",
                         "{{instance}} rejected"),
                   Query(f"deepinfer_config_last_reload_success{{{NODE}}}", "{{instance}} last accepted")),
                  min=0),
            Panel("Agents",
                  "Version, revision and Python of the agent on each node, its uptime, CPU and memory.",
                  (Query(f"deepinfer_build_info{{{NODE}}}", instant=True),
                   Query(f"rate(process_cpu_seconds_total{{{NODE}}}[{RATE}])", instant=True, unit="percentunit"),
                   Query(f"process_resident_memory_bytes{{{NODE}}}", instant=True, unit="bytes"),
                   Query(f"process_open_fds{{{NODE}}}", instant=True),
                   Query(f"time() - deepinfer_agent_start_time_seconds{{{NODE}}}", instant=True, unit="s")),
                  kind="table"),
        )),
    ),
)

DASHBOARDS: tuple[Dashboard, ...] = (NODE_OVERVIEW, INCIDENTS)
DATASOURCE = md.DataSourceRef(type_val="prometheus", uid="${datasource}")


def _variables() -> list[Any]:
    def query_variable(name: str, label: str, query: str) -> Any:
        return (gd.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
                .multi(True).include_all(True).all_value(".*").sort(md.VariableSort.ALPHABETICAL_ASC)
                .refresh(md.VariableRefresh.ON_TIME_RANGE_CHANGED))

    return [
        gd.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        query_variable("job", "Job", "label_values(deepinfer_agent_info, job)"),
        query_variable("instance", "Node", 'label_values(deepinfer_agent_info{job=~"$job"}, instance)'),
        query_variable("engine", "Engine", ENGINE_VARIABLE),
    ]


def _target(query: Query, ref_id: str) -> Any:
    target = gp.Dataquery().expr(query.expr).ref_id(ref_id).legend_format(query.legend or "__auto")
    if query.instant:
        target = target.instant().format(mp.PromQueryFormat.TABLE)
    return target


def _panel(panel: Panel, panel_id: int) -> Any:
    builder: Any
    if panel.kind in ("timeseries", "bars"):
        builder = gts.Panel().fill_opacity(10 if panel.kind == "timeseries" else 80)
        if panel.kind == "bars":
            builder = builder.draw_style(common.GraphDrawStyle.BARS)
        if panel.stacked:
            builder = builder.stacking(gcommon.StackingConfig().mode(common.StackingMode.NORMAL))
    elif panel.kind == "stat":
        builder = gstat.Panel()
    elif panel.kind == "table":
        builder = gtable.Panel()
    else:
        raise ValueError(f"unknown panel kind {panel.kind!r}")
    builder = (builder.id(panel_id).title(panel.title).description(panel.description).datasource(DATASOURCE)
               .span(panel.width).height(panel.height).unit(panel.unit))
    if panel.min is not None:
        builder = builder.min(panel.min)
    if panel.max is not None:
        builder = builder.max(panel.max)
    if panel.thresholds:
        steps = [md.Threshold(value=None, color="green")]
        steps += [md.Threshold(value=value, color=color) for value, color in panel.thresholds]
        builder = builder.thresholds(gd.ThresholdsConfig().mode(md.ThresholdsMode.ABSOLUTE).steps(steps))
    for index, query in enumerate(panel.queries):
        ref_id = chr(ord("A") + index)
        builder = builder.with_target(_target(query, ref_id))
        if query.unit is not None:
            builder = builder.override_by_query(ref_id, [md.DynamicConfigValue(id_val="unit", value=query.unit)])
    return builder


def build(spec: Dashboard) -> dict[str, Any]:
    """The dashboard's JSON model (a dict), ready for file provisioning or the HTTP API."""
    builder = (gd.Dashboard(spec.title).uid(spec.uid).description(spec.description).tags(list(spec.tags))
               .editable().time("now-6h", "now").refresh("30s").timezone("browser")
               .tooltip(md.DashboardCursorSync.CROSSHAIR).variables(_variables()))
    panel_id = 1
    for row in spec.rows:
        builder = builder.with_row(gd.Row(row.title).id(panel_id))
        panel_id += 1
        for panel in row.panels:
            builder = builder.with_panel(_panel(panel, panel_id))
            panel_id += 1
    model: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return model


DATASOURCE_YAML = """\
# Grafana datasource provisioning (generated by grafana/generate.py; edit the generator, not this file).
# Point url at the Prometheus (or Thanos Query / Mimir) that holds the agents' metrics (docs/fleet.md).
apiVersion: 1
datasources:
  - name: Prometheus
    uid: prometheus
    type: prometheus
    access: proxy
    url: http://127.0.0.1:9090
    isDefault: true
    jsonData:
      timeInterval: 15s   # the agents' scrape interval: $__rate_interval is at least 4 × this
"""

DASHBOARDS_YAML = """\
# Grafana dashboard provisioning (generated by grafana/generate.py; edit the generator, not this file).
# Copy grafana/dashboards/*.json to the path below (or change it to where the repository is checked out).
apiVersion: 1
providers:
  - name: deepinfer-agent
    folder: deepinfer-agent
    type: file
    disableDeletion: false
    allowUiUpdates: false
    updateIntervalSeconds: 60
    options:
      path: /var/lib/grafana/dashboards/deepinfer-agent
"""


def outputs() -> dict[Path, str]:
    """Every generated file (relative to grafana/) and its text."""
    files = {Path("dashboards") / f"{spec.uid}.json": json.dumps(build(spec), indent=2, sort_keys=True) + "\n"
             for spec in DASHBOARDS}
    files[Path("provisioning/datasources/deepinfer-agent.yaml")] = DATASOURCE_YAML
    files[Path("provisioning/dashboards/deepinfer-agent.yaml")] = DASHBOARDS_YAML
    return files


def panels() -> Iterable[tuple[Dashboard, Panel]]:
    for spec in DASHBOARDS:
        for row in spec.rows:
            for panel in row.panels:
                yield spec, panel


def panel_metrics() -> dict[str, dict[str, list[str]]]:
    """Dashboard uid → panel title → the metric names its queries use (machine-readable for tests)."""
    out: dict[str, dict[str, list[str]]] = {}
    for spec, panel in panels():
        out.setdefault(spec.uid, {})[panel.title] = panel.metrics()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files; write nothing")
    parser.add_argument("--list-metrics", action="store_true", help="print dashboard → panel → metrics as JSON")
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: this folder)")
    args = parser.parse_args(argv)
    if args.list_metrics:
        print(json.dumps(panel_metrics(), indent=2, sort_keys=True))
        return 0
    stale = []
    for relative, text in outputs().items():
        path = args.out / relative
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(relative))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print(f"out of date (run python grafana/generate.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
