"""The exporter: families rebuilt from a snapshot, counters from restart-safe totals, lint-clean, documented."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent.bookkeeping import SourceStats
from agent.buildinfo import BuildInfo
from agent.prom import exposition_samples
from agent.records import EventKind, GpuProcessSample, GpuSample, HistogramWindow, Server, ServerStats
from agent.sinks.exporter import MetricsServer, Snapshot, SnapshotCollector, TargetState

METRICS_DOC = (Path(__file__).parent.parent.parent / "docs" / "metrics.md").read_text()

FULL = Snapshot(
    version="1.2.3", started_at=100.0,
    totals={("events_total", ("vllm", "vllm", "oom")): 2.0, ("gpu_xid_errors_total", ("0", "79")): 1.0,
            ("source_lines_total", ("vllm",)): 10.0, ("nvml_errors_total", ("nvmlInit",)): 3.0,
            ("store_write_errors_total", ()): 1.0, ("not_a_counter", ("x",)): 5.0},
    sources=[SourceStats("vllm", lag_bytes=42)],
    servers={"vllm": ServerStats(200.0, "vllm", Server.VLLM, running=5, waiting=2, kv_usage_ratio=0.42)},
    facts={"vllm": {"kv_cache_tokens": 176240.0, "model": "Qwen/Qwen3-0.6B"}},
    gpus=[GpuSample(200.0, 0, "GPU-1", "NVIDIA H100", None, 80, None, 60, 20, 0.5, 0.25, 61.0, 350.0, 700.0)],
    gpu_processes=[GpuProcessSample(200.0, 0, "GPU-1", 1234, 15), GpuProcessSample(200.0, 0, "GPU-1", 99, 5)],
    nvml_enabled=True, nvml_up=True, store_size_bytes=4096,
    budget={"max_concurrency": 13.0}, configured={"max_num_seqs": 13.0},
)


def exposition(snapshot: Snapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshot))
    return generate_latest(registry).decode()


def test_values_and_labels() -> None:
    samples = exposition_samples(exposition(FULL))
    events = {labels["kind"]: value for labels, value in samples["deepinfer_events"]
              if (labels["source"], labels["server"]) == ("vllm", "vllm")}
    assert events.pop("oom") == 2.0
    assert set(events.values()) == {0.0} and len(events) == len(EventKind) - 1, \
        "every other kind at 0, so a first event is seen"
    assert samples["deepinfer_gpu_xid_errors"] == [({"gpu": "0", "xid": "79"}, 1.0)]
    assert samples["deepinfer_server_kv_cache_usage_ratio"] == [
        ({"engine": "vllm", "server": "vllm", "source": "vllm"}, 0.42)]
    assert samples["deepinfer_gpu_process_memory_used_bytes"] == [({"gpu": "0"}, 20.0)]  # summed, no pid label
    assert samples["deepinfer_source_lag_bytes"] == [({"source": "vllm"}, 42.0)]
    assert "deepinfer_gpu_memory_reserved_bytes" not in samples  # None is no sample, never 0
    assert "not_a_counter" not in exposition(FULL)


def test_series_of_a_vanished_source_disappear() -> None:
    gone = Snapshot(version="1.2.3", started_at=100.0)
    samples = exposition_samples(exposition(gone))
    assert not any(labels.get("source") == "vllm" for series in samples.values() for labels, _ in series)
    assert "deepinfer_nvml_up" not in samples  # NVML disabled: no sample at all, not a 0


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (.ci/run installs it)")
def test_promtool_finds_nothing_to_complain_about() -> None:
    lint = subprocess.run(["promtool", "check", "metrics"], input=exposition(FULL), capture_output=True, text=True)
    assert lint.returncode == 0 and lint.stderr == "", lint.stderr


def test_every_exported_metric_is_documented_in_docs_metrics() -> None:
    names = {line.split("{")[0].split(" ")[0] for line in exposition(FULL).splitlines() if line and line[0] != "#"}
    names |= {line.split()[2] for line in exposition(FULL).splitlines() if line.startswith("# TYPE")}
    for name in sorted(names):
        base = name.removesuffix("_created")
        assert f"`{base}`" in METRICS_DOC or f"`{base}_total`" in METRICS_DOC or f"`{base}_info`" in METRICS_DOC, name


def test_server_binds_loopback_port_zero_and_serves_a_landing_page() -> None:
    server = MetricsServer(lambda: FULL, "127.0.0.1", 0)
    server.start()
    try:
        assert server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=5) as page:
            assert b'href="/metrics"' in page.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as metrics:
            assert b"deepinfer_events_total" in metrics.read()
    finally:
        server.close()


# A glob source `pods` feeding two engines, a single-file source `solo`, a scrape target `sgl` of its own.
GLOB = Snapshot(
    version="1.2.3", started_at=100.0,
    totals={("events_total", ("pods/a", "vllm", "queue_full")): 46.0},
    sources=[SourceStats("pods"), SourceStats("solo", up=False, down_reason="missing")],
    servers={"pods/b": ServerStats(200.0, "pods/b", Server.VLLM, running=1)},
    targets=[TargetState("sgl", up=True, last_duration_seconds=0.01)],
    histograms={("sgl", "ttft_seconds"): HistogramWindow(200.0, "sgl", Server.SGLANG, "ttft_seconds",
                                                         (0.1, 1.0, float("inf")), (2.0, 5.0, 6.0), 4.5)},
    build=BuildInfo(version="1.2.3", revision="abc123", branch="main", python="3.11.2"),
)


def test_one_engine_label_on_every_engine_series_and_the_source_that_feeds_it() -> None:
    samples = exposition_samples(exposition(GLOB))
    # the dashboard's engine list: source_up carries each engine its source feeds, scrape_up its target's
    assert sorted((labels["source"], labels["engine"]) for labels, _ in samples["deepinfer_source_up"]) == [
        ("pods", "pods/a"), ("pods", "pods/b"), ("solo", "")]
    assert samples["deepinfer_scrape_up"] == [({"target": "sgl", "engine": "sgl"}, 1.0)]
    # engine series: `engine`, and the deprecated `source` with the same value
    refused = [(labels, value) for labels, value in samples["deepinfer_events"] if labels["kind"] == "queue_full"]
    assert sorted(refused, key=lambda r: r[0]["engine"]) == [
        ({"engine": "pods/a", "server": "vllm", "kind": "queue_full", "source": "pods/a"}, 46.0),
        ({"engine": "pods/b", "server": "vllm", "kind": "queue_full", "source": "pods/b"}, 0.0)]
    assert samples["deepinfer_server_running_requests"] == [
        ({"engine": "pods/b", "server": "vllm", "source": "pods/b"}, 1.0)]


def test_latency_histograms_are_prometheus_histograms_per_engine() -> None:
    samples = exposition_samples(exposition(GLOB))
    buckets = {labels["le"]: value for labels, value in samples["deepinfer_request_ttft_seconds_bucket"]
               if labels["engine"] == "sgl" and labels["server"] == "sglang"}
    assert buckets == {"0.1": 2.0, "1.0": 5.0, "+Inf": 6.0}
    assert samples["deepinfer_request_ttft_seconds_count"] == [({"engine": "sgl", "server": "sglang"}, 6.0)]
    assert samples["deepinfer_request_ttft_seconds_sum"] == [({"engine": "sgl", "server": "sglang"}, 4.5)]


def test_build_info_and_counters_without_labels_start_at_zero() -> None:
    samples = exposition_samples(exposition(GLOB))
    assert samples["deepinfer_build_info"] == [
        ({"version": "1.2.3", "revision": "abc123", "branch": "main", "python": "3.11.2"}, 1.0)]
    for counter in ("deepinfer_config_reloads", "deepinfer_config_reload_errors", "deepinfer_store_write_errors",
                    "deepinfer_rule_load_errors"):
        assert samples[counter] == [({}, 0.0)], counter


def test_the_server_adds_process_metrics() -> None:
    server = MetricsServer(lambda: GLOB, "127.0.0.1", 0)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as metrics:
            body = metrics.read().decode()
    finally:
        server.close()
    samples = exposition_samples(body)
    assert samples["process_resident_memory_bytes"][0][1] > 0
    assert samples["process_open_fds"][0][1] > 0
