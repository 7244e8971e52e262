"""What the SIMULATED engine writes: vLLM-format log lines, the per-request histograms of its /metrics
(latencies and token counts, in vLLM's names and buckets), and the prompt length it charges a request.
No I/O beyond the log file it is given."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, TextIO

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
