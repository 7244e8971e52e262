"""The load test against the SIMULATED engine, over real HTTP on 127.0.0.1 (port 0), and the project's
own readers on what the simulator writes: agent.offline.saved (the vLLM parser) on its log, agent.sources.scrape on its
/metrics. The simulator runs in a thread with its own event loop; the load test in the test's thread.
"""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.capacity.budget import GIB, BudgetInputs, compute
from agent.capacity.shapes import find_preset
from agent.errors import AgentError
from agent.offline.saved import scan_stream
from agent.records import CapacityFact, Event, EventKind, Phase, Server, ServerStats
from agent.sources.scrape import Scraper
from agent.tools.loadtest import LoadTestOptions, run, synthetic_payload
from agent.tools.loadtest_report import LoadTestResult
from agent.tools.sim import SimConfig, from_budget
from agent.tools.sim_server import SimServer
from agent.verdicts import LoadStep
from tests.fake_nvml import FakeNvml

pytestmark = pytest.mark.integration

# 117 blocks of 16 tokens; 256 tokens per request = 16 blocks → the budget allows 7.
INPUTS = BudgetInputs(shape=find_preset("qwen2.5-7b"), vram_bytes=16 * GIB, util=0.9,
                      weights_bytes=int(12.7 * GIB), overhead_bytes=int(1.6 * GIB), tokens_per_request=256)
PROMPT, OUTPUT = 16, 240  # 256 tokens per request, as the budget assumes; the growth happens in decode
# A step lasts 1 ms (50 tokens/s, 20× faster): longer than the spread of the clients' arrivals over HTTP,
# so a level's requests grow in step as they do on a real engine, where a step takes tens of ms.
SPEED = 20.0


class Running:
    """A SimServer serving from a background thread; `wait_for` polls a condition on the engine."""

    def __init__(self, server: SimServer, loop: asyncio.AbstractEventLoop, exit_code: list[int]) -> None:
        self.server = server
        self.loop = loop
        self.exit_code = exit_code
        self.url = server.url

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "condition not reached"
            time.sleep(0.01)


@contextmanager
def simulator(config: SimConfig, log: Path | None = None, stats_interval: float = 0.05) -> Iterator[Running]:
    server = SimServer(config, log, stats_interval_seconds=stats_interval)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    exit_code: list[int] = []

    async def main() -> None:
        from agent.tools.sim_server import serve

        exit_code.append(await serve(server, "127.0.0.1", 0, lambda url: ready.set(), stop))

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(5), "the simulator did not start"
    try:
        yield Running(server, loop, exit_code)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def _run(options: LoadTestOptions) -> LoadTestResult:
    return asyncio.run(run(options))


def _options(base: str, **kw: object) -> LoadTestOptions:
    settings: dict[str, object] = dict(url=base + "/v1/completions", payload=synthetic_payload(PROMPT, OUTPUT, False),
                                       pause_seconds=0.2, timeout_seconds=30.0, gpu=False)
    settings.update(kw)
    return LoadTestOptions(**settings)  # type: ignore[arg-type]


def test_load_test_finds_the_budget_bound_within_one_level(tmp_path: Path) -> None:
    bound = compute(INPUTS).max_concurrency
    assert bound == 7
    log = tmp_path / "sim.log"
    with simulator(from_budget(INPUTS, speed=SPEED), log) as sim:
        result = _run(_options(sim.url, levels=(3, 5, 7, 8, 9), requests_per_level=16, capacity=bound,
                               log_path=log))
    levels = [(s.level, s.broke) for s in result.steps]
    assert levels == [(3, False), (5, False), (7, False), (8, True)], result.steps
    broken = result.steps[-1]
    assert broken.preemption_events > 0 and broken.errors == {} and broken.ok == broken.requests == 16
    assert result.verdict.safe_level == 7 and result.verdict.broken_level == 8 and result.verdict.agrees
    assert result.verdict.text.startswith("budget says 7, measured safe up to 7, first preemptions at 8")
    safe = result.steps[2]
    assert safe.kv_usage_peak_ratio is not None and 0.5 < safe.kv_usage_peak_ratio <= 1.0
    assert safe.running_peak is not None and safe.running_peak <= 7
    assert safe.latency_p50_seconds is not None and safe.throughput_rps is not None
    assert isinstance(broken, LoadStep) and broken.target.endswith("/v1/completions")


