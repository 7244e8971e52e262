"""What the SIMULATED engine writes: vLLM-format log lines (banner, capacity, OOM traceback), the
per-request histograms of its /metrics (latencies and token counts, in vLLM's names and buckets), and the
prompt length it charges a request. No I/O beyond the log file it is given."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, TextIO

from agent.tools.sim import SIMULATED, EngineOomError, SimConfig

GIB = 1024**3
VERSION = "0.11.0"  # the vLLM version the simulated log and banner claim

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                   20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


def prompt_tokens(body: dict[str, Any]) -> int:
    """Tokens of a prompt as the simulator counts them: one per whitespace-separated word (token ids:
    one each); chat messages are summed."""
    if isinstance(body.get("messages"), list):
        return sum(len(str(m.get("content", "")).split()) for m in body["messages"] if isinstance(m, dict))
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if all(isinstance(p, int) for p in prompt):
            return len(prompt)
        return sum(len(str(p).split()) for p in prompt)
    return len(str(prompt).split())


class VllmLog:
    """Writes lines in vLLM's format to a file (or nowhere); flushed per line so a tailer sees them."""

    def __init__(self, path: Path | None) -> None:
        self._handle: TextIO | None = path.open("a", encoding="utf-8") if path is not None else None
        self._pid = os.getpid()

    def line(self, level: str, where: str, message: str, process: str = "APIServer") -> None:
        if self._handle is None:
            return
        stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime())
        prefix = f"({process} pid={self._pid}) {level} {stamp} [{where}] "
        self._handle.write("".join(prefix + part + "\n" for part in message.split("\n")))
        self._handle.flush()

    def access(self, peer: str, method: str, path: str, status: int) -> None:
        if self._handle is None:
            return
        phrase = HTTPStatus(status).phrase
        self._handle.write(f'(APIServer pid={self._pid}) INFO:     {peer} - "{method} {path} HTTP/1.1" '
                           f"{status} {phrase}\n")
        self._handle.flush()

    def refused_start(self, message: str) -> None:
        """What vLLM writes when one request of max_model_len does not fit in the KV cache; then closes."""
        self.line("INFO", "api_server.py:1805", f"vLLM API server version {VERSION} ({SIMULATED})")
        self.line("ERROR", "core.py:708", "EngineCore failed to start.", process="EngineCore_DP0")
        self.line("ERROR", "core.py:708", f"ValueError: {message}", process="EngineCore_DP0")
        self.close()

    def startup(self, c: SimConfig, host: str, port: int) -> None:
        """The start-up lines vLLM writes: banner, arguments, memory profiling, KV capacity, ready."""
        log = self
        log.line("INFO", "api_server.py:1805", f"vLLM API server version {VERSION} ({SIMULATED} by deepinfer-agent "
                 "simulate: no GPU, no model; numbers follow the paged-KV arithmetic only)")
        args = {"model": c.model_name, "max_model_len": c.max_model_len, "max_num_seqs": c.max_num_seqs,
                "block_size": c.block_size}
        budget = c.budget
        if budget is not None:
            args["gpu_memory_utilization"] = budget.inputs.util
        log.line("INFO", "utils.py:233", f"non-default args: {args!r}")
        log.line("INFO", "core.py:74", f"Initializing a V1 LLM engine (v{VERSION}) with config: "
                 f"model='{c.model_name}', max_seq_len={c.max_model_len}, kv_cache_dtype=auto",
                 process="EngineCore_DP0")
        if budget is not None:
            b = budget.inputs
            activations = budget.inputs.overhead_bytes
            log.line("INFO", "gpu_model_runner.py:1892", f"Model loading took {budget.weights_per_gpu_bytes / GIB:.4f}"
                     " GiB and 0.000001 seconds", process="EngineCore_DP0")
            log.line("INFO", "worker.py:241", "Memory profiling takes 0.00 seconds\n"
                     f"the current vLLM instance can use total_gpu_memory ({b.vram_bytes / GIB:.2f}GiB) x "
                     f"gpu_memory_utilization ({b.util:.2f}) = {budget.memory_for_instance_bytes / GIB:.2f}GiB\n"
                     f"model weights take {budget.weights_per_gpu_bytes / GIB:.2f}GiB; non_torch_memory takes "
                     f"0.00GiB; PyTorch activation peak memory takes {activations / GIB:.2f}GiB; the rest of the "
                     f"memory reserved for KV Cache is {budget.usable_kv_bytes / GIB:.2f}GiB.",
                     process="EngineCore_DP0")
            log.line("INFO", "gpu_worker.py:255", f"Available KV cache memory: {budget.usable_kv_bytes / GIB:.2f} GiB",
                     process="EngineCore_DP0")
        log.line("INFO", "kv_cache_utils.py:833", f"GPU KV cache size: {c.kv_cache_tokens:,} tokens",
                 process="EngineCore_DP0")
        log.line("INFO", "kv_cache_utils.py:837", f"Maximum concurrency for {c.max_model_len:,} tokens per request: "
                 f"{c.kv_cache_tokens / c.max_model_len:.2f}x", process="EngineCore_DP0")
        if c.oom_on_overcommit and c.overcommitted:
            log.line("WARNING", "scheduler.py:120", f"{SIMULATED}: max_num_seqs={c.max_num_seqs} requests of "
                     f"{c.max_model_len} tokens do not fit in {c.kv_blocks} blocks and preemption is off: "
                     "this engine will run out of memory under load", process="EngineCore_DP0")
        log.line("INFO", "launcher.py:29", f"Starting vLLM API server 0 on http://{host}:{port}")
        log.line("INFO", "on.py:62", "Application startup complete.")

    def engine_oom(self, oom: EngineOomError, config: SimConfig) -> None:
        """The traceback vLLM writes when the KV cache runs out with preemption off: the engine dies."""
        budget = config.budget
        total, used = oom.total_bytes, oom.used_bytes
        if budget is not None:  # the card as the budget describes it: weights and overhead are in use too
            total = budget.inputs.vram_bytes
            used += budget.weights_per_gpu_bytes + budget.inputs.overhead_bytes
        free = max(0, min(total - used, oom.total_bytes - oom.used_bytes))
        trace = (
            "EngineCore encountered a fatal error.\n"
            "Traceback (most recent call last):\n"
            '  File "vllm/v1/engine/core.py", line 702, in run_engine_core\n'
            "    engine_core.run_busy_loop()\n"
            '  File "vllm/v1/worker/gpu_model_runner.py", line 1500, in execute_model\n'
            "    self.kv_cache.allocate(num_blocks)\n"
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {oom.requested_bytes / 2**20:.2f} MiB. "
            f"GPU 0 has a total capacity of {total / GIB:.2f} GiB of which {free / 2**20:.2f} MiB is free. "
            f"Including non-PyTorch memory, this process has {used / GIB:.2f} GiB memory in use. "
            f"({SIMULATED}: the KV cache ran out and preemption is off)")
        self.line("ERROR", "core.py:711", trace, process="EngineCore_DP0")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def token_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's buckets for its token histograms: 1, 2, 5, 10, 20, 50, … up to max_model_len."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(out)
            out.append(float(value))
        exponent += 1


