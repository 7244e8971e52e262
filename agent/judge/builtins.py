"""The `to` calculators a rule's action names: each returns the recommended value and its arithmetic.

Built-ins are the only arithmetic rules can ask for, so a recommendation is always one of these
formulas over the evidence, the capacity and the configured value — never an expression a rule file
wrote. Each returns `(value, arithmetic)`; `(None, why)` when an input is missing, and the finding then
names the knob and the direction without a number. docs/rules.md lists them with their formulas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent.capacity.capacity import Capacity
from agent.judge.sizing import sizing

KV_TARGET_RATIO = 0.90  # fill KV to this, not to 1.0: the headroom new prefills and the last block need


@dataclass(frozen=True)
class Context:
    """What a built-in may read: the window's evidence, the engine's capacity, the configured value."""

    evidence: Mapping[str, float | None]
    capacity: Capacity | None
    current: float | None
    factor: float = 1.0
    of: str | None = None
    config: Mapping[str, float | None] = field(default_factory=dict)


Result = tuple[float | None, str]


def _fmt(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:,.0f}" if abs(x) >= 100 or float(x).is_integer() else f"{x:.3g}"


def capacity_bound(ctx: Context) -> Result:
    """The governing max concurrency (agent/judge/sizing.py): the expected case (P95 input + output cap)
    when the workload is known, else the worst case at max_model_len — each the engine's figure once it
    printed one, else the paper budget. Both cases are in the arithmetic. Below one request there is no
    max_num_seqs to give (0 serves nothing): None, and the knob is max_model_len."""
    cap = ctx.capacity
    size = sizing(cap, ctx.config.get("config.workload_tokens"))
    if cap is None or size.governing is None:
        return None, "no capacity known (config lacks the model/GPU and the engine printed no KV-cache size)"
    if size.governing < 1:
        return None, (f"the KV cache holds less than one request of {_fmt(size.governing_tokens)} tokens: "
                      "no max_num_seqs serves it; lower max_model_len (see capacity_below_one_request)")
    basis = cap.governs or "paper"
    text = (f"capacity bound = {size.governing} requests at {_fmt(size.governing_tokens)} tokens each "
            f"({basis}")
    if basis == "engine" and cap.engine_max_concurrency is not None and size.governs == "worst":
        text += f": floor({cap.engine_max_concurrency:.2f}x)"
    if cap.paper_max_concurrency is not None and basis == "engine":
        text += f"; paper budget {cap.paper_max_concurrency}"
    worst = ") at max_model_len, the worst case: no workload known"
    text += f"); {size.text()}" if size.expected is not None else worst
    return float(size.governing), text


def scale_by_kv_headroom(ctx: Context) -> Result:
    """floor(running × 0.90 ÷ KV), never above the capacity bound: what the observed KV use per request says
    fits with 10 % headroom. From the samples where the queue formed while every slot ran (`queued_*`:
    the fewest running against the fullest KV, the cautious pair), else the window's running max and KV p95."""
    running = ctx.evidence.get("queued_running_min") or ctx.evidence.get("running_max")
    kv = ctx.evidence.get("queued_kv_usage_ratio_max") or ctx.evidence.get("kv_usage_ratio_p95")
    if not running or not kv:
        return None, "needs running and KV usage in the evidence"
    raw = math.floor(running * KV_TARGET_RATIO / kv)
    text = f"floor({_fmt(running)} running × {KV_TARGET_RATIO} ÷ KV {kv:.2f}) = {raw}"
    bound, bound_text = capacity_bound(ctx)
    if bound is not None and raw > bound:
        return bound, f"{text}, capped at the {bound_text}"
    return float(max(raw, 1)), text