@pytest.mark.parametrize("status", [503, 429])
def test_refusals_are_classified_by_status(status: int) -> None:
    config = SimConfig(kv_blocks=1000, max_num_seqs=1, max_queue_size=0, reject_status=status, speed=5.0)
    with simulator(config) as sim:
        result = _run(_options(sim.url, payload=synthetic_payload(8, 20, False), levels=(4,), requests_per_level=8))
    (step,) = result.steps
    assert step.broke and step.errors.get(f"http_{status}", 0) > 0
    assert set(step.errors) == {f"http_{status}"}
    assert step.ok + step.errors[f"http_{status}"] == step.requests == 8
    assert result.verdict.cause == f"{status} refusals"


def test_client_timeout_server_timeout_and_connection_errors() -> None:
    slow = SimConfig(kv_blocks=1000, decode_tps=50.0, speed=1.0)  # 50 tokens take 1 s
    with simulator(slow) as sim:
        client_side = _run(_options(sim.url, payload=synthetic_payload(8, 50, False), levels=(2,),
                                    requests_per_level=2, timeout_seconds=0.2, pause_seconds=0.0))
    assert client_side.steps[0].errors == {"timeout": 2}

    deadline = SimConfig(kv_blocks=1000, decode_tps=50.0, speed=1.0, request_timeout_seconds=0.2)
    with simulator(deadline) as sim:
        server_side = _run(_options(sim.url, payload=synthetic_payload(8, 50, False), levels=(2,),
                                    requests_per_level=2, pause_seconds=0.0))
    assert server_side.steps[0].errors == {"http_5xx": 2}  # the simulator's 504 after work began

    with simulator(SimConfig(kv_blocks=1000)) as sim:
        gone = sim.url
    refused = _run(_options(gone, levels=(2,), requests_per_level=2, metrics_url="", pause_seconds=0.0))
    assert refused.steps[0].errors == {"connection": 2}
    assert refused.verdict.cause == "connection errors"


def test_streaming_measures_time_to_first_token() -> None:
    with simulator(SimConfig(kv_blocks=1000, speed=20.0)) as sim:
        result = _run(_options(sim.url, payload=synthetic_payload(8, 20, True), url=sim.url + "/v1/chat/completions",
                               stream=True, levels=(2,), requests_per_level=4, pause_seconds=0.0))
    (step,) = result.steps
    assert step.ok == 4 and step.ttft_p50_seconds is not None and step.latency_p50_seconds is not None
    assert step.ttft_p50_seconds < step.latency_p50_seconds
    assert step.output_tokens_per_second is not None and step.output_tokens_per_second > 0


def _scan(path: Path) -> list[object]:
    return list(scan_stream(io.BytesIO(path.read_bytes()), str(path), Server.AUTO, time.time()).records)


