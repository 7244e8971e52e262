"""The step-up load test: raise concurrency level by level (1, 2, 3, 5, 8, 12 …) against an
OpenAI-compatible endpoint, and watch the engine while doing it.

The design notes' method made a tool: the budget gives a bound on paper, this confirms it on the machine. Each
level runs `requests_per_level` requests through exactly `level` concurrent clients (closed loop: a
client sends its next request when the previous one is answered), with a fixed payload so that levels
differ only in concurrency. During the level the engine's `/metrics` is scraped with agent/scrape.py
(running, waiting, KV usage, preemptions), NVML gives the GPU memory peak where a driver is present,
and the engine log (read through the project's parsers) or the agent's store gives OOM and preemption
events. Each level becomes one `agent.verdicts.LoadStep`.

A level *breaks* when it saw an OOM, a preemption, sustained queueing (the engine never ran all the
level's clients at once while requests waited in most samples), or any failed request (429, 503,
other 5xx, client timeout, connection error). The test stops at the first broken level unless told to keep going; the
number of levels and of requests is capped whatever the flags say. `verdict` compares the result with
the budget: "budget says 13, measured safe up to 12, first preemptions at 16".
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agent.errors import AgentError
from agent.http import AsyncClient, HttpBodyTooLargeError, HttpConnectionError, HttpTimeoutError
from agent.sources.bounded import read_small_text
from agent.tools.loadtest_answers import completion_tokens, error_class, stream_chunk_kind
from agent.tools.loadtest_judge import judged
from agent.tools.loadtest_report import ERROR_CLASSES, LoadTestResult, verdict
from agent.tools.loadtest_watch import Peaks, Watcher, level_verdict
from agent.verdicts import LoadStep

DEFAULT_LEVELS = (1, 2, 3, 5, 8, 12)
REQUESTS_PER_CLIENT = 20
MAX_LEVELS = 32
MAX_LEVEL = 4096
MAX_REQUESTS_PER_LEVEL = 100_000
MAX_TOTAL_REQUESTS = 1_000_000
MAX_TIMEOUT_SECONDS = 24 * 3600.0
MAX_PAUSE_SECONDS = 3600.0
MAX_INPUT_TOKENS = 1 << 20  # a prompt of a million words is 6 MB: enough for any context window there is
MAX_OUTPUT_TOKENS = 1 << 20
API_KEY_VARIABLES = ("DEEPINFER_API_KEY", "OPENAI_API_KEY")


class LoadTestError(AgentError):
    """The load test cannot run as asked (bad URL, payload, levels beyond the caps)."""


# ---- what to send -------------------------------------------------------------------------------


def endpoint_url(url: str) -> str:
    """The URL to POST to: a bare `http://host:port` means `/v1/completions`."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:  # `http://[::1/v1`: an unclosed bracket; a port past 65535
        raise LoadTestError(f"{url!r}: not a URL ({exc}); expected one such as "
                            "http://127.0.0.1:8000/v1/completions") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadTestError(f"{url!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1/completions")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/completions")
    return urlunsplit(parts)


