"""The body of `deepinfer-agent simulate`: flags → SimConfig (through agent.capacity.budget), a SIMULATED banner,
then serve until Ctrl-C, SIGTERM, `--duration`, or a simulated OOM (exit 1)."""

from __future__ import annotations

import asyncio
import errno
import signal
from pathlib import Path

import typer

from agent.capacity.inputs import SizingRequest, resolve
from agent.errors import AgentError
from agent.records import KvDtype
from agent.tools.sim import SIMULATED, SimConfig, from_budget
from agent.tools.sim_server import SimServer, serve


def run_simulator(*, host: str, port: int, model: str, vram_gib: float, util: float, weights_gib: float,
                  overhead_gib: float, block_size: int, max_model_len: int, kv_blocks: int | None,
                  max_num_seqs: int, max_queue_size: int | None, reject_status: int, queue_timeout: float | None,
                  request_timeout: float | None, prefill_tps: float, decode_tps: float, speed: float,
                  stats_interval: float, oom_on_overcommit: bool, log: Path | None, duration: float | None) -> int:
    settings = dict(max_num_seqs=max_num_seqs, max_queue_size=max_queue_size, reject_status=reject_status,
                    queue_timeout_seconds=queue_timeout, request_timeout_seconds=request_timeout,
                    prefill_tps=prefill_tps, decode_tps=decode_tps, speed=speed, oom_on_overcommit=oom_on_overcommit,
                    model_name=f"simulated/{Path(model).name}")
    if kv_blocks is not None:
        config = SimConfig(kv_blocks=kv_blocks, block_size=block_size, max_model_len=max_model_len,
                           **settings)  # type: ignore[arg-type]
    else:
        sizing = resolve(SizingRequest(model=model, vram_gib=vram_gib, util=util, weights_gib=weights_gib,
                                       overhead_gib=overhead_gib, block_size=block_size, max_model_len=max_model_len,
                                       kv_dtype=KvDtype.AUTO))
        config = from_budget(sizing.inputs, **settings)
    if not 0 <= port <= 65535:
        raise AgentError(f"--port {port}: a port is between 0 and 65535 (0 picks a free one)")
    if duration is not None and not 0 < duration <= 366 * 86400:  # NaN and infinity too
        raise AgentError(f"--duration {duration}: seconds above 0, at most a year")
    try:
        server = SimServer(config, log, stats_interval_seconds=stats_interval)
    except OSError as exc:
        raise AgentError(f"--log {log}: cannot write: {exc.strerror or exc}") from exc
    try:
        return asyncio.run(_main(server, host, port, duration))
    except OSError as exc:  # the address taken (a real vLLM on 8000), a host that does not resolve
        hint = " (another process holds it? --port 0 picks a free one)" if exc.errno == errno.EADDRINUSE else ""
        raise AgentError(f"cannot serve on {host}:{port}: {exc.strerror or exc}{hint}") from exc


async def _main(server: SimServer, host: str, port: int, duration: float | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if duration is not None:
        loop.call_later(duration, stop.set)

    def ready(url: str) -> None:
        c = server.config
        bound = ""
        if c.budget is not None:
            b = c.budget
            bound = (f"; budget: {b.max_concurrency} concurrent requests of {b.inputs.tokens_per_request:,} tokens")
        typer.echo(f"{SIMULATED} vLLM-like engine (no GPU, no model) serving {url}  model={c.model_name}  "
                   f"KV cache {c.kv_blocks:,} blocks x {c.block_size} = {c.kv_cache_tokens:,} tokens{bound}; "
                   f"max_num_seqs={c.max_num_seqs}", err=False)

    code = await serve(server, host, port, ready, stop)
    if code:
        typer.echo(f"{SIMULATED} engine died: CUDA out of memory (the KV cache ran out with "
                   "--oom-on-overcommit)", err=True)
    return code