def test_the_vllm_parser_reads_the_simulators_log(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    config = from_budget(INPUTS, speed=SPEED, max_queue_size=0, max_num_seqs=8)
    with simulator(config, log) as sim:
        result = _run(_options(sim.url, levels=(8,), requests_per_level=8, pause_seconds=0.0))
        _run(_options(sim.url, levels=(9,), requests_per_level=9, pause_seconds=0.0))  # one over: 503s
        preemptions = sim.server.engine.counters.preemptions
        assert preemptions > 0
        time.sleep(0.2)  # two stats intervals: the last one with work in it is written
    assert result.steps[0].preemption_events > 0
    records = _scan(log)
    facts = {r.name: r.value for r in records if isinstance(r, CapacityFact)}
    assert facts["kv_cache_tokens"] == config.kv_blocks * 16
    assert facts["tokens_per_request"] == 256
    assert facts["max_concurrency"] == round(config.kv_blocks * 16 / 256, 2)
    assert facts["max_num_seqs"] == 8 and facts["gpu_memory_utilization"] == 0.9
    assert "total_gpu_memory_bytes" not in facts, "vLLM 0.32 prints no memory-profiling block"
    assert abs(float(facts["kv_cache_bytes"]) - compute(INPUTS).usable_kv_bytes) < 0.01 * GIB
    stats = [r for r in records if isinstance(r, ServerStats)]
    assert stats and max(s.running or 0 for s in stats) > 0
    assert max(s.kv_usage_ratio or 0 for s in stats) > 0.5
    events = [r for r in records if isinstance(r, Event)]
    # like vLLM V1, the log never shows a preemption: the load test counted them from /metrics (above)
    assert not any(e.kind is EventKind.PREEMPTION for e in events)
    assert any(e.kind is EventKind.HTTP_503 for e in events)
    assert not any(e.kind is EventKind.OOM for e in events)


def test_oom_mode_logs_a_cuda_oom_traceback_and_exits_non_zero(tmp_path: Path) -> None:
    log = tmp_path / "oom.log"
    config = from_budget(INPUTS, speed=SPEED, oom_on_overcommit=True)
    with simulator(config, log) as sim:
        result = _run(_options(sim.url, levels=(8,), requests_per_level=8, pause_seconds=0.2, log_path=log))
        sim.wait_for(lambda: bool(sim.exit_code))
    assert sim.exit_code == [1]
    step = result.steps[0]
    assert step.broke and step.oom_events == 1
    ooms = [r for r in _scan(log) if isinstance(r, Event) and r.kind is EventKind.OOM]
    assert len(ooms) == 1 and ooms[0].phase is Phase.RUNTIME
    requested = ooms[0].fields.get("requested_bytes")
    assert isinstance(requested, int) and requested == pytest.approx(compute(INPUTS).block_bytes, rel=0.01)
    assert ooms[0].fields.get("total_bytes") == 16 * GIB


def test_the_scraper_reads_the_simulators_metrics() -> None:
    config = from_budget(INPUTS, speed=SPEED)
    with simulator(config) as sim:
        scraper = Scraper(sim.url + "/metrics", server=Server.VLLM, interval_seconds=0.0)
        first = scraper.poll(1000.0)
        _run(_options(sim.url, levels=(8,), requests_per_level=8, pause_seconds=0.0, metrics_url=""))
        second = scraper.poll(1001.0)
        body = sim.server.exposition()
    facts = {r.name: r.value for r in first if isinstance(r, CapacityFact)}
    assert facts["gpu_blocks"] == config.kv_blocks and facts["block_size"] == 16
    assert facts["gpu_memory_utilization"] == 0.9
    (stats,) = [r for r in first if isinstance(r, ServerStats)]
    assert (stats.running, stats.waiting, stats.kv_usage_ratio) == (0, 0, 0.0)
    preempt = [r for r in second if isinstance(r, Event) and r.kind is EventKind.PREEMPTION]
    assert preempt and preempt[0].fields["count"] == sim.server.engine.counters.preemptions
    assert 'model_name="simulated/' in body
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True,
                               check=False)
        problems = [line for line in check.stderr.splitlines() if "should not contain ':'" not in line]
        assert problems == [], problems  # vLLM's own names carry ':'; nothing else may be wrong


def test_the_simulators_histograms_scraped_by_the_real_path_give_latency_signals() -> None:
    """/metrics → Scraper (windows of the requests finished between two scrapes) → the store → the rules'
    window aggregates: the latency and length signals the timeout rules read."""
    from agent.judge.rules import Aggregate
    from agent.judge.signals import Window
    from agent.records import HistogramWindow
    from agent.sinks.queries import Queries
    from agent.sinks.store import Store

    config = from_budget(INPUTS, speed=SPEED)
    with simulator(config) as sim:
        scraper = Scraper(sim.url + "/metrics", server=Server.VLLM, source="sim", interval_seconds=0.0)
        baseline = scraper.poll(1000.0)
        result = _run(_options(sim.url, levels=(4,), requests_per_level=8, pause_seconds=0.0, metrics_url=""))
        after = scraper.poll(1060.0)  # a minute after the baseline: the scrapes' windows are stored
    assert not [r for r in baseline if isinstance(r, HistogramWindow)], "the first scrape is a baseline"
    windows = {r.signal: r for r in after if isinstance(r, HistogramWindow)}
    assert set(windows) == {"e2e_latency_seconds", "ttft_seconds", "queue_time_seconds", "inference_time_seconds",
                            "prompt_tokens", "output_tokens"}
    assert all(w.count == 8 for w in windows.values())
    with Store.open(":memory:") as store:
        store.commit(after, now=1060.0)
        window = Window(Queries(store), "sim", 900.0, 1100.0)

        def value(signal: str, agg: str) -> float | None:
            return window.value(Aggregate(signal=signal, agg=agg), 1)

        assert value("output_tokens", "count") == 8
        # 240 tokens each, above the highest bucket (vLLM's 1-2-5 buckets stop at max_model_len, 256 here):
        # a rank in +Inf answers the highest finite bound, 200, a floor; the mean is exact
        assert windows["output_tokens"].counts[-2:] == (0.0, 8.0)
        assert value("output_tokens", "p50") == 200.0 and value("output_tokens", "max") == 200.0
        prompt_p95 = value("prompt_tokens", "p95")
        assert prompt_p95 is not None and 10 < prompt_p95 <= 20  # 16 tokens each
        assert value("output_tokens", "mean") == pytest.approx(OUTPUT) and value("prompt_tokens", "mean") == PROMPT
        e2e_p99, ttft_p50 = value("e2e_latency_seconds", "p99"), value("ttft_seconds", "p50")
        assert e2e_p99 is not None and ttft_p50 is not None and 0 < ttft_p50 < e2e_p99
        client_max = max(s.latency_p99_seconds or 0.0 for s in result.steps)
        assert value("e2e_latency_seconds", "mean") == pytest.approx(
            windows["e2e_latency_seconds"].sum / 8) and windows["e2e_latency_seconds"].sum / 8 <= client_max