def default_metrics_url(url: str) -> str:
    """The same host's `/metrics` (vLLM serves it on its API port)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def is_chat(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith("chat/completions")


def synthetic_payload(input_tokens: int, output_tokens: int, chat: bool) -> dict[str, Any]:
    """A fixed request of about `input_tokens` prompt tokens (one word each) and exactly `output_tokens`
    output tokens (`ignore_eos`, a vLLM/SGLang extension, keeps the model from stopping early)."""
    if not (0 < input_tokens <= MAX_INPUT_TOKENS and 0 < output_tokens <= MAX_OUTPUT_TOKENS):
        raise LoadTestError(f"--input-tokens and --output-tokens must be between 1 and {MAX_INPUT_TOKENS:,}")
    text = " ".join(["hello"] * input_tokens)
    body: dict[str, Any] = {"max_tokens": output_tokens, "ignore_eos": True, "temperature": 0}
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return body


def load_payload(path: Path, chat: bool) -> dict[str, Any]:
    """A JSON payload file: `prompt` (or `messages` for chat) and `max_tokens`, sent as they are."""
    try:
        body = json.loads(read_small_text(path))
    except OSError as exc:
        raise LoadTestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise LoadTestError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise LoadTestError(f"{path}: expected a JSON object with prompt/messages and max_tokens")
    need = "messages" if chat else "prompt"
    if need not in body:
        raise LoadTestError(f"{path}: no {need!r} (the endpoint is {'chat' if chat else 'completions'})")
    if not isinstance(body.get("max_tokens"), int):
        raise LoadTestError(f"{path}: max_tokens must be an integer: fix it so every level asks for the same output")
    return body


# ---- options and results ------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadTestOptions:
    """What to run. `requests_per_level` None means 20 × level; `metrics_url` "" turns scraping off."""

    url: str
    payload: Mapping[str, Any]
    levels: tuple[int, ...] = DEFAULT_LEVELS
    requests_per_level: int | None = None
    timeout_seconds: float = 60.0
    stream: bool = False
    pause_seconds: float = 5.0
    api_key: str | None = field(default=None, repr=False)
    metrics_url: str | None = None
    log_path: Path | None = None
    db_path: Path | None = None
    capacity: int | None = None
    keep_going: bool = False
    sample_interval_seconds: float = 0.1
    gpu: bool = True
    nvml_library: str | None = None  # a libnvidia-ml.so.1 to load instead of the system's (WSL, tests)

    def requests_for(self, level: int) -> int:
        return self.requests_per_level if self.requests_per_level is not None else REQUESTS_PER_CLIENT * level

    def check(self) -> None:
        """Refuse unbounded or meaningless runs, naming the cap."""
        problems = []
        if not self.levels:
            problems.append("--levels is empty")
        if len(self.levels) > MAX_LEVELS:
            problems.append(f"{len(self.levels)} levels: at most {MAX_LEVELS}")
        if any(level < 1 or level > MAX_LEVEL for level in self.levels):
            problems.append(f"levels must be between 1 and {MAX_LEVEL}")
        if any(self.requests_for(level) < 1 or self.requests_for(level) > MAX_REQUESTS_PER_LEVEL
               for level in self.levels):
            problems.append(f"requests per level must be between 1 and {MAX_REQUESTS_PER_LEVEL}")
        if sum(self.requests_for(level) for level in self.levels) > MAX_TOTAL_REQUESTS:
            problems.append(f"more than {MAX_TOTAL_REQUESTS} requests in all")
        if not (0 < self.timeout_seconds <= MAX_TIMEOUT_SECONDS and 0 <= self.pause_seconds <= MAX_PAUSE_SECONDS):
            problems.append(f"--timeout must be above 0 and at most {MAX_TIMEOUT_SECONDS:g} s, --pause between 0 "
                            f"and {MAX_PAUSE_SECONDS:g} s")
        if problems:
            raise LoadTestError("; ".join(problems))


Progress = Callable[[int, int, int], None]  # (level, requests done, requests in the level)


# ---- per-request work -----------------------------------------------------------------------------


@dataclass
class _Tally:
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    output_tokens: int = 0
    done: int = 0


async def _one(client: AsyncClient, url: str, payload: Mapping[str, Any], stream: bool, tally: _Tally) -> None:
    started = time.perf_counter()
    first: float | None = None
    chunks = 0
    completion_chunks = 0
    failed_in_stream = False

    def on_line(line: bytes) -> None:
        nonlocal first, chunks, completion_chunks, failed_in_stream
        kind = stream_chunk_kind(line)
        if kind == "error":
            failed_in_stream = True
        if kind in ("text", "chunk"):
            completion_chunks += 1
        if kind != "text":
            return
        chunks += 1
        if first is None:
            first = time.perf_counter() - started

    try:
        reply = await client.post(url, payload, on_line if stream else None)
    except HttpTimeoutError:
        tally.errors["timeout"] += 1
        return
    except HttpConnectionError:
        tally.errors["connection"] += 1
        return
    except HttpBodyTooLargeError:  # an answer over 16 MiB, a streamed line over 1 MiB
        tally.errors["bad_answer"] += 1
        return
    finally:
        tally.done += 1
    kind = error_class(reply.status)
    if kind is None and failed_in_stream:
        kind = "http_5xx"  # a stream that had already sent 200 and then failed
    tokens = None if stream or kind is not None else completion_tokens(reply.body)
    if kind is None and (completion_chunks == 0 if stream else tokens is None):
        kind = "bad_answer"  # a 200 that is not a completion: a wrong URL, a proxy's page
    if kind is not None:
        tally.errors[kind] += 1
        return
    tally.latencies.append(time.perf_counter() - started)
    if stream:
        tally.output_tokens += chunks
        if first is not None:
            tally.ttfts.append(first)
    else:
        tally.output_tokens += tokens or 0


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0–100) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# ---- the run --------------------------------------------------------------------------------------


async def run_level(client: AsyncClient, options: LoadTestOptions, watcher: Watcher, run_id: str, url: str,
                    level: int, progress: Progress | None = None) -> LoadStep:
    """One level: `level` clients share `requests_for(level)` requests; the watcher samples meanwhile.
    Events the engine logged during the pause that follows are counted for this level."""
    total = options.requests_for(level)
    tally = _Tally()
    peaks = Peaks()
    payload = dict(options.payload)
    if options.stream:
        payload["stream"] = True
    tickets = iter(range(total))

    async def client_loop() -> None:
        for _ in tickets:
            await _one(client, url, payload, options.stream, tally)
            if progress is not None:
                progress(level, tally.done, total)

    started = time.time()
    clock = time.perf_counter()
    await asyncio.to_thread(watcher.sample, peaks)  # the baseline: counters count from here
    done = asyncio.Event()

    async def sampler() -> None:
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), options.sample_interval_seconds)
            except asyncio.TimeoutError:
                await asyncio.to_thread(watcher.sample, peaks)

    sampling = asyncio.create_task(sampler())
    try:
        await asyncio.gather(*(client_loop() for _ in range(level)))
    finally:
        elapsed = time.perf_counter() - clock
        ended = time.time()
        done.set()
        await sampling
    await asyncio.to_thread(watcher.sample, peaks)
    if options.pause_seconds:
        await asyncio.sleep(options.pause_seconds)
        await asyncio.to_thread(watcher.sample, peaks)
    oom, preempt, dead = await asyncio.to_thread(watcher.events_since_last, started, time.time())
    peaks.oom, peaks.engine_dead = oom, dead
    peaks.preemptions = max(peaks.preemptions, preempt)
    broke, reason = level_verdict(level, tally.errors, peaks)
    ok = len(tally.latencies)
    return LoadStep(
        run_id=run_id, target=url, level=level, started=started, ended=ended, requests=tally.done, ok=ok,
        errors={k: tally.errors[k] for k in ERROR_CLASSES if tally.errors[k]},
        throughput_rps=ok / elapsed if elapsed > 0 else None,
        output_tokens_per_second=tally.output_tokens / elapsed if elapsed > 0 else None,
        latency_p50_seconds=percentile(tally.latencies, 50), latency_p95_seconds=percentile(tally.latencies, 95),
        latency_p99_seconds=percentile(tally.latencies, 99),
        ttft_p50_seconds=percentile(tally.ttfts, 50), ttft_p95_seconds=percentile(tally.ttfts, 95),
        ttft_p99_seconds=percentile(tally.ttfts, 99),
        gpu_memory_peak_bytes=peaks.gpu_memory, kv_usage_peak_ratio=peaks.kv_usage,
        running_peak=peaks.running, waiting_peak=peaks.waiting,
        oom_events=peaks.oom, preemption_events=peaks.preemptions, broke=broke, reason=reason,
    )


async def served_model(client: AsyncClient, url: str) -> str | None:
    """The first model `/v1/models` lists (OpenAI servers may require `model` in each request); None if
    the server does not say."""
    parts = urlsplit(url)
    try:
        reply = await client.get(urlunsplit((parts.scheme, parts.netloc, "/v1/models", "", "")))
        data = json.loads(reply.body).get("data") if reply.status == 200 else None
    except (HttpTimeoutError, HttpConnectionError, HttpBodyTooLargeError, ValueError, AttributeError, RecursionError):
        return None
    if isinstance(data, list) and data and isinstance(data[0], dict) and isinstance(data[0].get("id"), str):
        return str(data[0]["id"])
    return None


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def run(options: LoadTestOptions, progress: Progress | None = None,
              on_step: Callable[[LoadStep], None] | None = None) -> LoadTestResult:
    """Run the levels in order; stop after the first broken one unless `keep_going`."""
    options.check()
    url = endpoint_url(options.url)
    run_id = uuid.uuid4().hex[:12]
    metrics = options.metrics_url if options.metrics_url is not None else default_metrics_url(options.url)
    watcher = Watcher(metrics_url=metrics, log_path=options.log_path, db_path=options.db_path, gpu=options.gpu,
                      nvml_library=options.nvml_library)
    steps: list[LoadStep] = []
    top = max(options.levels)
    async with AsyncClient(max_connections=top, timeout_seconds=options.timeout_seconds,
                           headers=auth_headers(options.api_key)) as client:
        if "model" not in options.payload:
            model = await served_model(client, url)
            if model is not None:
                options = replace(options, payload={**options.payload, "model": model})
        failure = None
        try:
            for level in options.levels:
                try:
                    step = await run_level(client, options, watcher, run_id, url, level, progress)
                except Exception as exc:  # what was measured before stays: the caller shows and saves it
                    failure = f"level {level}: {type(exc).__name__}: {exc}"
                    break
                steps.append(step)
                if on_step is not None:
                    on_step(step)
                if step.broke and not options.keep_going:
                    break
        finally:
            watcher.close()
    findings, categories = await asyncio.to_thread(judged, options.db_path, options.log_path, steps,
                                                   options.pause_seconds)
    return LoadTestResult(run_id, url, tuple(steps), verdict(steps, options.capacity, findings, categories,
                                                              options.pause_seconds), failure)