def kv_holds_at_observed_length(ctx: Context) -> Result:
    """floor(engine KV-cache tokens ÷ block-rounded tokens per request), the request length being the longer
    of the observed p95 per running request and the budget's tokens per request.

    The same per-request KV as the capacity (and so as max_num_seqs_above_bound): during a storm the
    requests that survive are the short ones, so the observed length alone says more fit than do — one
    knob, one number. Longer requests than the budget's make it lower. Without the engine's KV size: the
    capacity bound."""
    observed = ctx.evidence.get("request_tokens_p95")
    cap = ctx.capacity
    kv_tokens = cap.engine_kv_cache_tokens if cap is not None else None
    length_of_case = sizing(cap, ctx.config.get("config.workload_tokens")).governing_tokens
    budget = float(length_of_case) if length_of_case else None
    if not kv_tokens or not (observed or budget):
        return capacity_bound(ctx)
    assert cap is not None
    length = max(observed or 0.0, budget or 0.0)
    which = "observed p95 per running request" if observed and observed > (budget or 0) else "the budget's"
    block = cap.block_size
    rounded = math.ceil(length / block) * block
    value = math.floor(kv_tokens / rounded + 1e-9)
    if value < 1:
        return None, (f"floor({_fmt(kv_tokens)} KV tokens ÷ {_fmt(rounded)}) = 0: less than one request fits; "
                      "lower max_model_len")
    text = (f"floor({_fmt(kv_tokens)} KV tokens ÷ {_fmt(rounded)} tokens per request ({which}, "
            f"{_fmt(length)} rounded up to {block}-token blocks)) = {value}")
    if observed is not None and budget is not None and observed < budget:
        text += f"; the observed {_fmt(observed)} is shorter (the survivors), so the budget's length governs"
    return float(value), text


def observed_plus_margin(ctx: Context) -> Result:
    """The evidence value `of` × `factor` (e.g. 1.2 for a 20 % margin), rounded up."""
    if ctx.of is None or ctx.evidence.get(ctx.of) is None:
        return None, f"no {ctx.of} observed in the window"
    observed = ctx.evidence[ctx.of]
    assert observed is not None
    value = math.ceil(observed * ctx.factor)
    return float(value), f"{ctx.of} {_fmt(observed)} × {ctx.factor:g} = {value}"


RAISE_STEP = 1.5  # observed_p99_plus_margin without a usable observation: the configured value × this


def latency_ms_plus_margin(ctx: Context) -> Result:
    """A latency in the evidence (`of`, seconds: e.g. `e2e_latency_seconds_p95`) × `factor`, in ms rounded up:
    a timeout that the requests actually seen fit in, with a margin."""
    name = ctx.of or "e2e_latency_seconds_p99"
    observed = ctx.evidence.get(name)
    if observed is None:
        return None, f"no {name} observed in the window (the engine's /metrics is not scraped)"
    value = math.ceil(observed * 1000.0 * ctx.factor)
    return float(value), f"{name} {observed:.3g} s × {ctx.factor:g} = {value:,} ms"


def observed_p99_plus_margin(ctx: Context) -> Result:
    """Raise a request timeout to what the requests that finished took: end-to-end p99 (scraped, `of` or
    `e2e_latency_seconds_p99`) × `factor`, in ms. Without a scraped p99, or when that is not above the
    configured value (requests the deadline cut short are missing from the engine's histogram), the
    configured value × 1.5."""
    value, text = latency_ms_plus_margin(ctx)
    if value is not None and (ctx.current is None or value > ctx.current):
        return value, text
    if ctx.current is None:
        return None, f"{text}; the current value is not configured" if value is not None else text
    step = float(round(ctx.current * RAISE_STEP))
    why = (f"{text} is not above the current {_fmt(ctx.current)} ms" if value is not None
           else text)
    return step, f"{why}: {_fmt(ctx.current)} × {RAISE_STEP:g} = {_fmt(step)}"


