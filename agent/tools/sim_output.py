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
VERSION = "0.32.0"  # the vLLM version whose log and /metrics the simulator follows (tests/data/real/engines)

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


# vLLM 0.32's start-up logo (vllm/entrypoints/utils.py), printed line by line under the API server's prefix
LOGO = ("", "       █     █     █▄   ▄█", " ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
        "  █▄█▀ █     █     █     █  model   {model}", "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀", "")


class VllmLog:
    """Writes lines as vLLM 0.32 does to a file (or nowhere); flushed per line so a tailer sees them.

    The same shapes as the real engine (checked against its recorded log, tests/unit/test_simulator_fidelity.py):
    `(APIServer pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message` for vLLM's own loggers, `(EngineCore pid=N)`
    for the engine core's, and uvicorn's bare `INFO:     …` lines (access lines and the server's life cycle).
    What differs on purpose: a WARNING line that says the engine is SIMULATED, and the engine core's pid is this
    process's (there is one process).
    """

    def __init__(self, path: Path | None) -> None:
        self._handle: TextIO | None = path.open("a", encoding="utf-8") if path is not None else None
        self._pid = os.getpid()

    def _write(self, text: str) -> None:
        if self._handle is not None:
            self._handle.write(text)
            self._handle.flush()

    def line(self, level: str, where: str, message: str, process: str = "APIServer") -> None:
        """One logger record; a multi-line message is re-prefixed on every line, as vLLM's formatter does."""
        stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime())
        prefix = f"({process} pid={self._pid}) {level} {stamp} [{where}] "
        self._write("".join(prefix + part + "\n" for part in message.split("\n")))

    def uvicorn(self, message: str) -> None:
        """uvicorn's own lines carry no process tag and no time: `INFO:     Application startup complete.`"""
        self._write(f"INFO:     {message}\n")

    def access(self, peer: str, method: str, path: str, status: int) -> None:
        self.uvicorn(f'{peer} - "{method} {path} HTTP/1.1" {status} {HTTPStatus(status).phrase}')

    def refused_start(self, c: SimConfig, message: str) -> None:
        """What vLLM writes when one request of max_model_len does not fit in the KV cache; then closes."""
        self._banner(c)
        self.line("ERROR", "core.py:1510", "EngineCore failed to start.", process="EngineCore")
        self.line("ERROR", "core.py:1510", f"ValueError: {message}", process="EngineCore")
        self.close()

    def _banner(self, c: SimConfig) -> None:
        for part in LOGO:
            self.line("INFO", "api_utils.py:347", part.format(version=VERSION, model=c.model_name))
        args = {"model_tag": c.model_name, "model": c.model_name, "max_model_len": c.max_model_len,
                "block_size": c.block_size, "max_num_seqs": c.max_num_seqs}
        if c.budget is not None:
            args["gpu_memory_utilization"] = c.budget.inputs.util
        self.line("INFO", "api_utils.py:286", f"non-default args: {args!r}")
        self.line("WARNING", "api_utils.py:287", f"{SIMULATED} engine (deepinfer-agent simulate): no GPU, no model; "
                  "its numbers follow the paged-KV arithmetic only")

    def startup(self, c: SimConfig, host: str, port: int) -> None:
        """The start-up lines vLLM 0.32 writes: logo, arguments, engine config, memory, KV capacity, ready."""
        self._banner(c)
        self.line("INFO", "model.py:2152", f"Using max model len {c.max_model_len}")
        self.line("INFO", "core.py:133", f"Initializing a V1 LLM engine (v{VERSION}) with config: "
                  f"model='{c.model_name}', speculative_config=None, tokenizer='{c.model_name}', "
                  f"max_seq_len={c.max_model_len}, kv_cache_dtype=auto, tensor_parallel_size=1, "
                  f"pipeline_parallel_size=1, served_model_name={c.model_name}, enable_prefix_caching=False",
                  process="EngineCore")
        budget = c.budget
        if budget is not None:
            self.line("INFO", "gpu_model_runner.py:5150", f"Model loading took {budget.weights_per_gpu_bytes / GIB:.2f}"
                      " GiB memory and 0.000001 seconds", process="EngineCore")
            self.line("INFO", "gpu_worker.py:760", f"Available KV cache memory: {budget.usable_kv_bytes / GIB:.2f} GiB",
                      process="EngineCore")
        self.line("INFO", "kv_cache_utils.py:2327", f"GPU KV cache size: {c.kv_cache_tokens:,} tokens, Maximum "
                  f"concurrency for {c.max_model_len:,} tokens per request: {c.kv_cache_tokens / c.max_model_len:.2f}x",
                  process="EngineCore")
        self.line("INFO", "core.py:402", "init engine (profile, create kv cache, warmup model) took 0.00 s",
                  process="EngineCore")
        if c.oom_on_overcommit and c.overcommitted:
            self.line("WARNING", "scheduler.py:120", f"{SIMULATED}: max_num_seqs={c.max_num_seqs} requests of "
                      f"{c.max_model_len} tokens do not fit in {c.kv_blocks} blocks and preemption is off: "
                      "this engine will run out of memory under load", process="EngineCore")
        self.line("INFO", "entry.py:140", f"Starting vLLM server on http://{host}:{port}")
        self.uvicorn(f"Started server process [{self._pid}]")
        self.uvicorn("Waiting for application startup.")
        self.uvicorn("Application startup complete.")

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
            '  File "vllm/v1/engine/core.py", line 1482, in run_engine_core\n'
            "    engine_core.run_busy_loop()\n"
            '  File "vllm/v1/worker/gpu_model_runner.py", line 1500, in execute_model\n'
            "    self.kv_cache.allocate(num_blocks)\n"
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {oom.requested_bytes / 2**20:.2f} MiB. "
            f"GPU 0 has a total capacity of {total / GIB:.2f} GiB of which {free / 2**20:.2f} MiB is free. "
            f"Including non-PyTorch memory, this process has {used / GIB:.2f} GiB memory in use. "
            f"({SIMULATED}: the KV cache ran out and preemption is off)")
        self.line("ERROR", "core.py:1024", trace, process="EngineCore")

    def engine_dead(self) -> None:
        """What the API server writes once its engine core is gone (recorded from vLLM 0.32, tests/engines):
        the client's cleanup, then the output handler's EngineDeadError traceback."""
        self.line("WARNING", "core_client.py:817", "[shutdown] MPClient: engine core exited unexpectedly; starting "
                  "cleanup")
        self.line("INFO", "core_client.py:777", "[shutdown] MPClient: complete")
        self.line("ERROR", "async_llm.py:906", "AsyncLLM output_handler failed.\n"
                  "Traceback (most recent call last):\n"
                  '  File "vllm/v1/engine/async_llm.py", line 849, in output_handler\n'
                  "    outputs = await engine_core.get_output_async()\n"
                  "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                  "(above) for the root cause.")

    def shutdown(self) -> None:
        """uvicorn's lines as the server process ends."""
        for message in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
                        f"Finished server process [{self._pid}]"):
            self.uvicorn(message)

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
