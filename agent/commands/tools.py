"""`loadtest`, `simulate` and `demo`: the tools that exercise an engine (the daemon never imports them)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from agent.app import FORMAT_HELP, JSON_ALIAS_HELP, Output, app, fail
from agent.errors import AgentError, ConfigError

# `loadtest`'s exit code when it ran but no level was safe (1 is an error, 2 a usage error, as everywhere).
NO_SAFE_LEVEL = 4


@app.command()
def loadtest(
    url: Annotated[str, typer.Argument(help="OpenAI-compatible endpoint: http://host:port/v1/completions or "
                                       ".../v1/chat/completions (a bare host:port means /v1/completions).")],
    levels: Annotated[str, typer.Option(metavar="<n,n,…>", help="Concurrency levels, in order.")] = "1,2,3,5,8,12",
    requests_per_level: Annotated[int | None, typer.Option(metavar="<n>",
                                                           help="Requests per level (default 20 × level).")] = None,
    payload: Annotated[Path | None, typer.Option(help="JSON request body with a fixed prompt (or messages) and "
                                                 "max_tokens; '-' reads standard input.")] = None,
    input_tokens: Annotated[int, typer.Option(metavar="<n>",
                                              help="Without --payload: prompt length (one word per token).")] = 512,
    output_tokens: Annotated[int, typer.Option(metavar="<n>",
                                               help="Without --payload: max_tokens (with ignore_eos).")] = 128,
    timeout: Annotated[float, typer.Option(metavar="<number>", help="Client timeout per request, seconds.")] = 60.0,
    stream: Annotated[bool, typer.Option(help="Stream responses and measure time to first token.")] = False,
    pause: Annotated[float, typer.Option(metavar="<number>",
                                         help="Seconds between levels (engine events logged then count "
                                         "for the level before).")] = 5.0,
    metrics_url: Annotated[str | None, typer.Option(metavar="<url>", help="Engine /metrics to scrape during each level "
                                                    "(default: the same host's /metrics; '' turns it off).")] = None,
    log: Annotated[Path | None, typer.Option(help="Engine log to read OOM and preemption events from.")] = None,
    db: Annotated[Path | None, typer.Option(help="The agent's store: read the same events from it, and keep "
                                            "each level there for `report`.")] = None,
    capacity: Annotated[int | None, typer.Option(metavar="<n>",
                                                 help="The concurrency the budget allows (for the verdict).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Compute --capacity from this config's "
                                                "budget.")] = None,
    keep_going: Annotated[bool, typer.Option(help="Run every level even after one broke.")] = False,
    gpu: Annotated[bool, typer.Option(help="Sample GPU memory through NVML when a driver is present.")] = True,
    nvml_library: Annotated[Path | None, typer.Option(help="Load this libnvidia-ml.so.1 instead of the "
                                                      "system's.")] = None,
    output_format: Annotated[Output, typer.Option("--format", help=FORMAT_HELP)] = Output.TEXT,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_ALIAS_HELP)] = False,
    save: Annotated[Path | None, typer.Option(help="Also write the JSON result to this file (- is stdout).")] = None,
) -> None:
    """Step-up load test: raise concurrency level by level, watch the engine, compare with the budget.

    The API key comes from DEEPINFER_API_KEY or OPENAI_API_KEY (never a flag). Stops at the first level
    that breaks (OOM, preemption or failed requests) unless --keep-going; levels and requests are capped.

    Exit 0 when at least one level was safe, 4 when none was (the table or JSON is printed all the same),
    1 on an error (the engine does not answer, a bad payload or config), 2 on a usage error.
    """
    from agent.tools.loadtest_cli import run_loadtest

    try:
        result = run_loadtest(url=url, levels=levels, requests_per_level=requests_per_level, payload=payload,
                     input_tokens=input_tokens, output_tokens=output_tokens, timeout=timeout, stream=stream,
                     pause=pause, metrics_url=metrics_url, log=log, db=db, capacity=capacity, config=config,
                     keep_going=keep_going, gpu=gpu, nvml_library=str(nvml_library) if nvml_library else None,
                     as_json=as_json or output_format == Output.JSON, save=save)
    except ConfigError as exc:
        fail("\n".join(exc.problems))
    except AgentError as exc:
        fail(str(exc))
    if result.verdict.safe_level is None:
        raise typer.Exit(NO_SAFE_LEVEL)


@app.command()
def simulate(
    host: Annotated[str, typer.Option(metavar="<address>",
                                      help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="<n>", help="Port (0 picks a free one; the URL is printed).")] = 8000,
    model: Annotated[str, typer.Option(metavar="<preset|config.json>",
                                       help="Model preset or HF config.json for the KV arithmetic.")] = "qwen2.5-7b",
    vram_gib: Annotated[float, typer.Option(metavar="<number>", help="Simulated GPU memory, GiB.")] = 24.0,
    util: Annotated[float, typer.Option(metavar="<number>", help="gpu_memory_utilization.")] = 0.9,
    weights_gib: Annotated[float, typer.Option(metavar="<number>", help="Weights, GiB.")] = 14.2,
    overhead_gib: Annotated[float, typer.Option(metavar="<number>",
                                                help="Activations + framework overhead, GiB.")] = 1.6,
    block_size: Annotated[int, typer.Option(metavar="<n>", help="Paged-KV block size in tokens.")] = 16,
    max_model_len: Annotated[int, typer.Option(metavar="<n>",
                                               help="Longest request (prompt + output) in tokens.")] = 8192,
    kv_blocks: Annotated[int | None, typer.Option(metavar="<n>",
                                                  help="KV cache size in blocks (instead of the budget).")] = None,
    max_num_seqs: Annotated[int, typer.Option(metavar="<n>", help="Most requests running at once.")] = 256,
    max_queue_size: Annotated[int | None, typer.Option(metavar="<n>",
                                                       help="Most requests waiting beyond free slots; more are "
                                                       "refused (default: unbounded, as vLLM ≤ 0.28).")] = None,
    reject_status: Annotated[int, typer.Option(metavar="<n>", help="Status of a refusal: 503 (vLLM) or 429.")] = 503,
    queue_timeout: Annotated[float | None, typer.Option(metavar="<number>",
                                                        help="Refuse a request still waiting after this many "
                                                        "seconds.")] = None,
    request_timeout: Annotated[float | None, typer.Option(metavar="<number>",
                                                          help="Abort a request older than this many seconds "
                                                          "(504).")] = None,
    prefill_tps: Annotated[float, typer.Option(metavar="<number>",
                                               help="Prefill rate, tokens/s (simulated time).")] = 5000.0,
    decode_tps: Annotated[float, typer.Option(metavar="<number>",
                                              help="Decode rate per request, tokens/s (simulated time).")] = 50.0,
    speed: Annotated[float, typer.Option(metavar="<number>",
                                         help="Run this many times faster than the rates say.")] = 1.0,
    stats_interval: Annotated[float, typer.Option(metavar="<number>",
                                                  help="Seconds between stats lines in the log.")] = 10.0,
    oom_on_overcommit: Annotated[bool, typer.Option(help="When the KV cache runs out, die with a CUDA OOM "
                                                    "(exit 1) instead of preempting.")] = False,
    log: Annotated[Path | None, typer.Option(help="Write a vLLM-format log here.")] = None,
    duration: Annotated[float | None, typer.Option(metavar="<number>", help="Stop after this many seconds.")] = None,
) -> None:
    """Run a SIMULATED vLLM-like engine (no GPU, no model): paged-KV scheduling, vLLM logs and /metrics.

    For trying the load test, the parsers and the scraper end to end. Every output says SIMULATED.

    Exit 0 when stopped (Ctrl-C, SIGTERM, --duration), 1 when it cannot start or its simulated engine
    died (--oom-on-overcommit), 2 on a usage error.
    """
    from agent.tools.sim_cli import run_simulator

    try:
        code = run_simulator(host=host, port=port, model=model, vram_gib=vram_gib, util=util,
                             weights_gib=weights_gib, overhead_gib=overhead_gib, block_size=block_size,
                             max_model_len=max_model_len, kv_blocks=kv_blocks, max_num_seqs=max_num_seqs,
                             max_queue_size=max_queue_size, reject_status=reject_status,
                             queue_timeout=queue_timeout, request_timeout=request_timeout, prefill_tps=prefill_tps,
                             decode_tps=decode_tps, speed=speed, stats_interval=stats_interval,
                             oom_on_overcommit=oom_on_overcommit, log=log, duration=duration)
    except AgentError as exc:
        fail(str(exc))
    raise typer.Exit(code)


class DemoEngine(str, Enum):
    SIMULATED = "simulated"
    VLLM = "vllm"


@app.command()
def demo(
    workdir: Annotated[Path | None, typer.Option(help="Where to put the demo's config, store, logs and report "
                                                 "(default: a new temporary folder, kept).")] = None,
    engine: Annotated[DemoEngine, typer.Option(help="simulated (default; no install), or vllm: the real vLLM "
                                               "0.32 CPU build that `bash tests/engines/install.sh vllm` installs.")]
    = DemoEngine.SIMULATED,
) -> None:
    """The whole product in about a minute, no GPU: an engine with max_num_seqs set too high (SIMULATED, or a
    real vLLM on the CPU), the agent watching it, a step-up load test, the advisor's recommendation and the
    HTML report.

    Exits 0 when every step ran, 1 naming the step that failed (or how to install the real engine), 130 on
    Ctrl-C (processes are stopped)."""
    from agent.tools.demo import main as run_demo

    raise typer.Exit(run_demo(workdir, engine.value))