def timeout_for_output_cap(ctx: Context) -> Result:
    """Raise a request timeout that the requests' durations ride (p99 within 10 % of it) to what a request
    at the output cap needs: max_output_tokens ÷ the per-request generation rate (the stats' generation
    throughput ÷ running, window means) × `factor`, in ms — or to the durations' p99 × `factor` when that is
    longer (prefill and queueing count too) or the engine logs no throughput. The arithmetic also gives the
    other answer: the output cap that fits the current deadline at that rate (90 % of it)."""
    p99 = ctx.evidence.get("request_duration_seconds_p99")
    cap = ctx.config.get("config.max_output_tokens")
    tps, running = ctx.evidence.get("gen_tps_mean"), ctx.evidence.get("running_mean")
    if not (cap and tps and running):
        if p99 is None:
            return None, "no request durations or generation throughput in the window"
        value = math.ceil(round(p99 * 1000.0 * ctx.factor, 6))
        return float(value), (f"durations p99 {p99:.3g} s × {ctx.factor:g} = {value:,} ms (no output cap or "
                              "generation throughput known: from the durations alone)")
    rate = tps / running
    at_cap = cap / rate
    text = (f"a request at the {_fmt(cap)}-token cap needs {_fmt(cap)} ÷ ({_fmt(tps)} tokens/s ÷ {_fmt(running)} "
            f"running = {rate:.4g} tokens/s per request) = {at_cap:.4g} s")
    need = at_cap if p99 is None or at_cap >= p99 else p99
    value = math.ceil(round(need * 1000.0 * ctx.factor, 6))  # 40.96 s × 1.2 is 49,152 ms, not 49,153
    text += "; " if need == at_cap else "; the durations' p99 is longer: "
    text += f"{need:.4g} s × {ctx.factor:g} = {value:,} ms"
    if ctx.current:
        fits = math.floor(ctx.current / 1000.0 * 0.9 * rate)
        text += f"; or cap outputs at {_fmt(ctx.current / 1000.0)} s × 0.9 × {rate:.4g} tokens/s = {fits:,} tokens"
    return float(value), text


def scale_current(ctx: Context) -> Result:
    """The configured value × `factor` (above 1 raises, below 1 lowers), rounded."""
    if ctx.current is None:
        return None, "the knob's current value is not configured; set it in the config to get a number"
    raw = ctx.current * ctx.factor
    value = float(round(raw)) if ctx.current >= 10 else round(raw, 2)  # ratios keep two decimals
    return value, f"{_fmt(ctx.current)} × {ctx.factor:g} = {_fmt(value)}"


def engine_figure(ctx: Context) -> Result:
    """The engine's own max concurrency, shown beside the paper's (for the review of the inputs)."""
    cap = ctx.capacity
    if cap is None or cap.engine_max_concurrency is None:
        return None, "the engine reported no capacity"
    ratio = cap.disagreement_ratio
    return float(cap.max_concurrency or 0), (
        f"engine {cap.engine_max_concurrency:.2f}x vs paper {cap.paper_max_concurrency} at "
        f"{_fmt(cap.tokens_per_request)} tokens per request ({(ratio or 0) * 100:+.0f} %)")


def budget_tokens_per_request(ctx: Context) -> Result:
    """The tokens per request the budget was sized for: a session longer than this breaks the bound."""
    cap = ctx.capacity
    if cap is None or not cap.tokens_per_request:
        return None, "the budget's tokens per request is not known"
    return float(cap.tokens_per_request), (f"the budget assumes {cap.tokens_per_request:,} tokens per request; "
                                           f"capacity {cap.max_concurrency} holds only at that length")