@dataclass
class Histogram:
    """A Prometheus histogram's state (cumulative buckets are computed when rendered)."""

    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        i = next((i for i, b in enumerate(self.buckets) if value <= b), len(self.buckets))
        self.counts[i] += 1
        self.total += value
        self.n += 1


def num(value: float) -> str:
    """A sample value as prometheus_client prints it (floatToGoString: 3.0, 1.5e-05, +Inf)."""
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


class RequestHistograms:
    """The per-request histograms vLLM exports, observed as the simulated requests move along."""

    def __init__(self, max_model_len: int) -> None:
        self.ttft, self.queue, self.e2e, self.inference = Histogram(), Histogram(), Histogram(), Histogram()
        self.prompt = Histogram(token_buckets(max_model_len))
        self.generation = Histogram(token_buckets(max_model_len))

    def finished(self, arrived: float, admitted: float | None, finished: float, prompt: int, generated: int) -> None:
        self.e2e.observe(finished - arrived)
        self.inference.observe(finished - (admitted if admitted is not None else arrived))
        self.prompt.observe(prompt)
        self.generation.observe(generated)

    def families(self) -> list[tuple[str, str, Histogram]]:
        """(name, help, state) in vLLM's spelling."""
        return [("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e),
                ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
                ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                 self.queue),
                ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
                 self.inference),
                ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", self.prompt),
                ("vllm:request_generation_tokens", "Number of generation tokens processed.", self.generation)]
