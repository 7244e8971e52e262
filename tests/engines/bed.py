"""The real-engine test bed: bring up a REAL vLLM (CPU build) or llama.cpp `llama-server` serving the tiny local model
that tests/engines/install.sh made, drive load at it, and read the engine's own `/metrics` as the ground truth.

Nothing here imitates an engine: the processes are the engines' own, started with the flags an operator types, and
their counters are what the agent is compared with. The installs live in a cache outside the checkout
(`DEEPINFER_ENGINES`, default ~/.cache/deepinfer-agent/engines); a test skips, saying how to install, when one is
missing — except in CI, where `.ci/run` installs them and a missing engine is a failure (DEEPINFER_ENGINES_REQUIRED=1).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent.prom import exposition_samples
from agent.tools import real_engines

CACHE = real_engines.cache()
VLLM = real_engines.vllm().folder
LLAMACPP = real_engines.llamacpp().folder
INSTALL = real_engines.INSTALL
MODEL_NAME = real_engines.MODEL_NAME
# The tiny model: 2 layers × 2 KV heads × head_dim 32 × 2 B × 2 (K and V) = 512 B of KV per token.
KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 32 * 2
# How the tests serve them (agent/tools/real_engines.py, shared with `demo --engine vllm`): vLLM with 32 blocks
# × 32 tokens = 1,024 KV tokens, two requests of max_model_len 512 while max_num_seqs is 4, at most 10 waiting;
# llama.cpp with one pool of 512 KV cells shared by 4 slots.
VLLM_ARGS = real_engines.VLLM_ARGS
VLLM_ENV = real_engines.VLLM_ENV
LLAMACPP_ARGS = real_engines.LLAMACPP_ARGS


def require(path: Path, what: str, part: str) -> None:
    """Skip (or, where CI requires the engines, fail) when an engine is not installed."""
    if (path / ".ready").exists():
        return
    message = f"{what} is not installed in {path}: run `{INSTALL} {part}` (once; it is cached)"
    if os.environ.get("DEEPINFER_ENGINES_REQUIRED") == "1":
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Engine:
    """One running engine process (its own process group), its log file and its base URL."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    kind: str
    argv: tuple[str, ...]

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """The engine's own /metrics, as name → [(labels, value)]."""
        import urllib.request

        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as reply:
            return exposition_samples(reply.read().decode())

    def counter(self, name: str, **labels: str) -> float:
        """The sum of one metric's samples whose labels include `labels` (0 when absent)."""
        return sum(value for got, value in self.metrics().get(name, [])
                   if all(got.get(k) == v for k, v in labels.items()))

    def log_size(self) -> int:
        return self.log.stat().st_size

    def children(self) -> list[int]:
        """The pids of the engine's child processes (vLLM's EngineCore and workers)."""
        out = subprocess.run(["pgrep", "-g", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        return [int(p) for p in out if int(p) != self.proc.pid]

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # stray workers of a dead engine


def _healthy(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def launch(kind: str, argv: Sequence[str], log: Path, env: Mapping[str, str], port: int,
           wait: float = 300.0, expect_exit: bool = False) -> Engine:
    """Start an engine in its own session, wait until /health answers (or, with `expect_exit`, until it exits)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, start_new_session=True)
    engine = Engine(proc, f"http://127.0.0.1:{port}", log, kind, tuple(argv))
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if expect_exit:
                return engine
            raise AssertionError(f"{kind} exited with {proc.returncode}:\n" + log.read_text(errors="replace")[-3000:])
        if not expect_exit and _healthy(engine.url):
            return engine
        time.sleep(0.3)
    engine.stop()
    raise AssertionError(f"{kind} did not {'exit' if expect_exit else 'become healthy'} in {wait:.0f} s:\n"
                         + log.read_text(errors="replace")[-3000:])


def start_vllm(log: Path, *extra: str, env: Mapping[str, str] | None = None, base: Sequence[str] = VLLM_ARGS,
               expect_exit: bool = False, wait: float = 300.0) -> Engine:
    require(VLLM, "vLLM 0.32.0 (CPU build)", "vllm")
    port = free_port()
    return launch("vllm", real_engines.vllm_argv(port, *extra, base=base), log, {**VLLM_ENV, **(env or {})}, port,
                  wait=wait, expect_exit=expect_exit)


def start_llamacpp(log: Path, *extra: str, base: Sequence[str] = LLAMACPP_ARGS) -> Engine:
    require(LLAMACPP, "llama.cpp llama-server", "llamacpp")
    port = free_port()
    return launch("llamacpp", real_engines.llamacpp_argv(port, *extra, base=base), log, {}, port, wait=60)


@dataclass
class Outcomes:
    """What the clients saw: one entry per request, an HTTP status or `timeout` / `disconnected`."""

    results: list[int | str] = field(default_factory=list)
    completion_tokens: int = 0

    @property
    def by_status(self) -> Counter[int | str]:
        return Counter(self.results)

    def count(self, status: int | str) -> int:
        return self.by_status[status]


async def _one(session: aiohttp.ClientSession, url: str, body: Mapping[str, Any] | str, timeout: float,
               out: Outcomes) -> None:
    try:
        kwargs: dict[str, Any] = {"data": body, "headers": {"content-type": "application/json"}} \
            if isinstance(body, str) else {"json": body}
        async with session.post(url, timeout=aiohttp.ClientTimeout(total=timeout), **kwargs) as reply:
            data = await reply.read()
            out.results.append(reply.status)
            if reply.status == 200:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    import json

                    out.completion_tokens += int(json.loads(data)["usage"]["completion_tokens"])
    except asyncio.TimeoutError:
        out.results.append("timeout")
    except aiohttp.ClientError:
        out.results.append("disconnected")


def completion(prompt_words: int, max_tokens: int, **extra: Any) -> dict[str, Any]:
    """A completion request of about `prompt_words` tokens (the tokenizer has "hello" as one token)."""
    return {"model": MODEL_NAME, "prompt": "hello " * prompt_words, "max_tokens": max_tokens, "ignore_eos": True,
            **extra}


def drive(engine: Engine, bodies: Sequence[Mapping[str, Any] | str], timeout: float = 180.0,
          path: str = "/v1/completions", stagger: float = 0.0, at_once: int = 0) -> Outcomes:
    """Send the bodies — the first `at_once` together, the rest `stagger` seconds apart (all at once without a
    stagger) — and wait for every answer."""
    out = Outcomes()

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            tasks = []
            for i, body in enumerate(bodies):
                tasks.append(asyncio.create_task(_one(session, engine.url + path, body, timeout, out)))
                if stagger and i + 1 >= at_once:
                    await asyncio.sleep(stagger)
            await asyncio.gather(*tasks)

    asyncio.run(main())
    return out


def wait_idle(engine: Engine, timeout: float = 120.0) -> None:
    """Wait until the engine's own gauges say nothing runs or waits (a client that gave up leaves its request
    running on), twice in a row."""
    names = {"vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
             "llamacpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred")}[engine.kind]
    deadline, quiet = time.monotonic() + timeout, 0
    while time.monotonic() < deadline and quiet < 2:
        samples = engine.metrics()
        busy = sum(v for name in names for _, v in samples.get(name, []))
        quiet = quiet + 1 if busy == 0 else 0
        time.sleep(0.3)


def wait_for_stats(engine: Engine, since: int, timeout: float = 25.0) -> None:
    """Wait until the engine is idle and vLLM has then printed a stats line with nothing running or waiting —
    every request's last interval is in the log (the stats logger prints every 10 s)."""
    wait_idle(engine)
    since = max(since, engine.log_size())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tail = engine.log.read_bytes()[since:].decode(errors="replace")
        last = [line for line in tail.splitlines() if "Avg prompt throughput" in line]
        if last and "Running: 0 reqs, Waiting: 0 reqs" in last[-1]:
            return
        time.sleep(0.5)


@contextlib.contextmanager
def running(engine: Engine) -> Iterator[Engine]:
    try:
        yield engine
    finally:
        engine.stop()
