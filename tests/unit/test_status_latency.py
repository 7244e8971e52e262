"""`status` shows what the engines' own latency histograms say about the last requests, when scraped."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agent.config import load_config
from agent.daemon.status import gather
from agent.records import HistogramWindow, Server, ServerStats
from agent.sinks.store import Store
from agent.views.status import render, to_json

INF = float("inf")


def test_status_shows_scraped_latency_percentiles_and_none_for_a_log_only_engine(tmp_path: Path) -> None:
    now = time.time()
    store = Store.open(tmp_path / "agent.db")
    bounds = (0.1, 0.5, 1.0, INF)
    store.commit([
        ServerStats(now - 60, "vllm", Server.VLLM, running=3, waiting=0, kv_usage_ratio=0.4),
        ServerStats(now - 60, "logonly", Server.VLLM, running=1, waiting=0, kv_usage_ratio=0.1),
        # two one-minute windows that add up to 100 TTFTs: 10 ≤ 0.1 s, 80 in (0.1, 0.5], 10 in (0.5, 1]
        HistogramWindow(now - 120, "vllm", Server.VLLM, "ttft_seconds", bounds, (4, 40, 50, 50), 15.0),
        HistogramWindow(now - 60, "vllm", Server.VLLM, "ttft_seconds", bounds, (6, 50, 50, 50), 12.0),
        HistogramWindow(now - 60, "vllm", Server.VLLM, "e2e_latency_seconds", (1.0, 10.0, INF), (0, 100, 100), 500.0),
        # older than the window: not counted
        HistogramWindow(now - 3600, "vllm", Server.VLLM, "ttft_seconds", bounds, (0, 0, 0, 1000), 9000.0),
    ], now=now)
    store.close()
    config_path = tmp_path / "config.yaml"
    config_path.write_text("store: {path: agent.db}\nmetrics: {port: 1}\nnvml: {enabled: false}\n")
    config = load_config(config_path)
    report = gather(config, timeout=0.2)
    ttft = report.latency["vllm"]["ttft_seconds"]
    assert ttft["requests"] == 100
    assert ttft["p50"] is not None and abs(ttft["p50"] - 0.3) < 1e-9  # 0.1 + (50 − 10) / 80 × 0.4
    assert ttft["p95"] is not None and abs(ttft["p95"] - 0.75) < 1e-9  # 0.5 + (95 − 90) / 10 × 0.5
    assert "logonly" not in report.latency and "queue_time_seconds" not in report.latency["vllm"]
    text = render(report, config, None, now)
    line = next(x for x in text.splitlines() if "latency" in x)
    assert "vllm" in line and "100 requests" in line
    assert "TTFT p50 300 ms, p95 750 ms" in line and "e2e p50 5.5 s, p95 9.6 s" in line
    assert json.loads(json.dumps(to_json(report, config, None)))["latency"]["vllm"]["ttft_seconds"]["requests"] == 100


def test_a_run_of_the_same_event_is_one_status_line_with_its_count(tmp_path: Path) -> None:
    from agent.records import Event, EventKind, Phase, Severity

    now = time.time()
    refusals = [Event(now - i, "vllm", Server.VLLM, EventKind.HTTP_503, Severity.WARNING, Phase.ADMISSION,
                      f'<client> - "<redacted>" 503 Service Unavailable req-{i}', {"status": 503}, "/v.log", i)
                for i in range(9)]
    oom = Event(now - 30, "vllm", Server.VLLM, EventKind.OOM, Severity.ERROR, Phase.RUNTIME, "CUDA out of memory",
                {}, "/v.log", 100)
    with Store.open(tmp_path / "agent.db") as store:
        store.commit([*refusals, oom], now=now)
    config_path = tmp_path / "config.yaml"
    config_path.write_text("store: {path: agent.db}\nmetrics: {port: 1}\nnvml: {enabled: false}\n")
    config = load_config(config_path)
    text = render(gather(config, timeout=0.2), config, None, now)
    event_lines = [x for x in text.splitlines() if "vllm:" in x]
    assert len(event_lines) == 2, text  # nine refusals in a row, then the OOM: two lines, none repeated
    assert "(×9, the newest shown)" in event_lines[0] and "http_503" in event_lines[0]
    assert "oom" in event_lines[1]
