"""Serve the SIMULATED engine (agent/tools/sim.py) the way vLLM serves a real one.

- OpenAI-compatible `/v1/completions` and `/v1/chat/completions` (JSON, or server-sent events with
  `"stream": true`), `/v1/models`, `/health`, and `/metrics` with vLLM's metric names and the exact text
  that prometheus_client writes for them; every series carries `model_name="simulated/…"`.
- A log as vLLM 0.32 writes it (agent/tools/sim_output.py, held to the real engine's recorded log by
  tests/unit/test_simulator_fidelity.py): the logo banner, `non-default args`, the V1 engine config, the
  combined KV-capacity line, uvicorn's bare lines, a stats line every `stats_interval_seconds` (no
  preemption field: V1 never prints one), access lines, and in OOM mode the `torch.OutOfMemoryError`
  traceback and the API server's EngineDeadError sequence that end the engine.

aiohttp's server side is used here only (its client side lives in agent/http.py): it is well kept,
imports in about 0.3 s, and serves thousands of requests per second on one core.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from agent.errors import AgentError
from agent.tools.sim import SIMULATED, Engine, EngineOomError, QueueFullError, SimConfig, SimRequest
from agent.tools.sim_output import GIB, Histogram, RequestHistograms, VllmLog, num, prompt_tokens

log = logging.getLogger("agent.simulate")


@dataclass
class SimServer:
    """The simulated engine behind an aiohttp application; `start` binds (port 0 picks a free one)."""

    config: SimConfig
    log_path: Path | None = None
    stats_interval_seconds: float = 10.0
    engine: Engine = field(init=False)
    crashed: asyncio.Event = field(init=False)
    url: str = ""

    def __post_init__(self) -> None:
        self.engine = Engine(self.config)
        self.log = VllmLog(self.log_path)
        self._labels = f'engine="0",model_name="{self.config.model_name}"'
        self.histograms = RequestHistograms(self.config.max_model_len)
        self._wake = asyncio.Event()
        self.crashed = asyncio.Event()
        self._waiters: dict[SimRequest, asyncio.Queue[int]] = {}
        self._started = time.time()
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.oom: EngineOomError | None = None
        self.http_answers: Counter[str] = Counter()  # /v1 answers by status class, as http_requests_total counts

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Bind and start serving; raise AgentError (after logging vLLM's start-up error) when one request
        of max_model_len tokens does not fit in the KV cache, as vLLM refuses to start then."""
        c = self.config
        if c.kv_cache_tokens < c.max_model_len:
            needed = -(-c.max_model_len // c.block_size) * c.block_bytes
            message = (f"To serve at least one request with the model's max seq len ({c.max_model_len}), "
                       f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                       f"memory ({c.kv_blocks * c.block_bytes / GIB:.2f} GiB). Based on the available memory, the "
                       f"estimated maximum model length is {c.kv_cache_tokens}. Try increasing "
                       "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
            self.log.refused_start(self.config, message)
            raise AgentError(f"{SIMULATED} engine cannot start: {message}")
        app = web.Application(client_max_size=64 << 20, middlewares=[_no_traceback])
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = port
        for address in self._runner.addresses:  # the bound (host, port) of each site
            if isinstance(address, tuple):
                bound = int(address[1])
        self.url = f"http://{host}:{bound}"
        self.log.startup(self.config, host, bound)
        self._tasks = [asyncio.create_task(self._loop()), asyncio.create_task(self._stats_loop())]
        return self.url

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
        self.log.shutdown()
        self.log.close()

    # -- the engine loop --------------------------------------------------------------------------

    async def _loop(self) -> None:
        """Steps paced on a virtual clock: a step shorter than the event loop's timer resolution (about
        1 ms with epoll) is not slept alone; steps run back to back until the clock is ahead by a
        millisecond, then the loop sleeps the difference, so the average pace is the configured one."""
        engine = self.engine
        pace: float | None = None
        while True:
            now = time.monotonic()
            for request in engine.expire(now):
                self._deliver(request)
            if not engine.running and not engine.waiting:
                self._wake.clear()
                await self._wake.wait()
                pace = None
                continue
            try:
                step = engine.step(pace if pace is not None and pace > now else now)
            except EngineOomError as oom:
                self._crash(oom)
                return
            if step.duration_seconds <= 0:  # nothing could run: wait for a timeout or an arrival
                pace = None
                await asyncio.sleep(0.001)
                continue
            pace = max(pace or now, now - 0.001) + step.duration_seconds
            ahead = pace - time.monotonic()
            await asyncio.sleep(ahead if ahead > 0.001 else 0)
            for request in step.admitted:
                if request.preemptions == 0:
                    self.histograms.queue.observe((request.admitted_at or now) - request.arrived)
            for request in step.produced:
                queue = self._waiters.get(request)
                if queue is not None:
                    queue.put_nowait(1)
            for request in step.finished:
                self.histograms.finished(request.arrived, request.admitted_at, request.finished_at or now,
                                         request.prompt_tokens, request.generated)
                self._deliver(request)

    def _deliver(self, request: SimRequest) -> None:
        queue = self._waiters.get(request)
        if queue is not None:
            queue.put_nowait(0)

    def _crash(self, oom: EngineOomError) -> None:
        self.oom = oom
        self.log.engine_oom(oom, self.config)
        self.log.engine_dead()
        for request in list(self.engine.running) + list(self.engine.waiting):
            request.outcome = "engine_dead"
            self._deliver(request)
        self.crashed.set()

    async def _stats_loop(self) -> None:
        idle_before = True
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.stats_interval_seconds)
            now = time.monotonic()
            elapsed = max(now - last, 1e-9)
            last = now
            c = self.engine.counters
            idle = c.interval_prompt_tokens == 0 and c.interval_generation_tokens == 0
            if not (idle and idle_before) and not self.engine.dead:
                # vLLM 0.32's line: no preemption field (V1 never prints one), no prefix-cache field (it is off)
                parts = [f"Avg prompt throughput: {c.interval_prompt_tokens / elapsed:.1f} tokens/s",
                         f"Avg generation throughput: {c.interval_generation_tokens / elapsed:.1f} tokens/s",
                         f"Running: {len(self.engine.running)} reqs", f"Waiting: {len(self.engine.waiting)} reqs",
                         f"GPU KV cache usage: {self.engine.kv_usage_ratio * 100:.1f}%"]
                self.log.line("INFO", "loggers.py:335", "Engine 000: " + ", ".join(parts))
            idle_before = idle
            c.interval_prompt_tokens = c.interval_generation_tokens = c.interval_preemptions = 0

    # -- HTTP -------------------------------------------------------------------------------------

    def _access(self, request: web.Request, status: int) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "127.0.0.1:0"
        self.log.access(where, request.method, request.path_qs, status)

    def _error(self, request: web.Request, status: int, message: str, kind: str) -> web.Response:
        self._access(request, status)
        self.http_answers[f"{status // 100}xx"] += 1
        body = {"error": {"message": message, "type": kind, "param": None, "code": status}}  # vLLM 0.32's shape
        return web.json_response(body, status=status)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past the recursion limit
            return self._error(request, 400, "request body is not a JSON object", "BadRequestError")
        if self.engine.dead:
            return self._error(request, 500, "EngineCore encountered an issue. See stack trace (above) for the root "
                               "cause.", "InternalServerError")
        model = body.get("model")
        if isinstance(model, str) and model and model != self.config.model_name:
            return self._error(request, 404, f"The model `{model}` does not exist.", "NotFoundError")
        try:
            tokens = prompt_tokens(body)
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens")
                             or self.config.default_max_tokens)
        except (TypeError, ValueError, AttributeError, OverflowError, RecursionError):  # max_tokens 1e999: inf
            return self._error(request, 400, "prompt, messages or max_tokens malformed", "BadRequestError")
        if max_tokens < 1:
            return self._error(request, 400, "max_tokens must be at least 1", "BadRequestError")
        if tokens + max_tokens > self.config.max_model_len:
            return self._error(request, 400, f"This model's maximum context length is {self.config.max_model_len} "
                               f"tokens. However, you requested {tokens + max_tokens} tokens ({tokens} in the "
                               f"messages, {max_tokens} in the completion). Please reduce the length of the "
                               "messages or completion.", "BadRequestError")
        now = time.monotonic()
        try:
            sim = self.engine.submit(tokens, max_tokens, now)
        except QueueFullError as exc:
            status = self.config.reject_status
            if status == 503:  # vLLM's QueueOverflowError, word for word
                return self._error(request, 503, "The engine is currently busy and cannot accept new requests. "
                                   "Please try again later or on a different instance.", "Service Unavailable")
            return self._error(request, status, str(exc), "TooManyRequestsError")
        tokens_queue: asyncio.Queue[int] = asyncio.Queue()
        self._waiters[sim] = tokens_queue
        self._wake.set()
        chat = request.path.endswith("/chat/completions")
        try:
            if body.get("stream"):
                return await self._stream(request, sim, tokens_queue, chat)
            while await tokens_queue.get():
                pass
            return self._finish(request, sim, chat)
        except (asyncio.CancelledError, ConnectionResetError):
            self.engine.abort(sim)
            self.log.line("INFO", "async_llm.py:420", f"Aborted request(s) {sim.id}.")
            raise
        finally:
            self._waiters.pop(sim, None)

    def _refusal(self, request: web.Request, sim: SimRequest) -> web.Response | None:
        if sim.outcome == "queue_timeout":
            return self._error(request, self.config.reject_status, "Request waiting timeout reached.",
                               "ServiceUnavailableError")
        if sim.outcome == "request_timeout":
            self.log.line("INFO", "async_llm.py:420", f"Aborted request(s) {sim.id}.")
            return self._error(request, 504, f"request timed out after {self.config.request_timeout_seconds:g} s "
                               f"with {sim.generated} tokens generated", "TimeoutError")
        if sim.outcome == "engine_dead":
            return self._error(request, 500, "EngineCore encountered an issue. See stack trace (above) for the root "
                               "cause.", "InternalServerError")
        return None

    def _finish(self, request: web.Request, sim: SimRequest, chat: bool) -> web.Response:
        refused = self._refusal(request, sim)
        if refused is not None:
            return refused
        self._observe(sim)
        self._access(request, 200)
        self.http_answers["2xx"] += 1
        text = " tok" * sim.generated
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text},
                                   "finish_reason": "length"} if chat else
                                  {"index": 0, "text": text, "finish_reason": "length"})
        return web.json_response({
            "id": sim.id, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": self.config.model_name, "choices": [choice],
            "usage": {"prompt_tokens": sim.prompt_tokens, "completion_tokens": sim.generated,
                      "total_tokens": sim.prompt_tokens + sim.generated}})

    async def _stream(self, request: web.Request, sim: SimRequest, tokens_queue: asyncio.Queue[int],
                      chat: bool) -> web.StreamResponse:
        first = await tokens_queue.get()
        if not first:
            refused = self._refusal(request, sim)
            if refused is not None:
                return refused
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        self._access(request, 200)
        self.http_answers["2xx"] += 1
        obj = "chat.completion.chunk" if chat else "text_completion"
        while first:
            delta: dict[str, Any] = ({"index": 0, "delta": {"content": " tok"}, "finish_reason": None} if chat
                                     else {"index": 0, "text": " tok", "finish_reason": None})
            chunk = {"id": sim.id, "object": obj, "model": self.config.model_name, "choices": [delta]}
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            first = await tokens_queue.get()
        if sim.outcome == "length":
            self._observe(sim)
        else:  # a stream that already sent 200 fails with an error chunk, as vLLM does
            error = {"error": {"message": f"request ended: {sim.outcome}", "code": 500}}
            await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _observe(self, sim: SimRequest) -> None:
        if sim.first_token_at is not None:
            self.histograms.ttft.observe(sim.first_token_at - sim.arrived)

    async def _health(self, request: web.Request) -> web.Response:
        status = 503 if self.engine.dead else 200
        self._access(request, status)
        return web.Response(status=status)

    async def _models(self, request: web.Request) -> web.Response:
        self._access(request, 200)
        return web.json_response({"object": "list", "data": [{"id": self.config.model_name, "object": "model",
                                                               "owned_by": "deepinfer-agent (SIMULATED)"}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        self._access(request, 200)
        return web.Response(text=self.exposition(), content_type="text/plain", charset="utf-8",
                            headers={"X-Simulated": "true"})

    # -- /metrics ---------------------------------------------------------------------------------

    def exposition(self) -> str:
        """vLLM's metrics in prometheus_client's text format (version 0.0.4)."""
        e, c, labels = self.engine, self.engine.counters, self._labels
        out: list[str] = []

        def family(name: str, kind: str, help_text: str, samples: list[tuple[str, str, float]]) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            for suffix, extra, value in samples:
                out.append(f"{name}{suffix}{{{extra}{labels}}} {num(value)}")

        def counter(name: str, help_text: str, value: float, extra: str = "") -> None:
            family(name + "_total", "counter", help_text, [("", extra, value)])
            family(name + "_created", "gauge", help_text, [("", extra, self._started)])

        def gauge(name: str, help_text: str, value: float) -> None:
            family(name, "gauge", help_text, [("", "", value)])

        def histogram(name: str, help_text: str, h: Histogram) -> None:
            samples: list[tuple[str, str, float]] = []
            running = 0
            for bound, count in zip((*h.buckets, float("inf")), h.counts, strict=True):
                running += count
                samples.append(("_bucket", f'le="{num(bound)}",', float(running)))
            samples += [("_count", "", float(h.n)), ("_sum", "", h.total)]
            family(name, "histogram", help_text, samples)
            family(name + "_created", "gauge", help_text, [("", "", self._started)])

        out.append("# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.")
        out.append("# TYPE process_start_time_seconds gauge")
        out.append(f"process_start_time_seconds {num(self._started)}")
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", len(e.running))
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", len(e.waiting))
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", e.kv_usage_ratio)
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", c.preemptions)
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens)
        counter("vllm:generation_tokens", "Number of generation tokens processed.", c.generation_tokens)
        family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
               [("", f'finished_reason="{reason}",', float(c.finished if reason == "length" else 0))
                for reason in ("stop", "length", "abort", "error", "repetition")])
        # vLLM 0.32 labels admission rejections by model and reason only (no engine), both reasons from the start
        out.append("# HELP vllm:admission_rejections_total Requests rejected at admission.")
        out.append("# TYPE vllm:admission_rejections_total counter")
        out += [f'vllm:admission_rejections_total{{model_name="{self.config.model_name}",reason="{reason}"}} '
                f"{num(c.rejected if reason == 'max_num_queued_reqs' else 0)}"
                for reason in ("max_num_queued_reqs", "max_num_queued_tokens")]
        for name, help_text, h in self.histograms.families():
            histogram(name, help_text, h)
        cfg = self.config
        tokens = cfg.kv_cache_tokens
        info = (f'block_size="{cfg.block_size}",cache_dtype="auto",enable_prefix_caching="False",'
                f'gpu_memory_utilization="{cfg.budget.inputs.util if cfg.budget else 0.9}",'
                f'kv_cache_max_concurrency="{tokens / cfg.max_model_len}",kv_cache_size_tokens="{tokens}",'
                f'num_cpu_blocks="None",num_gpu_blocks="{cfg.kv_blocks}",num_gpu_blocks_override="None",')
        out.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig")
        out.append("# TYPE vllm:cache_config_info gauge")
        out.append(f'vllm:cache_config_info{{{info}engine="0"}} 1.0')  # no model_name here in vLLM 0.32
        # the API server's own counter (prometheus-fastapi-instrumentator): answers by status class
        out.append("# HELP http_requests_total Total number of requests by method, status and handler.")
        out.append("# TYPE http_requests_total counter")
        out += [f'http_requests_total{{handler="/v1/completions",method="POST",status="{status}"}} {num(n)}'
                for status, n in sorted(self.http_answers.items())]
        return "\n".join(out) + "\n"


@web.middleware
async def _no_traceback(request: web.Request,
                        handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """A request the handlers did not foresee is answered 500 with one log line, never a traceback."""
    try:
        return await handler(request)
    except (web.HTTPException, asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as exc:
        log.warning("%s %s: %s: %s", request.method, request.path, type(exc).__name__, exc)
        return web.json_response({"object": "error", "message": f"{type(exc).__name__}", "type": "InternalServerError",
                                  "code": 500}, status=500)


async def serve(server: SimServer, host: str, port: int, on_ready: Callable[[str], Awaitable[None] | None],
                stop: asyncio.Event | None = None) -> int:
    """Run until `stop` is set (exit 0) or the engine dies of OOM (exit 1)."""
    url = await server.start(host, port)
    ready = on_ready(url)
    if ready is not None:
        await ready
    stop = stop or asyncio.Event()
    waits = [asyncio.create_task(stop.wait()), asyncio.create_task(server.crashed.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if server.crashed.is_set():
            await asyncio.sleep(0.05)  # let the handlers answer the requests in flight (500) first
    finally:
        for task in waits:
            task.cancel()
        await server.stop()
    return 1 if server.crashed.is_set() else 0
