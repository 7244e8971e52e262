"""The command line: the only module that prints to people and chooses exit codes.

Each command gathers its options, calls one core function, and renders the result. Core errors
(`AgentError`) become one clear message on stderr and exit code 1; usage errors are typer's (2).
"""

from __future__ import annotations

import json
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from agent import __version__
from agent.defaults import DEFAULT_CONFIG_PATH
from agent.errors import AgentError, BudgetError, ConfigError
from agent.records import KvDtype, Server, WeightsDtype

app = typer.Typer(
    name="deepinfer-agent",
    help="Watch GPU inference nodes; size the KV-cache budget; explain OOM, queueing, timeouts and 429/503.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: rendering it with rich would import rich (most of `--help`'s time)
)


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"deepinfer-agent {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """deepinfer-agent: KV-cache budgets and inference-server incident classification."""


@app.command()
def check(
    config: Annotated[Path, typer.Option("--config", "-c", help="Config file to validate.")] = DEFAULT_CONFIG_PATH,
) -> None:
    """Validate a config file: print every problem (file:line: field: expected …) or a one-line summary."""
    from agent.config import load_config

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        for problem in exc.problems:
            typer.echo(problem, err=True)
        typer.echo(f"{config}: {len(exc.problems)} problem(s)", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{config}: OK — {cfg.summary()}")


@app.command()
def run(
    config: Annotated[Path, typer.Option("--config", "-c", help="Config file.")] = DEFAULT_CONFIG_PATH,
    once: Annotated[bool, typer.Option("--once", help="One step (read, classify, store), then exit.")] = False,
    nvml_library: Annotated[Path | None, typer.Option(help="Load this libnvidia-ml.so.1 instead of the "
                                                      "system's (unusual installs, e.g. WSL).")] = None,
) -> None:
    """Run the agent: follow logs, poll NVML and engines, store events, serve /metrics (SIGHUP reloads)."""
    from agent.config import load_config
    from agent.daemon.service import serve, setup_logging

    setup_logging()
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    try:
        code = serve(config, cfg, once=once, nvml_library=str(nvml_library) if nvml_library else None)
    except AgentError as exc:
        _fail(str(exc))
    raise typer.Exit(code)


@app.command()
def status(
    config: Annotated[Path, typer.Option("--config", "-c", help="The agent's config file.")] = DEFAULT_CONFIG_PATH,
) -> None:
    """What the running agent sees now: sources, load vs budget, GPUs, last events (from the store)."""
    from agent.config import load_config
    from agent.daemon.loop import budget_of
    from agent.daemon.status import gather
    from agent.views.status import render as render_status

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    budget_max = budget_of(cfg).get("max_concurrency")
    typer.echo(render_status(gather(cfg), cfg, int(budget_max) if budget_max is not None else None))


@app.command()
def models() -> None:
    """List the model presets with the per-token KV size (bf16) each implies."""
    from agent.capacity.shapes import PRESETS
    from agent.views.units import size

    for preset in PRESETS.values():
        per_token = preset.layers * preset.kv_bytes_per_token_layer(dtype_bytes=2)
        params = f"{preset.params / 1e9:.1f}B" if preset.params else "?"
        kind = "MLA" if preset.is_mla else f"{preset.kv_heads} KV heads × {preset.head_dim}"
        swa = f", {preset.sliding_layers} SWA layers" if preset.sliding_layers else ""
        typer.echo(f"{preset.name:<18} {params:>7}  {preset.layers:>3} layers, {kind}{swa}: "
                   f"{size(per_token)}/token  ({preset.hf_id})")


@app.command()
def budget(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Take inputs from this config file "
                                                "(flags override it).")] = None,
    model: Annotated[str | None, typer.Option(help="Preset name (see `models`) or a local HF config.json "
                                              "(or its folder).")] = None,
    layers: Annotated[int | None, typer.Option(help="Layers (with --kv-heads and --head-dim instead of "
                                               "--model).")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="KV heads (GQA groups).")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head dimension.")] = None,
    params_b: Annotated[float | None, typer.Option(help="Parameter count in billions (to estimate "
                                                   "weights).")] = None,
    vram_gib: Annotated[float | None, typer.Option(help="GPU memory per card, GiB.")] = None,
    util: Annotated[float | None, typer.Option(help="gpu_memory_utilization (default 0.9).")] = None,
    weights_gib: Annotated[float | None, typer.Option(help="Weights, GiB (whole model; default: "
                                                      "estimated from the parameter count).")] = None,
    weights_dtype: Annotated[WeightsDtype | None, typer.Option(help="Weights format for the estimate.")] = None,
    overhead_gib: Annotated[float | None, typer.Option(help="Activations + framework overhead per GPU, "
                                                       "GiB (default 2.0).")] = None,
    kv_dtype: Annotated[KvDtype | None, typer.Option(help="KV-cache dtype.")] = None,
    block_size: Annotated[int | None, typer.Option(help="Paged-KV block size in tokens (default 16).")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
    max_model_len: Annotated[int | None, typer.Option(help="Tokens per request (input + output).")] = None,
    input_p95: Annotated[int | None, typer.Option(help="P95 input tokens of the real workload.")] = None,
    max_output: Annotated[int | None, typer.Option(help="Output cap in tokens (max_tokens).")] = None,
    target_concurrency: Annotated[int | None, typer.Option(help="Plan how to reach this many concurrent "
                                                           "requests.")] = None,
    from_log: Annotated[Path | None, typer.Option(exists=True, dir_okay=False, help="A vLLM start-up log: "
                                                  "compare with what the engine reported.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")] = False,
) -> None:
    """Compute the KV-cache budget and max concurrency, showing every step of the arithmetic."""
    from agent.capacity.budget import compute
    from agent.capacity.inputs import SizingRequest, resolve
    from agent.capacity.plan import plan
    from agent.capacity.reconcile import latest, reconcile
    from agent.config import load_config
    from agent.views.budget_text import render_budget, to_json
    from parsers.vllm import startup_facts

    request = SizingRequest(
        model=model, layers=layers, kv_heads=kv_heads, head_dim=head_dim, params_b=params_b,
        vram_gib=vram_gib, util=util, weights_gib=weights_gib, weights_dtype=weights_dtype,
        overhead_gib=overhead_gib, kv_dtype=kv_dtype, block_size=block_size, tp=tp,
        max_model_len=max_model_len, input_p95=input_p95, max_output=max_output,
    )
    try:
        cfg = load_config(config) if config is not None else None
        facts = latest(startup_facts(_read_lines(from_log), str(from_log))) if from_log else {}
        if from_log and not facts:
            _fail(f"{from_log}: no vLLM start-up capacity lines found (GPU KV cache size, # GPU blocks, "
                  "Model loading took, Available KV cache memory)")
        sizing = resolve(request, cfg, facts)
        try:
            result = compute(sizing.inputs)
        except BudgetError as exc:
            if not facts:
                raise
            kv = facts.get("kv_cache_bytes")
            if "required_kv_bytes" in facts or (isinstance(kv, int | float) and kv <= 0):
                raise BudgetError(f"{exc}\nThe engine did not start either: the log shows no room for the KV "
                                  "cache.") from exc
            known = ", ".join(f"{k}={v}" for k, v in facts.items() if k in _SETTINGS) or "none"
            raise BudgetError(f"{exc}\nThe engine did size a KV cache on its card, so an input here is not what "
                              f"it ran with (settings the log states: {known}); pass the ones it leaves out, e.g. "
                              "--tp, --vram-gib, --weights-gib or --weights-dtype.") from exc
        the_plan = plan(sizing.inputs, target_concurrency, sizing.workload_tokens) if target_concurrency else None
        rec = reconcile(result, facts) if facts else None
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    except AgentError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(to_json(result, sizing, the_plan, rec), indent=2, default=str))
        return
    typer.echo(render_budget(result, sizing, cfg, the_plan, rec))


_SETTINGS = ("model", "tensor_parallel_size", "quantization", "kv_cache_dtype", "gpu_memory_utilization",
             "max_model_len", "total_gpu_memory_bytes", "weights_bytes")


def _read_lines(path: Path | None) -> list[str]:
    """A saved log's lines, unwrapped from Docker json-file or CRI envelopes where they have one."""
    if path is None:
        return []
    from agent.sources.saved import Unwrapper

    try:
        with path.open("rb") as handle:
            return [text for text, _, _ in Unwrapper().read(handle)]
    except OSError as exc:
        _fail(f"{path}: cannot read: {exc.strerror or exc}")


