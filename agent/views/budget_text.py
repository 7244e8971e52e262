"""Render budgets, plans and reconciliations for people (text, YAML snippet, vLLM flags) and for tools (JSON).

Pure string building; the CLI prints. The text shows each step of the arithmetic with its inputs so
the reader can redo it on paper, and where each input came from.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from agent.capacity.budget import GIB, Budget, compute
from agent.capacity.capacity import Capacity
from agent.capacity.inputs import Sizing
from agent.capacity.plan import Plan
from agent.capacity.reconcile import Reconciliation, Row
from agent.config import Config
from agent.inert import printable
from agent.records import KvDtype
from agent.views.units import size

# The budget method's skeleton values for what the budget does not decide; confirm them with the load test.
SKELETON_DEFAULTS = {
    ("server", "max_queue_size"): 32,
    ("limits", "request_timeout_ms"): 30000,
    ("limits", "queue_timeout_ms"): 5000,
    ("limits", "max_output_tokens"): 1024,
    ("session", "idle_timeout_ms"): 60000,
    ("session", "max_session_tokens"): 16384,
}


def _kv_dtype_name(budget: Budget) -> str:
    """`auto` spelled out: the model's 16-bit activation dtype (fp16 models stay fp16, all else bf16)."""
    kv = budget.inputs.kv_dtype
    if kv is not KvDtype.AUTO:
        return str(kv.value)
    return "fp16" if budget.inputs.shape.native_dtype == "fp16" else "bf16"


def describe_model(budget: Budget) -> str:
    shape, inputs = budget.inputs.shape, budget.inputs
    if shape.is_mla:
        geometry = f"{shape.layers} layers, MLA latent {shape.kv_lora_rank}+{shape.qk_rope_head_dim}"
    else:
        geometry = f"{shape.layers} layers × {shape.kv_heads} KV heads × head_dim {shape.head_dim}"
    if shape.sliding_layers:
        geometry += f", {shape.sliding_layers} sliding-window layers ({shape.sliding_window} tokens)"
    return f"{shape.name} ({geometry}); KV {_kv_dtype_name(budget)}, block {inputs.block_size}, TP {inputs.tp}"


def render_arithmetic(budget: Budget, sizing: Sizing) -> str:
    """The arithmetic, one line per step, each input tagged with where it came from."""
    i, s, o = budget.inputs, budget.inputs.shape, sizing.origin
    dtype_b = i.kv_dtype.bytes
    if s.is_mla:
        per_token = f"{s.layers} layers × ({s.kv_lora_rank} + {s.qk_rope_head_dim}) × {dtype_b} B (MLA, no ×2)"
    else:
        split = f" per GPU (max(1, {s.kv_heads} / TP {i.tp}))" if i.tp > 1 else ""
        per_token = f"2 × {s.layers} layers × {budget.kv_heads_per_gpu} KV heads{split} × {s.head_dim} × {dtype_b} B"
    tokens = i.tokens_per_request
    lines = [
        f"KV-cache budget for {describe_model(budget)}",
        "",
        f"  util × VRAM          {i.util:g} × {size(i.vram_bytes)} = {size(budget.memory_for_instance_bytes)}"
        f"   [{o.get('util')} util, {o.get('vram')} VRAM]",
        f"  − weights per GPU    {size(budget.weights_per_gpu_bytes)}"
        + (f" ({size(i.weights_bytes)} / TP {i.tp})" if i.tp > 1 else "") + f"   [{o.get('weights')}]",
        f"  − overhead           {size(i.overhead_bytes)} (activations + CUDA context + framework)"
        f"   [{o.get('overhead')}]",
        f"  = usable KV cache    {size(budget.usable_kv_bytes)}",
        "",
        f"  KV per token         {per_token} = {size(budget.kv_bytes_per_token)}",
        f"  tokens per request   {tokens}   [{o.get('tokens')}]",
        f"  blocks per request   ceil({tokens} / {i.block_size}) = {budget.blocks_per_request}"
        f" → {budget.blocks_per_request * i.block_size} tokens reserved",
        f"  KV per request       {size(budget.kv_bytes_per_request)}"
        + (f" ({s.sliding_layers} layers keep only {s.sliding_window} tokens)" if s.sliding_layers else ""),
        f"  max concurrency      floor({size(budget.usable_kv_bytes)} / {size(budget.kv_bytes_per_request)})"
        f" = {budget.max_concurrency}   ({budget.max_concurrency_unrounded:.2f} before block rounding)",
        f"  KV cache capacity    {budget.kv_cache_blocks} blocks × {i.block_size} = {budget.kv_cache_tokens} tokens",
    ]
    if budget.max_concurrency == 0:
        lines.append(f"\n  ! not even one request of {tokens} tokens fits: the longest that fits is "
                     f"{budget.max_model_len_that_fits} tokens. Lower max_model_len or free memory.")
    if sizing.workload_tokens and sizing.workload_tokens < tokens:
        at_workload = compute(replace(i, tokens_per_request=sizing.workload_tokens))
        lines.append(f"  at the workload      {at_workload.max_concurrency} concurrent at {sizing.workload_tokens} "
                     "tokens per request (P95 input + max output): what max_model_len capped to the real "
                     "workload would allow")
    return "\n".join(lines)