def test_simulate_command_prints_a_simulated_banner_and_serves() -> None:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "agent", "simulate", "--port", "0", "--duration", "10",
                             "--kv-blocks", "100", "--max-model-len", "1024"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        elapsed = time.perf_counter() - started
        assert banner.startswith("SIMULATED vLLM-like engine") and "http://127.0.0.1:" in banner, banner
        assert elapsed < 10
        url = banner.split("serving ")[1].split()[0]
        from agent.http import get

        reply = get(url + "/metrics")
        assert reply.status == 200 and b"vllm:num_requests_running" in reply.body
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_loadtest_command_json_save_and_the_key_stays_secret(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agent.cli import app

    saved = tmp_path / "run.json"
    with simulator(SimConfig(kv_blocks=1000, speed=50.0)) as sim:
        result = CliRunner().invoke(app, ["loadtest", sim.url, "--levels", "1,2", "--requests-per-level", "4",
                                          "--input-tokens", "8", "--output-tokens", "8", "--pause", "0",
                                          "--no-gpu", "--json", "--save", str(saved)],
                                    env={"OPENAI_API_KEY": "sk-very-secret"})
    assert result.exit_code == 0, result.output
    assert "sk-very-secret" not in result.output
    document = json.loads(result.output)
    assert [s["level"] for s in document["steps"]] == [1, 2]
    assert all(s["ok"] == 4 and not s["broke"] for s in document["steps"])
    assert document["verdict"]["safe_level"] == 2
    assert json.loads(saved.read_text()) == document


def test_a_kv_cache_smaller_than_one_request_refuses_to_start_like_vllm(tmp_path: Path) -> None:
    log = tmp_path / "small.log"
    server = SimServer(SimConfig(kv_blocks=10, block_size=16, max_model_len=4096), log)
    with pytest.raises(AgentError, match="max seq len \\(4096\\)"):
        asyncio.run(server.start())
    ooms = [r for r in _scan(log) if isinstance(r, Event) and r.kind is EventKind.OOM]
    assert len(ooms) == 1 and ooms[0].phase is Phase.STARTUP
    assert ooms[0].fields.get("max_model_len") == 4096


def test_gpu_memory_peak_comes_from_nvml(fake_nvml: FakeNvml) -> None:
    """Real pynvml against the fake driver library (the only fake: the hardware)."""
    fake_nvml.set({"count": 1, "gpu0.memory_total": 80 * GIB, "gpu0.memory_used": 61 * GIB,
                   "gpu0.memory_free": 19 * GIB})
    with simulator(SimConfig(kv_blocks=1000, speed=50.0)) as sim:
        result = _run(_options(sim.url, payload=synthetic_payload(8, 8, False), levels=(2,), requests_per_level=4,
                               pause_seconds=0.0, gpu=True, nvml_library=str(fake_nvml.library)))
    assert result.steps[0].gpu_memory_peak_bytes == 61 * GIB


def test_loadtest_exits_4_when_no_level_was_safe_and_still_prints_the_result() -> None:
    """One running slot and no queue: at 4 concurrent requests three are refused, the first level breaks,
    nothing was safe. Exit 4 (not 0, not an error's 1), with the JSON printed all the same."""
    from typer.testing import CliRunner

    from agent.cli import app

    with simulator(SimConfig(kv_blocks=1000, speed=50.0, max_num_seqs=1, max_queue_size=0)) as sim:
        result = CliRunner().invoke(app, ["loadtest", sim.url, "--levels", "4", "--requests-per-level", "8",
                                          "--input-tokens", "8", "--output-tokens", "8", "--pause", "0",
                                          "--no-gpu", "--format", "json"])
    assert result.exit_code == 4, result.output
    document = json.loads(result.output)
    assert document["steps"][0]["broke"] and document["verdict"]["safe_level"] is None