class ScanServer(str, Enum):
    """Servers `scan` can be told to read a log as."""

    AUTO = "auto"
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    KERNEL = "kernel"


class ScanFormat(str, Enum):
    TEXT = "text"
    JSONL = "jsonl"


@app.command()
def scan(
    files: Annotated[list[Path], typer.Argument(help="Log files (plain, Docker json-file or CRI, detected per "
                                                "file); '-' reads stdin.")],
    server: Annotated[ScanServer, typer.Option(help="Read the logs as this server's (auto: detect from the "
                                               "first lines).")] = ScanServer.AUTO,
    output: Annotated[ScanFormat, typer.Option("--format", help="text: a summary; jsonl: one JSON object per "
                                               "record.")] = ScanFormat.TEXT,
    tz: Annotated[str, typer.Option(help="Zone of time stamps that carry none (vLLM, SGLang, syslog): UTC, "
                                    "+08:00 or Asia/Shanghai.")] = "UTC",
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Processes that read one large plain "
                                             "file in parallel (default: the CPUs available); the output is the "
                                             "same as with 1.")] = None,
) -> None:
    """Classify saved logs: OOM, preemption, queueing, refusals, timeouts, engine deaths, GPU faults.

    Exits 0 whether or not problems are found (it is a report, not a check); 1 when a file cannot be read.
    """
    from agent.sources.parallel import scan_path
    from agent.sources.saved import FileScan, parse_tz, scan_into
    from agent.views.scan_text import JsonlWriter, render_text
    from agent.views.summary import SummaryBuilder

    scans: list[FileScan] = []
    try:
        zone = parse_tz(tz)
    except AgentError as exc:
        _fail(str(exc))
    out = sys.stdout
    writer = JsonlWriter(out) if output is ScanFormat.JSONL else None
    summary = SummaryBuilder() if writer is None else None
    emit = writer if writer is not None else lambda records, _server: summary.add(records)  # type: ignore[union-attr]
    as_server = Server(server.value)
    for path in files:
        try:
            if str(path) == "-":
                scans.append(scan_into(sys.stdin.buffer, "-", emit, as_server, time.time(), zone))
                continue
            scans.append(scan_path(path, emit, as_server, zone, jobs if jobs is not None else _cpus(), writer,
                                   summary))
        except OSError as exc:
            if writer is not None:
                writer.flush()
            _fail(f"{path}: cannot read: {exc.strerror or exc}")
    if writer is not None:
        writer.flush()
        out.flush()
        return
    assert summary is not None
    typer.echo(render_text(scans, summary.result()))


def _cpus() -> int:
    """The CPUs this process may run on (its affinity, so `taskset` and cgroup pinning count)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