def max_model_len_that_fits(ctx: Context) -> Result:
    """The longest request the KV cache holds, rounded down to whole blocks — the knob when not even one
    request fits. In order of trust: the engine's own estimate ("the estimated maximum model length is N"),
    the KV tokens a start-up error named, the error's needed vs available KV bytes scaled from its
    max_model_len, the engine's KV-cache size, the paper budget's usable KV ÷ bytes per token."""
    cap, ev, refs = ctx.capacity, ctx.evidence, ctx.config
    block = cap.block_size if cap is not None else 16
    estimated = refs.get("engine.estimated_max_model_len")
    tokens: float | None = None
    if estimated:
        tokens, why = estimated, f"the engine's estimated maximum model length {_fmt(estimated)}"
    elif ev.get("startup_kv_tokens"):
        tokens = ev["startup_kv_tokens"]
        why = f"the {_fmt(tokens)} tokens the start-up error says the KV cache stores"
    elif ev.get("startup_need_bytes") and ev.get("startup_avail_bytes") and ev.get("startup_max_model_len"):
        need, avail, length = ev["startup_need_bytes"], ev["startup_avail_bytes"], ev["startup_max_model_len"]
        assert need is not None and avail is not None and length is not None
        tokens = length * avail / need
        why = (f"max_model_len {_fmt(length)} × available {avail / 2**30:.2f} GiB ÷ needed {need / 2**30:.2f} GiB "
               f"= {_fmt(tokens)}")
    elif cap is not None and cap.engine_kv_cache_tokens:
        tokens, why = cap.engine_kv_cache_tokens, f"the engine's KV cache of {_fmt(cap.engine_kv_cache_tokens)} tokens"
    elif cap is not None and cap.usable_kv_bytes and cap.kv_bytes_per_token:
        tokens = cap.usable_kv_bytes / cap.kv_bytes_per_token
        why = (f"usable KV {cap.usable_kv_bytes / 2**30:.2f} GiB ÷ {cap.kv_bytes_per_token:,} bytes per token "
               f"= {_fmt(tokens)} (paper budget)")
    if tokens is None:
        return None, "no KV size known (no start-up figure, no budget inputs)"
    value = math.floor(tokens / block) * block
    if value < block:
        return None, f"{why}: less than one {block}-token block; quantize the weights or use FP8 KV"
    return float(value), f"{why}, rounded down to {block}-token blocks = {value:,}"


UTIL_CEILING = 0.95  # above this the card has no room for the CUDA context and the activation peak


def utilization_that_fits(ctx: Context) -> Result:
    """The gpu_memory_utilization that leaves the KV cache room for one request at max_model_len: (what the
    engine needs outside the KV cache + one request's KV) ÷ the card, rounded up to 0.01. From vLLM's
    profile (total memory, non-KV memory) where it printed one; SGLang's own figures (its fraction is of the
    memory free before loading and covers the weights and the KV cache: (weights + one request's KV) ÷ that
    free memory); else the paper budget's fixed costs."""
    refs, cap = ctx.config, ctx.capacity
    outside = "outside the KV cache"
    if refs.get("engine.total_gpu_memory_bytes"):  # vLLM's profile: the card, and all that is not KV cache
        total, fixed = refs.get("engine.total_gpu_memory_bytes"), refs.get("engine.non_kv_cache_bytes")
    elif refs.get("engine.device_free_bytes") and refs.get("engine.weights_bytes"):
        # SGLang: --mem-fraction-static is of the memory free before loading, and holds weights + KV cache
        total, fixed = refs.get("engine.device_free_bytes"), refs.get("engine.weights_bytes")
        outside = "of weights"
    else:
        total, fixed = (cap.vram_bytes, cap.fixed_bytes) if cap is not None else (None, None)
    per_token = cap.kv_bytes_per_token if cap is not None else None
    length = refs.get("config.max_model_len") or (cap.tokens_per_request if cap is not None else None)
    if not total or fixed is None or not per_token or not length:
        return None, "needs the card's memory, the memory outside the KV cache and the KV bytes per token"
    need = fixed + per_token * length
    value = math.ceil(need / total * 100) / 100
    text = (f"({fixed / 2**30:.2f} GiB {outside} + {_fmt(length)} tokens × {per_token:,} bytes) ÷ "
            f"{total / 2**30:.2f} GiB = {need / total:.3f}, rounded up = {value:.2f}")
    if value > UTIL_CEILING:
        return None, f"{text}: above {UTIL_CEILING} — no utilization fits; quantize the weights, use FP8 KV, " \
            "add tensor parallelism, or lower max_model_len"
    return value, text


