"""`deepinfer-agent budget`: the KV-cache budget, every step shown; the plan; the engine's own figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from agent.app import FORMAT_HELP, JSON_ALIAS_HELP, Output, app, fail
from agent.errors import AgentError, BudgetError, ConfigError
from agent.records import KvDtype, WeightsDtype


@app.command()
def budget(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Take inputs from this config file "
                                                "(flags override it).")] = None,
    model: Annotated[str | None, typer.Option(metavar="<preset|config.json>",
                                              help="Preset name (see `models`) or a local HF config.json "
                                              "(or its folder).")] = None,
    layers: Annotated[int | None, typer.Option(metavar="<n>", help="Layers (with --kv-heads and --head-dim instead of "
                                               "--model).")] = None,
    kv_heads: Annotated[int | None, typer.Option(metavar="<n>", help="KV heads (GQA groups).")] = None,
    head_dim: Annotated[int | None, typer.Option(metavar="<n>", help="Head dimension.")] = None,
    params_b: Annotated[float | None, typer.Option(metavar="<number>", help="Parameter count in billions (to estimate "
                                                   "weights).")] = None,
    vram_gib: Annotated[float | None, typer.Option(metavar="<number>", help="GPU memory per card, GiB.")] = None,
    util: Annotated[float | None, typer.Option(metavar="<number>",
                                               help="gpu_memory_utilization (default 0.9).")] = None,
    weights_gib: Annotated[float | None, typer.Option(metavar="<number>", help="Weights, GiB (whole model; default: "
                                                      "estimated from the parameter count).")] = None,
    weights_dtype: Annotated[WeightsDtype | None, typer.Option(help="Weights format for the estimate.")] = None,
    overhead_gib: Annotated[float | None, typer.Option(metavar="<number>",
                                                       help="Activations + framework overhead per GPU, "
                                                       "GiB (default 2.0).")] = None,
    kv_dtype: Annotated[KvDtype | None, typer.Option(help="KV-cache dtype.")] = None,
    block_size: Annotated[int | None, typer.Option(metavar="<n>",
                                                   help="Paged-KV block size in tokens (default 16).")] = None,
    tp: Annotated[int | None, typer.Option(metavar="<n>", help="Tensor-parallel size.")] = None,
    max_model_len: Annotated[int | None, typer.Option(metavar="<n>",
                                                      help="Tokens per request (input + output).")] = None,
    input_p95: Annotated[int | None, typer.Option(metavar="<n>", help="P95 input tokens of the real workload.")] = None,
    max_output: Annotated[int | None, typer.Option(metavar="<n>", help="Output cap in tokens (max_tokens).")] = None,
    target_concurrency: Annotated[int | None, typer.Option(metavar="<n>", help="Plan how to reach this many concurrent "
                                                           "requests.")] = None,
    from_log: Annotated[Path | None, typer.Option(help="A vLLM start-up log: compare with what the engine "
                                                  "reported.")] = None,
    output_format: Annotated[Output, typer.Option("--format", help=FORMAT_HELP)] = Output.TEXT,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_ALIAS_HELP)] = False,
) -> None:
    """Compute the KV-cache budget and max concurrency, showing every step of the arithmetic.

    Exit 0 with the budget (also when not one request fits: it says so), 1 on bad input (a value out of
    range, an unknown preset, an unreadable config or log), 2 on a usage error."""
    from agent.capacity.budget import compute
    from agent.capacity.capacity import capacity_of
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
    if target_concurrency is not None and target_concurrency < 1:
        fail(f"--target-concurrency {target_concurrency}: expected at least 1 concurrent request")
    try:
        cfg = load_config(config) if config is not None else None
        facts = latest(startup_facts(_read_lines(from_log), str(from_log))) if from_log else {}
        if from_log and not facts:
            fail(f"{from_log}: no vLLM start-up capacity lines found (GPU KV cache size, # GPU blocks, "
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
        the_plan = plan(sizing.inputs, target_concurrency, sizing.workload_tokens) \
            if target_concurrency is not None else None
        rec = reconcile(result, facts) if facts else None
        cap = capacity_of(result, facts, str(from_log)) if facts else None
    except ConfigError as exc:
        fail("\n".join(exc.problems))
    except AgentError as exc:
        fail(str(exc))
    if as_json or output_format == Output.JSON:
        typer.echo(json.dumps(to_json(result, sizing, the_plan, rec, cap), indent=2, default=str))
        return
    typer.echo(render_budget(result, sizing, cfg, the_plan, rec, cap))


_SETTINGS = ("model", "tensor_parallel_size", "quantization", "kv_cache_dtype", "gpu_memory_utilization",
             "max_model_len", "total_gpu_memory_bytes", "weights_bytes")


def _read_lines(path: Path | None) -> list[str]:
    """A saved log's lines, unwrapped from Docker json-file or CRI envelopes where they have one."""
    if path is None:
        return []
    from agent.offline.saved import Unwrapper
    from agent.sources.bounded import bounded, open_saved

    if str(path) == "-":  # standard input, as every file argument takes it
        return [text for text, _, _ in Unwrapper().read(bounded(sys.stdin.buffer))]
    if path.is_dir():
        fail(f"{path}: is a directory, not a log file")
    try:
        with open_saved(path) as handle:
            return [text for text, _, _ in Unwrapper().read(handle)]
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror or exc}")
