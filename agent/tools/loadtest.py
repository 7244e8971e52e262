"""The step-up load test: raise concurrency level by level (1, 2, 3, 5, 8, 12 …) against an
OpenAI-compatible endpoint, and watch the engine while doing it.

The design notes' method made a tool: the budget gives a bound on paper, this confirms it on the machine. Each
level runs `requests_per_level` requests through exactly `level` concurrent clients (closed loop: a
client sends its next request when the previous one is answered), with a fixed payload so that levels
differ only in concurrency. During the level the engine's `/metrics` is scraped with agent/scrape.py
(running, waiting, KV usage, preemptions), NVML gives the GPU memory peak where a driver is present,
and the engine log (read through the project's parsers) or the agent's store gives OOM and preemption
events. Each level becomes one `agent.records.LoadStep`.

A level *breaks* when it saw an OOM, a preemption, sustained queueing (the engine never ran all the
level's clients at once while requests waited in most samples), or any failed request (429, 503,
other 5xx, client timeout, connection error). The test stops at the first broken level unless told to keep going; the
number of levels and of requests is capped whatever the flags say. `verdict` compares the result with
the budget: "budget says 13, measured safe up to 12, first preemptions at 16".
"""

from __future__ import annotations

import asyncio
import ctypes.util
import io
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agent.errors import AgentError
from agent.http import AsyncClient, HttpConnectionError, HttpTimeoutError
from agent.records import Event, EventKind, LoadStep, Server, ServerStats

DEFAULT_LEVELS = (1, 2, 3, 5, 8, 12)
REQUESTS_PER_CLIENT = 20
MAX_LEVELS = 32
MAX_LEVEL = 4096
MAX_REQUESTS_PER_LEVEL = 100_000
MAX_TOTAL_REQUESTS = 1_000_000
ERROR_CLASSES = ("http_429", "http_503", "http_5xx", "timeout", "connection", "other")
API_KEY_VARIABLES = ("DEEPINFER_API_KEY", "OPENAI_API_KEY")


class LoadTestError(AgentError):
    """The load test cannot run as asked (bad URL, payload, levels beyond the caps)."""


# ---- what to send -------------------------------------------------------------------------------


def endpoint_url(url: str) -> str:
    """The URL to POST to: a bare `http://host:port` means `/v1/completions`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
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
    if input_tokens <= 0 or output_tokens <= 0:
        raise LoadTestError("--input-tokens and --output-tokens must be positive")
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
        body = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LoadTestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
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
        if self.timeout_seconds <= 0 or self.pause_seconds < 0:
            problems.append("--timeout must be positive and --pause not negative")
        if problems:
            raise LoadTestError("; ".join(problems))


@dataclass(frozen=True)
class Verdict:
    """The run against the capacity: highest safe level, first broken level and why, and one sentence."""

    capacity: int | None
    safe_level: int | None
    broken_level: int | None
    cause: str | None
    agrees: bool | None
    text: str


@dataclass(frozen=True)
class LoadTestResult:
    run_id: str
    target: str
    steps: tuple[LoadStep, ...]
    verdict: Verdict


Progress = Callable[[int, int, int], None]  # (level, requests done, requests in the level)


# ---- per-request work -----------------------------------------------------------------------------


def error_class(status: int) -> str | None:
    """None for a success; else the LoadStep error class of an HTTP status."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return "http_429"
    if status == 503:
        return "http_503"
    if status >= 500:
        return "http_5xx"
    return "other"


@dataclass
class _Tally:
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    output_tokens: int = 0
    done: int = 0


def _completion_tokens(body: bytes) -> int:
    try:
        usage = json.loads(body).get("usage") or {}
        tokens = usage.get("completion_tokens")
        return int(tokens) if isinstance(tokens, int) else 0
    except (ValueError, AttributeError):
        return 0