def warmup_survivor(ctx: Context) -> Result:
    """The max_num_seqs that survives the sampler warm-up: vLLM warms the sampler with max_num_seqs dummy
    requests (its logits are max_num_seqs × vocabulary floats), so half the count that ran out of memory,
    never above the capacity bound."""
    dummy = ctx.evidence.get("warmup_dummy_requests") or ctx.current
    if not dummy:
        return None, "neither the dummy-request count nor max_num_seqs is known"
    value = max(1, math.floor(dummy / 2))
    text = f"floor({_fmt(dummy)} dummy requests ÷ 2) = {value}"
    bound, bound_text = capacity_bound(ctx)
    if bound is not None and bound < value:
        return bound, f"{text}, capped at the {bound_text}"
    return float(value), text


def prefill_survivor(ctx: Context) -> Result:
    """TGI's --max-batch-prefill-tokens that survives its warm-up: the warm-up runs one prefill batch of that
    many tokens and its activation memory is proportional to them, so half the tokens that ran out of memory
    (`Not enough memory to handle N prefill tokens`), else half the configured value. The memory free at
    warm-up is not in the log, so the exact count that fits is not known."""
    failed = ctx.evidence.get("prefill_tokens_failed") or ctx.current
    if not failed:
        return None, "neither the prefill tokens that failed nor --max-batch-prefill-tokens is known"
    value = max(1, math.floor(failed / 2))
    return float(value), (f"floor({_fmt(failed)} prefill tokens ÷ 2) = {value:,}; keep it at or above "
                          "--max-input-tokens (TGI refuses less), or lower that too")


def replicas_for_demand(ctx: Context) -> Result:
    """How many nodes like this one the demand needs: ceil((running + waiting) ÷ the capacity bound), in the
    samples where the node was full."""
    running = ctx.evidence.get("full_running_max")
    waiting = ctx.evidence.get("full_waiting_max")
    cap = ctx.capacity
    bound = cap.max_concurrency if cap is not None else None
    if running is None or waiting is None or not bound:
        return None, "needs the running and waiting peaks of the full samples and a capacity bound"
    value = math.ceil((running + waiting) / bound)
    return float(value), f"ceil(({_fmt(running)} running + {_fmt(waiting)} waiting) ÷ capacity {bound}) = {value}"


LLAMACPP_PAD = 256  # llama.cpp pads n_ctx to 256 cells: a -c that is a multiple of it is used as given
Q8_0_RATIO = 34 / 64  # q8_0 stores 32 values in 34 bytes where f16 takes 64


def _gib(x: float) -> str:
    return f"{x / 2**30:.2f} GiB"