def governing(budget: Budget, capacity: Capacity | None) -> tuple[int, str]:
    """The max_num_seqs to recommend and why: the engine's figure once it reported one (it measured its
    own weights, activation peak and overhead on the card), else the paper budget."""
    per_request = f"floor({size(budget.usable_kv_bytes)} usable KV / {size(budget.kv_bytes_per_request)} per request)"
    if capacity is None or capacity.governs != "engine" or capacity.max_concurrency is None:
        return budget.max_concurrency, per_request
    engine = capacity.engine_max_concurrency or 0.0
    if capacity.max_concurrency < 1:
        # Below one request no max_num_seqs helps: the request length is the knob (max_model_len below).
        return 1, (f"engine-reported {engine:.2f}x: not one request of {capacity.tokens_per_request} tokens fits; "
                   "lower max_model_len")
    return capacity.max_concurrency, (f"engine-reported {engine:.2f}x governs (paper budget: "
                                      f"{budget.max_concurrency})")


def fitting_length(capacity: Capacity | None) -> int | None:
    """The longest request the engine holds when not even one of max_model_len fits (block-rounded down)."""
    if capacity is None or capacity.max_concurrency is None or capacity.max_concurrency >= 1:
        return None
    tokens = capacity.engine_kv_cache_tokens
    return int(tokens // capacity.block_size * capacity.block_size) if tokens else None


def config_snippet(budget: Budget, config: Config | None = None, capacity: Capacity | None = None) -> str:
    """The budget method's config skeleton with this budget's numbers filled in (max_num_seqs from the
    governing capacity: the engine's figure once it reported one)."""
    cfg = config or Config()
    i = budget.inputs

    def kept(section: str, key: str) -> tuple[object, str]:
        value = getattr(getattr(cfg, section), key)
        if value is not None:
            return value, "from your config"
        return SKELETON_DEFAULTS[(section, key)], "default of the budget method: confirm with the step-up load test"

    max_num_seqs, why = governing(budget, capacity)
    rows: list[tuple[str, object, str]] = [
        ("server", None, ""),
        ("  gpu_memory_fraction", f"{i.util:.2f}", ""),
        ("  max_model_len", *((fits, f"the longest request the engine holds (was {i.tokens_per_request})")
                              if (fits := fitting_length(capacity)) else (i.tokens_per_request, ""))),
        ("  kv_cache_dtype", _kv_dtype_name(budget), ""),
        ("  max_num_seqs", max_num_seqs, why),
        ("  max_queue_size", *kept("server", "max_queue_size")),
        ("  block_size", i.block_size, ""),
        ("  tensor_parallel_size", i.tp, ""),
        ("limits", None, ""),
        ("  request_timeout_ms", *kept("limits", "request_timeout_ms")),
        ("  queue_timeout_ms", *kept("limits", "queue_timeout_ms")),
        ("  max_output_tokens", *kept("limits", "max_output_tokens")),
        ("session", None, ""),
        ("  idle_timeout_ms", *kept("session", "idle_timeout_ms")),
        ("  max_session_tokens", *kept("session", "max_session_tokens")),
    ]
    lines = []
    for key, value, comment in rows:
        text = f"{key}:" if value is None else f"{key}: {value}"
        lines.append(f"{text:<34}# {comment}" if comment else text)
    return "\n".join(lines)


def vllm_flags(budget: Budget, capacity: Capacity | None = None) -> str:
    i = budget.inputs
    max_num_seqs, _ = governing(budget, capacity)
    if max_num_seqs < 1:
        return (f"# no command to suggest: not one request of {i.tokens_per_request} tokens fits; the longest "
                f"that fits is {budget.max_model_len_that_fits} tokens (--max-model-len)")
    model = i.shape.hf_id or i.shape.name
    flags = [f"vllm serve {model}", f"--gpu-memory-utilization {i.util:.2f}", f"--max-model-len {i.tokens_per_request}",
             f"--max-num-seqs {max_num_seqs}",
             f"--kv-cache-dtype {'fp8' if i.kv_dtype is KvDtype.FP8 else 'auto'}", f"--block-size {i.block_size}"]
    if i.tp > 1:
        flags.append(f"--tensor-parallel-size {i.tp}")
    if i.weights_dtype is not None and i.weights_dtype.is_4bit:
        flags.append(f"--quantization {i.weights_dtype.value}")
    return " \\\n    ".join(flags)


def render_plan(plan: Plan) -> str:
    lines = [f"Plan for {plan.target} concurrent requests (the budget method's order: weights → KV dtype → length):"]
    for n, step in enumerate(plan.steps):
        got = (f"{step.concurrency:>4}   (weights {size(step.budget.inputs.weights_bytes)}, "
               f"{size(step.budget.kv_bytes_per_request)} per request)") if step.budget else f"0 ({step.error})"
        flag = f"   [{step.flag}]" if step.flag else ""
        mark = " ✓" if step.concurrency >= plan.target else ""
        lines.append(f"  {n}. {step.action:<50} → {got}{mark}{flag}")
    lines.append(f"  {'Reached' if plan.reached else 'Not reached'}: {plan.reason}.")
    for opt in plan.tensor_parallel:
        lines.append(f"  tensor parallel {opt.tp} ({opt.tp} GPUs): {opt.as_configured} as configured, "
                     f"{opt.with_steps} with the steps above")
    if not plan.reached and not plan.tensor_parallel:
        lines.append("  No tensor-parallel size divides this model's attention heads into 2, 4 or 8.")
    return "\n".join(lines)


def _cell(row: Row, value: float | None) -> str:
    if value is None:
        return "—"
    if row.unit == "bytes":
        return size(value)
    if row.unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.0f}"