def stream_chunk_kind(line: bytes) -> str | None:
    """What one server-sent-events line of an OpenAI stream is: `text` (a chunk carrying output),
    `error` (the server failed after its 200), or None (keep-alive, role-only or empty chunk, [DONE])."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if not data or data == b"[DONE]":
        return None
    try:
        event = json.loads(data)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    if "error" in event:
        return "error"
    for choice in event.get("choices") or ():
        if isinstance(choice, dict):
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if text:
                return "text"
    return None


async def _one(client: AsyncClient, url: str, payload: Mapping[str, Any], stream: bool, tally: _Tally) -> None:
    started = time.perf_counter()
    first: float | None = None
    chunks = 0
    failed_in_stream = False

    def on_line(line: bytes) -> None:
        nonlocal first, chunks, failed_in_stream
        kind = stream_chunk_kind(line)
        if kind == "error":
            failed_in_stream = True
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
    finally:
        tally.done += 1
    kind = error_class(reply.status)
    if kind is None and failed_in_stream:
        kind = "http_5xx"  # a stream that had already sent 200 and then failed
    if kind is not None:
        tally.errors[kind] += 1
        return
    tally.latencies.append(time.perf_counter() - started)
    if stream:
        tally.output_tokens += chunks
        if first is not None:
            tally.ttfts.append(first)
    else:
        tally.output_tokens += _completion_tokens(reply.body)


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0–100) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# ---- watching the engine --------------------------------------------------------------------------


@dataclass
class _Peaks:
    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None
    gpu_memory: int | None = None
    preemptions: int = 0
    oom: int = 0
    samples: int = 0
    queued_samples: int = 0

    def stats(self, s: ServerStats) -> None:
        self.samples += 1
        if s.waiting:
            self.queued_samples += 1
        if s.running is not None:
            self.running = max(self.running or 0, s.running)
        if s.waiting is not None:
            self.waiting = max(self.waiting or 0, s.waiting)
        if s.kv_usage_ratio is not None:
            self.kv_usage = max(self.kv_usage or 0.0, s.kv_usage_ratio)


def _event_count(event: Event) -> int:
    count = event.fields.get("count")
    return int(count) if isinstance(count, int | float) and count > 0 else 1


class Watcher:
    """Samples the engine during a level: /metrics through agent.scrape, NVML, the log, the store.

    Blocking calls (urllib in the scraper, NVML, file reads, SQLite) run in worker threads so the
    request loop never waits for them.
    """

    def __init__(self, options: LoadTestOptions) -> None:
        from agent.scrape import Scraper  # imported here: the scraper is only needed while a test runs

        metrics = options.metrics_url if options.metrics_url is not None else default_metrics_url(options.url)
        self._scraper = Scraper(metrics, server=Server.AUTO, interval_seconds=0.0,
                                timeout_seconds=2.0) if metrics else None
        self._log_path = options.log_path
        self._db_path = options.db_path
        self._log_offset = self._log_size()
        self._gpu: Any = None
        if options.gpu and (options.nvml_library is not None or ctypes.util.find_library("nvidia-ml") is not None):
            from agent.nvml import GpuPoller

            self._gpu = GpuPoller(library_path=options.nvml_library)

    @property
    def metrics_url(self) -> str | None:
        return self._scraper.url if self._scraper is not None else None

    def _log_size(self) -> int:
        try:
            return self._log_path.stat().st_size if self._log_path is not None else 0
        except OSError:
            return 0

    def sample(self, peaks: _Peaks) -> None:
        """One scrape and one NVML poll, folded into `peaks` (blocking: run it in a thread)."""
        now = time.time()
        if self._scraper is not None:
            for record in self._scraper.poll(now):
                if isinstance(record, ServerStats):
                    peaks.stats(record)
                elif isinstance(record, Event) and record.kind is EventKind.PREEMPTION:
                    peaks.preemptions += _event_count(record)
        if self._gpu is not None:
            used = [g.memory_used_bytes for g in self._gpu.poll(now).gpus if g.memory_used_bytes is not None]
            if used:
                peaks.gpu_memory = max(peaks.gpu_memory or 0, max(used))

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()

    def events_since_last(self, started: float, ended: float) -> tuple[int, int]:
        """(OOM events, preemptions) the log appended since the last call, or the store holds for the
        window; the larger of the two sources for each (they see the same engine)."""
        oom = preempt = 0
        if self._log_path is not None:
            oom, preempt = self._log_events()
        if self._db_path is not None:
            db_oom, db_preempt = self._db_events(started, ended)
            oom, preempt = max(oom, db_oom), max(preempt, db_preempt)
        return oom, preempt

    def _log_events(self) -> tuple[int, int]:
        from agent.scan import scan_stream

        assert self._log_path is not None
        try:
            with self._log_path.open("rb") as handle:
                size = handle.seek(0, io.SEEK_END)
                if size < self._log_offset:  # truncated or replaced: start again
                    self._log_offset = 0
                handle.seek(self._log_offset)
                data = handle.read(size - self._log_offset)
        except OSError:
            return 0, 0
        complete = data[:data.rfind(b"\n") + 1]  # a half-written last line waits for the next window
        self._log_offset += len(complete)
        scan = scan_stream(io.BytesIO(complete), str(self._log_path), Server.AUTO, time.time())
        oom = sum(1 for r in scan.records if isinstance(r, Event) and r.kind is EventKind.OOM)
        preempt = sum(_event_count(r) for r in scan.records
                      if isinstance(r, Event) and r.kind is EventKind.PREEMPTION)
        return oom, preempt

    def _db_events(self, started: float, ended: float) -> tuple[int, int]:
        from agent.store import Store

        assert self._db_path is not None
        try:
            with Store.open_readonly(self._db_path) as store:
                counts = store.event_counts(started, ended)
        except AgentError:
            return 0, 0
        oom = sum(n for (_, _, kind), n in counts.items() if kind == EventKind.OOM.value)
        preempt = sum(n for (_, _, kind), n in counts.items() if kind == EventKind.PREEMPTION.value)
        return oom, preempt


# ---- the run --------------------------------------------------------------------------------------


def _judge(level: int, tally: _Tally, peaks: _Peaks) -> tuple[bool, str]:
    if peaks.oom:
        return True, f"{peaks.oom} OOM event(s)"
    if peaks.preemptions:
        return True, f"{peaks.preemptions} preemption(s)"
    # Sustained queueing: the engine never ran all `level` clients at once, and requests waited in most
    # samples (a request between two engine steps waits for a moment at every level: one sample is noise).
    if (peaks.running is not None and peaks.running < level and peaks.samples
            and peaks.queued_samples * 2 >= peaks.samples):
        return True, (f"queueing: the engine ran at most {peaks.running} of {level} at once, "
                      f"{peaks.waiting} waiting at the peak")
    failed = sum(tally.errors.values())
    if failed:
        detail = ", ".join(f"{n} {kind}" for kind, n in sorted(tally.errors.items()))
        return True, f"{failed} failed request(s): {detail}"
    return False, ""


async def run_level(client: AsyncClient, options: LoadTestOptions, watcher: Watcher, run_id: str, url: str,
                    level: int, progress: Progress | None = None) -> LoadStep:
    """One level: `level` clients share `requests_for(level)` requests; the watcher samples meanwhile.
    Events the engine logged during the pause that follows are counted for this level."""
    total = options.requests_for(level)
    tally = _Tally()
    peaks = _Peaks()
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
    oom, preempt = await asyncio.to_thread(watcher.events_since_last, started, time.time())
    peaks.oom = oom
    peaks.preemptions = max(peaks.preemptions, preempt)
    broke, reason = _judge(level, tally, peaks)
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
    except (HttpTimeoutError, HttpConnectionError, ValueError, AttributeError):
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
    watcher = Watcher(options)
    steps: list[LoadStep] = []
    top = max(options.levels)
    async with AsyncClient(max_connections=top, timeout_seconds=options.timeout_seconds,
                           headers=auth_headers(options.api_key)) as client:
        if "model" not in options.payload:
            model = await served_model(client, url)
            if model is not None:
                options = replace(options, payload={**options.payload, "model": model})
        try:
            for level in options.levels:
                step = await run_level(client, options, watcher, run_id, url, level, progress)
                steps.append(step)
                if on_step is not None:
                    on_step(step)
                if step.broke and not options.keep_going:
                    break
        finally:
            watcher.close()
    return LoadTestResult(run_id, url, tuple(steps), verdict(steps, options.capacity))


# ---- the verdict ----------------------------------------------------------------------------------


def _cause(step: LoadStep) -> str:
    if step.oom_events:
        return "OOM"
    if step.preemption_events:
        return "preemptions"
    if step.reason.startswith("queueing"):
        return "queueing"
    if step.errors:
        worst = max(step.errors.items(), key=lambda kv: kv[1])[0]
        return {"http_429": "429 refusals", "http_503": "503 refusals", "http_5xx": "5xx errors",
                "timeout": "client timeouts", "connection": "connection errors"}.get(worst, "failed requests")
    return "failures"


def verdict(steps: Sequence[LoadStep], capacity: int | None) -> Verdict:
    """The rule (docs/loadtest.md): safe = the highest level below the first broken one that did not
    break; the run agrees with the capacity when safe ≤ capacity < first broken level. Refusals and
    timeouts are not a KV verdict: they say a queue or a deadline was hit first."""
    broken = next((s for s in steps if s.broke), None)
    below = [s.level for s in steps if not s.broke and (broken is None or s.level < broken.level)]
    safe = max(below) if below else None
    head = f"budget says {capacity}, " if capacity is not None else ""
    safe_text = f"measured safe up to {safe}" if safe is not None else "no level was safe"
    if broken is None:
        tried = max((s.level for s in steps), default=None)
        text = f"{head}{safe_text}; no level broke (highest tried {tried}): add higher --levels to find the limit"
        beyond = capacity is not None and tried is not None and tried > capacity
        if beyond:
            text += f"; the engine held {tried} concurrent requests, more than the budget's {capacity}"
        return Verdict(capacity, safe, None, None, False if beyond else None, text)
    cause = _cause(broken)
    text = f"{head}{safe_text}, first {cause} at {broken.level}"
    agrees: bool | None = None
    if capacity is not None:
        if cause in ("OOM", "preemptions", "queueing"):
            agrees = (safe is None or safe <= capacity) and capacity < broken.level
            if agrees:
                text += ": consistent with the budget"
            elif broken.level <= capacity:
                text += (": broke at or below the budget — the engine holds less KV than computed (weights or "
                         "overhead underestimated, or requests longer than the budget's tokens per request)")
            else:
                text += (": safe beyond the budget — it is conservative for this workload (requests shorter "
                         "than its tokens per request, or the engine found more memory)")
        else:
            why = {"429 refusals": "requests were refused at admission (a queue or rate limit)",
                   "503 refusals": "requests were refused at admission (a queue limit)",
                   "client timeouts": "requests ran past the client timeout",
                   "5xx errors": "the server failed requests",
                   "connection errors": "the endpoint stopped answering (is it up? did it crash?)"}.get(
                       cause, "requests failed")
            text += f": {why} before the KV cache ran out, so the budget's {capacity} is not tested by this run"
    return Verdict(capacity, safe, broken.level, cause, agrees, text)


# ---- output ---------------------------------------------------------------------------------------


def loadstep_row(step: LoadStep) -> dict[str, Any]:
    """A flat row for a `load_steps` table: every field, the error counts as one column per class plus
    `errors_json`, so a query needs no JSON functions for the common classes."""
    row = {k: v for k, v in asdict(step).items() if k != "errors"}
    for kind in ERROR_CLASSES:
        row[f"errors_{kind}"] = int(step.errors.get(kind, 0))
    row["errors_json"] = json.dumps(dict(sorted(step.errors.items())))
    return row


def to_json(result: LoadTestResult) -> dict[str, Any]:
    return {"run_id": result.run_id, "target": result.target,
            "steps": [dict(asdict(s), errors=dict(s.errors)) for s in result.steps],
            "verdict": asdict(result.verdict)}


def _ms(value: float | None) -> str:
    return f"{value * 1000:,.0f}" if value is not None else "-"


def render_table(result: LoadTestResult) -> str:
    """One line per level, then the verdict."""
    head = (f"{'level':>5} {'reqs':>6} {'ok':>6} {'req/s':>8} {'tok/s':>8} {'p50 ms':>8} {'p95 ms':>8} "
            f"{'p99 ms':>8} {'ttft95':>7} {'kv%':>5} {'run':>4} {'wait':>5} {'preempt':>7} {'oom':>3}  "
            "errors / why it broke")
    out = [f"load test {result.run_id} against {result.target}", head]
    for s in result.steps:
        kv = f"{s.kv_usage_peak_ratio * 100:.0f}" if s.kv_usage_peak_ratio is not None else "-"
        errors = ", ".join(f"{n} {k}" for k, n in s.errors.items())
        why = s.reason if s.broke else errors
        out.append(f"{s.level:>5} {s.requests:>6} {s.ok:>6} {s.throughput_rps or 0:>8.1f} "
                   f"{s.output_tokens_per_second or 0:>8.0f} {_ms(s.latency_p50_seconds):>8} "
                   f"{_ms(s.latency_p95_seconds):>8} {_ms(s.latency_p99_seconds):>8} {_ms(s.ttft_p95_seconds):>7} "
                   f"{kv:>5} {s.running_peak if s.running_peak is not None else '-':>4} "
                   f"{s.waiting_peak if s.waiting_peak is not None else '-':>5} {s.preemption_events:>7} "
                   f"{s.oom_events:>3}  {'BROKE: ' if s.broke else ''}{why}")
        if s.gpu_memory_peak_bytes is not None:
            out[-1] += f"  gpu {s.gpu_memory_peak_bytes / 2**30:.2f} GiB"
    out.append(f"verdict: {result.verdict.text}")
    return "\n".join(out)