def context_that_fits(ctx: Context) -> Result:
    """llama.cpp's `-c` that fits the card, from what its log printed before the failure. Bytes per cell =
    the buffer's size ÷ n_ctx (the method's 2 × layers × KV heads × head dim × bytes, as llama.cpp sized it:
    K and V of every layer on that device). The KV buffer failed: the room is the device's free memory less
    the weights on it, 90 % of it for the cache (the compute buffer comes next and is not printed yet), else
    the paper budget's usable KV; the compute buffer failed: the room is free − weights − that buffer, else
    the cache must shrink by at least the buffer's size. Rounded down to llama.cpp's 256-cell padding."""
    refs, cap = ctx.config, ctx.capacity
    n_ctx = refs.get("engine.kv_cache_tokens")
    kv_failed, graph = refs.get("engine.kv_buffer_failed_bytes"), refs.get("engine.compute_buffer_failed_bytes")
    free, weights = refs.get("engine.device_free_bytes"), refs.get("engine.weights_bytes")
    if not n_ctx:
        return None, "the log printed no n_ctx"
    if kv_failed:
        per_cell = kv_failed / n_ctx
        head = f"{_gib(kv_failed)} KV buffer ÷ n_ctx {_fmt(n_ctx)} = {per_cell:,.0f} bytes per cell"
        if free and weights:
            room = (free - weights) * KV_TARGET_RATIO
            how = f"({_gib(free)} free − {_gib(weights)} weights) × {KV_TARGET_RATIO} = {_gib(room)} for the cache"
        elif cap is not None and cap.usable_kv_bytes:
            room, how = float(cap.usable_kv_bytes), f"the paper budget's usable KV {_gib(cap.usable_kv_bytes)}"
        else:
            return None, f"{head}; the log printed no free memory and no budget is configured"
    elif graph:
        kv_bytes = refs.get("engine.kv_cache_bytes")
        if not kv_bytes:
            return None, "the compute buffer failed, and the log printed no KV-cache size"
        per_cell = kv_bytes / n_ctx
        head = f"{_gib(kv_bytes)} KV cache ÷ n_ctx {_fmt(n_ctx)} = {per_cell:,.0f} bytes per cell"
        if free and weights:
            room = free - weights - graph
            how = (f"{_gib(free)} free − {_gib(weights)} weights − {_gib(graph)} compute buffer = {_gib(room)} "
                   "for the cache")
        else:
            room = kv_bytes - graph
            how = f"the cache shrunk by the {_gib(graph)} compute buffer it lacked: {_gib(room)}"
    else:
        return None, "no start-up buffer failure was logged"
    cells = room / per_cell if room > 0 else 0.0
    value = math.floor(cells / LLAMACPP_PAD) * LLAMACPP_PAD
    text = f"{head}; {how}; floor({_gib(max(room, 0))} ÷ {per_cell:,.0f} ÷ {LLAMACPP_PAD}) × {LLAMACPP_PAD}"
    q8 = math.floor(cells / Q8_0_RATIO / LLAMACPP_PAD) * LLAMACPP_PAD
    if value >= n_ctx:  # the figures say it fits: something outside them (another process) holds the memory
        return None, (f"{text} = {value:,}, not below n_ctx {_fmt(n_ctx)}: by the log's figures it fits, so "
                      "something else holds the GPU's memory (another process?); lower -c below it")
    if value < LLAMACPP_PAD:
        return None, (f"{text} = {value}: not one padded block of cells fits; offload fewer layers (-ngl) or use "
                      "a smaller quantization")
    q8_text = f"the -c {_fmt(n_ctx)} asked for fits" if q8 >= n_ctx else f"-c {q8:,} fits"
    return float(value), (f"{text} = {value:,} cells (-c {value}); or, from an f16 cache, with -ctk q8_0 -ctv "
                          f"q8_0 ({Q8_0_RATIO:.3f} of the bytes) {q8_text} (room for {q8:,})")


BUILTINS: dict[str, Callable[[Context], Result]] = {
    "capacity_bound": capacity_bound,
    "scale_by_kv_headroom": scale_by_kv_headroom,
    "kv_holds_at_observed_length": kv_holds_at_observed_length,
    "observed_plus_margin": observed_plus_margin,
    "observed_p99_plus_margin": observed_p99_plus_margin,
    "timeout_for_output_cap": timeout_for_output_cap,
    "latency_ms_plus_margin": latency_ms_plus_margin,
    "scale_current": scale_current,
    "engine_figure": engine_figure,
    "budget_tokens_per_request": budget_tokens_per_request,
    "max_model_len_that_fits": max_model_len_that_fits,
    "utilization_that_fits": utilization_that_fits,
    "warmup_survivor": warmup_survivor,
    "replicas_for_demand": replicas_for_demand,
    "context_that_fits": context_that_fits,
    "prefill_survivor": prefill_survivor,
}
