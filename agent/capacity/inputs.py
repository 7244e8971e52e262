"""Turn what the operator gave (flags, a config file, an engine's start-up log) into budget inputs.

Each input is taken from the first place that has it — flag, then config, then the engine's own
log, then a documented default — and the place is remembered, so the output can say where every
number came from. Estimates (weights from the parameter count) are labelled as estimates.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from agent.capacity.budget import GIB, BudgetInputs, estimate_weights_bytes
from agent.capacity.shapes import ModelShape, find_preset, guess_preset, load_hf_config
from agent.config import Config
from agent.errors import BudgetError, ModelError
from agent.records import KvDtype, WeightsDtype

DEFAULT_UTIL = 0.9  # vLLM's default gpu_memory_utilization
DEFAULT_OVERHEAD_GIB = 2.0  # activations + CUDA context + framework reserve (docs/budget.md)
DEFAULT_BLOCK_SIZE = 16  # vLLM on CUDA


@dataclass(frozen=True)
class SizingRequest:
    """The raw inputs as the CLI received them; None means 'not given'."""

    model: str | None = None
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    params_b: float | None = None
    vram_gib: float | None = None
    util: float | None = None
    weights_gib: float | None = None
    weights_dtype: WeightsDtype | None = None
    overhead_gib: float | None = None
    kv_dtype: KvDtype | None = None
    block_size: int | None = None
    tp: int | None = None
    max_model_len: int | None = None
    input_p95: int | None = None
    max_output: int | None = None


@dataclass(frozen=True)
class Sizing:
    inputs: BudgetInputs
    origin: dict[str, str] = field(default_factory=dict)
    workload_tokens: int | None = None


T = TypeVar("T")


def _first(*candidates: tuple[T | None, str]) -> tuple[T | None, str]:
    """The first value that was given, with the name of the place it came from."""
    return next(((v, o) for v, o in candidates if v is not None), (None, ""))


def _first_or(default: tuple[T, str], *candidates: tuple[T | None, str]) -> tuple[T, str]:
    """The first value given, else the documented default."""
    value, origin = _first(*candidates)
    return (value, origin) if value is not None else default


def _required(found: tuple[T | None, str], problem: str) -> tuple[T, str]:
    value, origin = found
    if value is None:
        raise BudgetError(problem)
    return value, origin


def _shape(req: SizingRequest, config: Config | None, served_model: str | None,
           from_log: bool = False) -> tuple[ModelShape, str]:
    explicit = (req.layers, req.kv_heads, req.head_dim)
    if any(v is not None for v in explicit):
        if req.model is not None:
            raise ModelError("give either --model or --layers/--kv-heads/--head-dim, not both")
        if not all(v is not None and v > 0 for v in explicit):
            raise ModelError("--layers, --kv-heads and --head-dim must all be given, as positive integers")
        layers, kv_heads, head_dim = (int(v) for v in explicit)  # type: ignore[arg-type]
        return ModelShape(f"{layers}L×{kv_heads}kv×{head_dim}", layers, kv_heads, head_dim, None), "flag"
    if req.model is not None:
        return _named_model(req.model), "flag"
    if config is not None:
        m = config.model
        if m.preset:
            return find_preset(m.preset), "config"
        if m.config_json:
            return load_hf_config(m.config_json), "config"
        if m.layers and m.kv_heads and m.head_dim:
            return ModelShape(f"{m.layers}L×{m.kv_heads}kv×{m.head_dim}", m.layers, m.kv_heads, m.head_dim,
                              None), "config"
        served_model = served_model or config.served_model
    if served_model:
        guessed = guess_preset(served_model)
        if guessed is not None:
            return guessed, f"guessed from served model {served_model}"
        raise ModelError(f"the served model {served_model!r} matches no preset: pass --model with a preset "
                         "name or the model's config.json, or --layers/--kv-heads/--head-dim")
    if from_log:
        raise ModelError("the log does not name the served model (no `model=` in an args or config line): pass "
                         "--model (a preset name or the model's config.json) or --layers/--kv-heads/--head-dim")
    raise ModelError("no model given: pass --model (a preset name or a config.json path) or "
                     "--layers/--kv-heads/--head-dim")


def _named_model(text: str) -> ModelShape:
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        return load_hf_config(path)
    return find_preset(text)


MAX_VRAM_GIB = 4096.0  # no card holds 4 TiB; a bigger number is a typo (or 1e30)
MAX_TOKENS = 1 << 24  # 16 M tokens per request: beyond any model's context


def check_request(req: SizingRequest) -> None:
    """Refuse flags no card or engine can have, with one line naming the flag (BudgetError)."""
    def bounded(flag: str, value: float | None, low: float, high: float, *, low_open: bool = True) -> None:
        if value is None:
            return
        if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
            side = ">" if low_open else "≥"
            raise BudgetError(f"{flag} {value:g}: expected a finite number {side} {low:g} and ≤ {high:g}")

    bounded("--vram-gib", req.vram_gib, 0, MAX_VRAM_GIB)
    bounded("--weights-gib", req.weights_gib, 0, 64 * MAX_VRAM_GIB, low_open=False)
    bounded("--overhead-gib", req.overhead_gib, 0, MAX_VRAM_GIB, low_open=False)
    bounded("--util", req.util, 0, 1)
    bounded("--params-b", req.params_b, 0, 100_000)
    for flag, count in (("--layers", req.layers), ("--kv-heads", req.kv_heads), ("--head-dim", req.head_dim),
                        ("--tp", req.tp), ("--max-model-len", req.max_model_len), ("--input-p95", req.input_p95),
                        ("--max-output", req.max_output)):
        if count is not None and not 0 < count <= MAX_TOKENS:
            raise BudgetError(f"{flag} {count}: expected a whole number from 1 to {MAX_TOKENS:,}")
    if req.block_size is not None and (req.block_size < 1 or req.block_size > 1024
                                       or req.block_size & (req.block_size - 1)):
        raise BudgetError(f"--block-size {req.block_size}: expected a power of two from 1 to 1024 (vLLM uses 16)")
    if (req.input_p95 is None) != (req.max_output is None):
        raise BudgetError("--input-p95 and --max-output go together (tokens per request = P95 input + max "
                          "output); give both, or --max-model-len")


def resolve(req: SizingRequest, config: Config | None = None,
            facts: dict[str, float | str] | None = None) -> Sizing:
    """Build budget inputs, recording where each came from (flag, config, log, default, estimate)."""
    check_request(req)
    facts = facts or {}
    cfg = config or Config()
    served = facts.get("model")
    shape, shape_origin = _shape(req, config, str(served) if served is not None else None, bool(facts))
    if req.params_b is not None or cfg.model.params_b is not None:
        params_b = req.params_b if req.params_b is not None else cfg.model.params_b
        assert params_b is not None
        shape = replace(shape, params=int(params_b * 1e9))
    origin = {"model": shape_origin}

    def log_num(name: str) -> float | None:
        value = facts.get(name)
        return float(value) if isinstance(value, int | float) else None

    total = log_num("total_gpu_memory_bytes")
    vram, origin["vram"] = _required(
        _first((req.vram_gib, "flag"), (cfg.gpu.vram_gib, "config"), (total / GIB if total else None, "log")),
        "the GPU's memory is unknown: pass --vram-gib (or gpu.vram_gib in the config); V1 vLLM logs do not "
        "print the card's total")
    util, origin["util"] = _first_or((DEFAULT_UTIL, "default"),
        (req.util, "flag"), (cfg.server.gpu_memory_fraction, "config"), (log_num("gpu_memory_utilization"), "log"))
    kv_dtype, origin["kv_dtype"] = _first_or((KvDtype.AUTO, "default"),
        (req.kv_dtype, "flag"), (cfg.server.kv_cache_dtype, "config"),
        (_kv_dtype_from_log(facts.get("kv_cache_dtype")), "log"))
    block, origin["block_size"] = _first_or((DEFAULT_BLOCK_SIZE, "default"),
        (req.block_size, "flag"), (cfg.server.block_size, "config"), (_int_or_none(log_num("block_size")), "log"))
    tp, origin["tp"] = _first_or((1, "default"),
        (req.tp, "flag"), (cfg.server.tensor_parallel_size, "config"),
        (_int_or_none(log_num("tensor_parallel_size")), "log"))
    overhead, origin["overhead"] = _first_or((DEFAULT_OVERHEAD_GIB, "default"),
        (req.overhead_gib, "flag"), (cfg.gpu.overhead_gib, "config"))
    native = WeightsDtype(shape.native_dtype) if shape.native_dtype in {d.value for d in WeightsDtype} else None
    wdtype, origin["weights_dtype"] = _first(
        (req.weights_dtype, "flag"), (cfg.model.weights_dtype, "config"),
        (_weights_dtype_from_log(facts.get("quantization")), "log"),
        (_weights_dtype_from_log(_quant_suffix(str(served))) if served is not None else None, "served model name"),
        (native, "model"))
    weights_gib, origin["weights"] = _first((req.weights_gib, "flag"), (cfg.model.weights_gib, "config"))
    if weights_gib is None:
        wdtype = wdtype or WeightsDtype.BF16
        weights_bytes = estimate_weights_bytes(shape, wdtype)
        origin["weights"] = f"estimated from {(shape.params or 0) / 1e9:.2f} B parameters at {wdtype.value}"
        logged = log_num("weights_bytes")
        if logged is not None and logged > 0 and weights_bytes / tp + overhead * GIB >= util * vram * GIB:
            # The estimate cannot fit the card the engine did run on: its own loaded weights (per GPU) win.
            weights_bytes = int(logged * tp)
            wdtype = None
            weights_gib = weights_bytes / GIB
            origin["weights"] = (f"log: the engine loaded {logged / GIB:.2f} GiB per GPU (the estimate from the "
                                 "parameter count does not fit this card: quantized or split further than assumed)")
    else:
        weights_bytes = int(weights_gib * GIB)
    input_p95 = req.input_p95 if req.input_p95 is not None else cfg.workload.input_p95_tokens
    max_output = req.max_output if req.max_output is not None else cfg.limits.max_output_tokens
    workload = input_p95 + max_output if input_p95 is not None and max_output is not None else None
    tokens, origin["tokens"] = _required(_first(
        (req.max_model_len, "flag --max-model-len"), (cfg.server.max_model_len, "config server.max_model_len"),
        (_int_or_none(log_num("max_model_len") or log_num("tokens_per_request")), "log max_model_len"),
        (workload, "P95 input + max output"),
        (shape.max_position_embeddings, "the model's max_position_embeddings (vLLM's default max_model_len)")),
        "tokens per request unknown: pass --max-model-len, or --input-p95 and --max-output")
    inputs = BudgetInputs(
        shape=shape, vram_bytes=int(vram * GIB), util=util, weights_bytes=weights_bytes,
        overhead_bytes=int(overhead * GIB), tokens_per_request=tokens, kv_dtype=kv_dtype, block_size=block, tp=tp,
        weights_dtype=wdtype, weights_estimated=weights_gib is None,
    )
    return Sizing(inputs, origin, workload)


def _int_or_none(value: float | None) -> int | None:
    return int(value) if value is not None else None


def _kv_dtype_from_log(value: object) -> KvDtype | None:
    try:
        return KvDtype.parse(str(value)) if value is not None else None
    except ValueError:
        return None


def _weights_dtype_from_log(value: object) -> WeightsDtype | None:
    text = str(value).lower() if value is not None else ""
    for dtype in (WeightsDtype.AWQ, WeightsDtype.GPTQ, WeightsDtype.FP8):
        if text.startswith(dtype.value):
            return dtype
    if text.startswith(("w8a8", "int8", "w8a16")):
        return WeightsDtype.INT8
    return None


def _quant_suffix(served: str) -> str:
    """The quantization a checkpoint's name announces (`…-AWQ`, `…-FP8`, `…-quantized.w8a8`), if any."""
    m = re.search(r"[-_.](awq|gptq|fp8|w8a8|w8a16|int8)\b", served.lower())
    return m.group(1) if m else ""
