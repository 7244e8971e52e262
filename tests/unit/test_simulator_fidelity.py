"""The simulator follows REAL vLLM 0.32: every line shape it writes, and every /metrics family and label set it
serves, appears in what the real engine wrote and served (recorded in tests/data/real/engines/vllm-0.32.0 by
tests/engines/record.py). Shapes compare lines with their numbers, times, pids, addresses and names folded; the
deliberate differences (a SIMULATED warning, the process being one) are the only lines allowed beyond the real.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.capacity.budget import GIB, BudgetInputs
from agent.capacity.shapes import find_preset
from agent.prom import exposition_samples
from agent.tools.sim import SimConfig, from_budget
from agent.tools.sim_output import VERSION
from agent.tools.sim_server import SimServer, serve

REAL = Path(__file__).resolve().parents[1] / "data" / "real" / "engines" / "vllm-0.32.0"
_FOLD = (
    (re.compile(r"pid=\d+"), "pid=N"), (re.compile(r"\[\d+\]"), "[N]"),
    (re.compile(r"\d\d-\d\d \d\d:\d\d:\d\d"), "DATE"), (re.compile(r"\[([\w.]+\.py):\d+\]"), r"[\1:N]"),
    (re.compile(r"\d+\.\d+\.\d+\.\d+:\d+"), "ADDR"), (re.compile(r"http://[\w.]+:\d+"), "URL"),
    (re.compile(r"\d[\d,]*(?:\.\d+)?"), "N"),
    (re.compile(r"\b[GC]PU KV cache"), "DEVICE KV cache"),  # the recording is the CPU build; the simulator a GPU
)
# Lines only vLLM's GPU worker writes, which the CPU recording cannot hold (vllm 0.32.0: v1/worker/
# gpu_model_runner.py:5150 "Model loading took %s GiB memory and %.6f seconds", gpu_worker.py:760 "Available KV
# cache memory: %s GiB")
GPU_ONLY = ("[gpu_model_runner.py:N] Model loading took N GiB memory and N seconds",
            "[gpu_worker.py:N] Available KV cache memory: N GiB")


def shape(line: str) -> str:
    for pattern, repl in _FOLD:
        line = pattern.sub(repl, line)
    return line


def real_lines() -> list[str]:
    return [line for p in sorted(REAL.glob("*/engine.log")) for line in p.read_text().splitlines()]


def _prefix_and_head(line: str) -> str:
    """The line's shape up to its message's first words: the part a format string fixes."""
    s = shape(line)
    return s if s.startswith("INFO:     ") else s[:s.find("] ") + 2 + 24] if "] " in s else s


INPUTS = BudgetInputs(shape=find_preset("qwen2.5-7b"), vram_bytes=16 * GIB, util=0.9,
                      weights_bytes=int(12.7 * GIB), overhead_bytes=int(1.6 * GIB), tokens_per_request=256)


@contextmanager
def simulated(tmp_path: Path, config: SimConfig) -> Iterator[SimServer]:
    server = SimServer(config, tmp_path / "sim.log", stats_interval_seconds=0.05)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    thread = threading.Thread(target=loop.run_until_complete,
                              args=(serve(server, "127.0.0.1", 0, lambda url: ready.set(), stop),), daemon=True)
    thread.start()
    assert ready.wait(5)
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(5)


def _post(url: str, body: dict[str, object]) -> int:
    request = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_every_line_the_simulator_writes_has_the_shape_of_a_real_vllm_line(tmp_path: Path) -> None:
    config = from_budget(INPUTS, max_num_seqs=4, max_queue_size=1)
    with simulated(tmp_path, config) as sim:
        statuses = [_post(sim.url, {"model": config.model_name, "prompt": "hello " * 8, "max_tokens": 8})
                    for _ in range(2)]
        statuses.append(_post(sim.url, {"model": "no-such-model", "prompt": "hi", "max_tokens": 4}))
        statuses.append(_post(sim.url, {"model": config.model_name, "prompt": "hi", "max_tokens": 100_000}))
        _ = sim.exposition()
    assert statuses == [200, 200, 404, 400]
    written = (tmp_path / "sim.log").read_text().splitlines()
    real = {_prefix_and_head(line) for line in real_lines()}
    odd = [line for line in written if _prefix_and_head(line) not in real and "SIMULATED" not in line
           and not shape(line).endswith(GPU_ONLY)]
    assert not odd, "lines real vLLM 0.32 never writes:\n" + "\n".join(odd)
    # and the lines that matter are there, in the real engine's words
    text = "\n".join(written)
    assert f"version {VERSION}" in text and "Initializing a V1 LLM engine (v0.32.0)" in text
    assert re.search(r"GPU KV cache size: [\d,]+ tokens, Maximum concurrency for [\d,]+ tokens per request", text)
    assert "INFO:     Application startup complete." in written
    assert "Preemptions:" not in text and "Prefix cache hit rate" not in text


def test_the_death_sequence_follows_the_real_engines(tmp_path: Path) -> None:
    from agent.tools.sim_output import VllmLog

    log = VllmLog(tmp_path / "dead.log")
    log.engine_dead()
    log.shutdown()
    log.close()
    written = [shape(line) for line in (tmp_path / "dead.log").read_text().splitlines()]
    death = [shape(line) for line in (REAL / "death" / "engine.log").read_text().splitlines()]
    for line in written:
        if "File " in line or "outputs = await" in line:
            continue  # frames: the real ones name the installed paths
        assert line in death, line
    order = [next(i for i, d in enumerate(death) if key in d) for key in
             ("MPClient: engine core exited unexpectedly", "AsyncLLM output_handler failed.", "EngineDeadError",
              "Shutting down")]
    assert order == sorted(order)


def test_every_metrics_family_and_label_set_the_simulator_serves_is_real_vllms() -> None:
    real: dict[str, set[frozenset[str]]] = {}
    for p in REAL.glob("*/metrics.txt"):
        for name, samples in exposition_samples(p.read_text()).items():
            real.setdefault(name, set()).update(frozenset(labels) for labels, _ in samples)
    config = from_budget(INPUTS, max_num_seqs=4)
    served = SimServer(config).exposition()
    for name, samples in exposition_samples(served).items():
        assert name in real, f"{name}: not a vLLM 0.32 family"
        for labels, _ in samples:
            if name.endswith("_info"):  # an info metric: the labels the agent reads, of the dozens vLLM sets
                assert any(frozenset(labels) <= r for r in real[name]), f"{name}{sorted(labels)}"
            else:
                assert frozenset(labels) in real[name], f"{name}{sorted(labels)}: vLLM 0.32 labels it {real[name]}"
    assert "vllm:gpu_cache_usage_perc" not in exposition_samples(served), "gone in V1"


@pytest.mark.parametrize("family", ["vllm:cache_config_info"])
def test_cache_config_info_carries_the_capacity_labels_real_vllm_serves(family: str) -> None:
    config = from_budget(INPUTS, max_num_seqs=4)
    ((labels, _),) = exposition_samples(SimServer(config).exposition())[family]
    assert int(labels["kv_cache_size_tokens"]) == config.kv_cache_tokens
    assert float(labels["kv_cache_max_concurrency"]) == pytest.approx(config.kv_cache_tokens / config.max_model_len)