def render_reconciliation(rec: Reconciliation) -> str:
    width = max(len(r.label) for r in rec.rows)
    lines = [f"  {'':<{width}}  {'computed':>12}  {'engine':>12}", ]
    for row in rec.rows:
        lines.append(f"  {row.label:<{width}}  {_cell(row, row.computed):>12}  {_cell(row, row.engine):>12}")
    lines.append("")
    lines.extend(f"  - {note}" for note in rec.explanations)
    return "\n".join(["Computed vs engine-reported:", *lines])


def render_budget(budget: Budget, sizing: Sizing, config: Config | None, plan: Plan | None,
                  rec: Reconciliation | None, capacity: Capacity | None = None) -> str:
    """The whole `budget` text: arithmetic, engine comparison, plan, config snippet and vLLM flags.

    With the engine's start-up figures (`--from-log`), `capacity` says which figure governs; the snippet
    and the flags then follow the engine's, not the paper's, so the two never contradict each other."""
    parts = [render_arithmetic(budget, sizing)]
    if rec is not None:
        parts.append(render_reconciliation(rec))
    if plan is not None:
        parts.append(render_plan(plan))
    engine_governs = capacity is not None and capacity.governs == "engine"
    source = "the engine's reported capacity" if engine_governs else "this budget"
    parts.append(f"Config (max_num_seqs from {source}):\n" + config_snippet(budget, config, capacity))
    parts.append("Equivalent vLLM flags:\n" + vllm_flags(budget, capacity))
    if engine_governs and capacity is not None:
        parts.append(f"Which governs: the engine's figure ({capacity.engine_max_concurrency:.2f}x at "
                     f"{capacity.tokens_per_request} tokens per request → max_num_seqs {capacity.max_concurrency}); "
                     f"the paper budget said {budget.max_concurrency}. The engine measured its own weights, "
                     "activation peak and overhead on the card.")
    elif sizing.origin.get("overhead") == "default":
        parts.append(f"Note: overhead {budget.inputs.overhead_bytes / GIB:.1f} GiB is a default; measure it with "
                     "--from-log on the engine's start-up log.")
    return printable("\n\n".join(parts))


def to_json(budget: Budget, sizing: Sizing, plan: Plan | None, rec: Reconciliation | None,
            capacity: Capacity | None = None) -> dict[str, Any]:
    """Everything in machine form; sizes in bytes, the origin of each input alongside."""
    i = budget.inputs
    out: dict[str, Any] = {k: v for k, v in asdict(budget).items() if k != "inputs"}
    out["model"] = {k: v for k, v in asdict(i.shape).items() if v is not None}
    out["inputs"] = {
        "vram_bytes": i.vram_bytes, "util": i.util, "weights_bytes": i.weights_bytes,
        "weights_dtype": i.weights_dtype.value if i.weights_dtype else None,
        "weights_estimated": i.weights_estimated, "overhead_bytes": i.overhead_bytes,
        "tokens_per_request": i.tokens_per_request, "kv_cache_dtype": i.kv_dtype.value,
        "block_size": i.block_size, "tensor_parallel_size": i.tp,
    }
    out["origin"] = sizing.origin
    out["recommended_max_num_seqs"] = governing(budget, capacity)[0]
    if capacity is not None:
        out["capacity"] = capacity.as_dict()
    out["workload_tokens"] = sizing.workload_tokens
    if plan is not None:
        out["plan"] = {
            "target": plan.target, "reached": plan.reached, "reason": plan.reason,
            "steps": [{"action": s.action, "flag": s.flag, "max_concurrency": s.concurrency, "error": s.error}
                      for s in plan.steps],
            "tensor_parallel": [asdict(t) for t in plan.tensor_parallel],
        }
    if rec is not None:
        out["engine"] = {
            "rows": [asdict(r) for r in rec.rows], "explanations": list(rec.explanations),
            "max_concurrency": rec.engine_max_concurrency, "tokens_per_request": rec.engine_tokens_per_request,
        }
    return out
