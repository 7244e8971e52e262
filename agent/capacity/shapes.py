"""Model shapes: what the KV-cache arithmetic needs to know about a model, from a preset or a config.json.

The numbers come from each model's published Hugging Face `config.json` and are read the way vLLM's
`ModelConfig` reads them (`get_total_num_kv_heads`, `get_head_size`, MLA latent size), so the budget
matches what the engine will allocate. Architectures whose per-request state is not a per-token KV
cache (Mamba / linear-attention hybrids) are refused: a wrong number is worse than none.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import ModelError
from agent.sources.bounded import read_small_text


@dataclass(frozen=True)
class ModelShape:
    """The attention geometry of a model plus what is needed to estimate its weights.

    `sliding_layers` of the `layers` keep only the last `sliding_window` tokens (Gemma-2 alternates
    local and global layers; Mistral-7B-v0.1 and Phi-3-mini-4k slide on every layer). MLA models
    (DeepSeek-V2/V3) cache one latent of `kv_lora_rank + qk_rope_head_dim` per token per layer, with no
    separate V and no per-head split, replicated on every tensor-parallel rank.
    """

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    attention_heads: int | None
    params: int | None = None
    embedding_params: int | None = None
    max_position_embeddings: int | None = None
    native_dtype: str = "bf16"
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    sliding_window: int | None = None
    sliding_layers: int = 0
    hf_id: str | None = None

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def full_layers(self) -> int:
        return self.layers - self.sliding_layers

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads each tensor-parallel rank holds: split, but at least one (replicated past kv_heads)."""
        return 1 if self.is_mla else max(1, self.kv_heads // tp)

    def kv_bytes_per_token_layer(self, dtype_bytes: int, tp: int = 1) -> int:
        """One token's KV in one layer on one GPU: K and V per head, or MLA's single shared latent."""
        if self.is_mla:
            return self.head_dim * dtype_bytes
        return 2 * self.kv_heads_per_gpu(tp) * self.head_dim * dtype_bytes


def _emb(vocab: int, hidden: int, tied: bool) -> int:
    """Embedding + LM-head parameters: quantization schemes (AWQ, GPTQ, FP8) leave these in 16 bit."""
    return vocab * hidden * (1 if tied else 2)


# Each entry is checked against the model's published config.json (see tests/unit/test_models.py for the
# per-token KV sizes they imply). Parameter counts are the totals reported on the model cards.
_PRESET_LIST: tuple[ModelShape, ...] = (
    ModelShape("llama-3.1-8b", 32, 8, 128, 32, 8_030_261_248, _emb(128256, 4096, False), 131072,
               hf_id="meta-llama/Llama-3.1-8B-Instruct"),
    ModelShape("llama-3.1-70b", 80, 8, 128, 64, 70_553_706_496, _emb(128256, 8192, False), 131072,
               hf_id="meta-llama/Llama-3.1-70B-Instruct"),
    ModelShape("llama-3.2-1b", 16, 8, 64, 32, 1_235_814_400, _emb(128256, 2048, True), 131072,
               hf_id="meta-llama/Llama-3.2-1B-Instruct"),
    ModelShape("llama-3.2-3b", 28, 8, 128, 24, 3_212_749_824, _emb(128256, 3072, True), 131072,
               hf_id="meta-llama/Llama-3.2-3B-Instruct"),
    ModelShape("llama-3.3-70b", 80, 8, 128, 64, 70_553_706_496, _emb(128256, 8192, False), 131072,
               hf_id="meta-llama/Llama-3.3-70B-Instruct"),
    ModelShape("qwen2.5-0.5b", 24, 2, 64, 14, 494_032_768, _emb(151936, 896, True), 32768,
               hf_id="Qwen/Qwen2.5-0.5B-Instruct"),
    ModelShape("qwen2.5-7b", 28, 4, 128, 28, 7_615_616_512, _emb(152064, 3584, False), 32768,
               hf_id="Qwen/Qwen2.5-7B-Instruct"),
    ModelShape("qwen2.5-14b", 48, 8, 128, 40, 14_770_033_664, _emb(152064, 5120, False), 32768,
               hf_id="Qwen/Qwen2.5-14B-Instruct"),
    ModelShape("qwen2.5-32b", 64, 8, 128, 40, 32_763_876_352, _emb(152064, 5120, False), 32768,
               hf_id="Qwen/Qwen2.5-32B-Instruct"),
    ModelShape("qwen2.5-72b", 80, 8, 128, 64, 72_706_203_648, _emb(152064, 8192, False), 32768,
               hf_id="Qwen/Qwen2.5-72B-Instruct"),
    ModelShape("qwen3-0.6b", 28, 8, 128, 16, 596_049_920, _emb(151936, 1024, True), 40960,
               hf_id="Qwen/Qwen3-0.6B"),
    ModelShape("qwen3-1.7b", 28, 8, 128, 16, 1_720_574_976, _emb(151936, 2048, True), 40960,
               hf_id="Qwen/Qwen3-1.7B"),
    ModelShape("qwen3-4b", 36, 8, 128, 32, 4_022_468_096, _emb(151936, 2560, True), 40960,
               hf_id="Qwen/Qwen3-4B"),
    ModelShape("qwen3-8b", 36, 8, 128, 32, 8_190_735_360, _emb(151936, 4096, False), 40960,
               hf_id="Qwen/Qwen3-8B"),
    ModelShape("qwen3-14b", 40, 8, 128, 40, 14_768_307_200, _emb(151936, 5120, False), 40960,
               hf_id="Qwen/Qwen3-14B"),
    ModelShape("qwen3-32b", 64, 8, 128, 64, 32_762_123_264, _emb(151936, 5120, False), 40960,
               hf_id="Qwen/Qwen3-32B"),
    ModelShape("qwen3-30b-a3b", 48, 4, 128, 32, 30_532_122_624, _emb(151936, 2048, False), 40960,
               hf_id="Qwen/Qwen3-30B-A3B"),
    ModelShape("qwen3-235b-a22b", 94, 4, 128, 64, 235_093_634_560, _emb(151936, 4096, False), 40960,
               hf_id="Qwen/Qwen3-235B-A22B"),
    ModelShape("mistral-7b", 32, 8, 128, 32, 7_248_023_552, _emb(32768, 4096, False), 32768,
               hf_id="mistralai/Mistral-7B-Instruct-v0.3"),
    ModelShape("mistral-7b-v0.1", 32, 8, 128, 32, 7_241_732_096, _emb(32000, 4096, False), 32768,
               sliding_window=4096, sliding_layers=32, hf_id="mistralai/Mistral-7B-v0.1"),
    ModelShape("mixtral-8x7b", 32, 8, 128, 32, 46_702_792_704, _emb(32000, 4096, False), 32768,
               hf_id="mistralai/Mixtral-8x7B-Instruct-v0.1"),
    ModelShape("gemma-2-9b", 42, 8, 256, 16, 9_241_705_984, _emb(256000, 3584, True), 8192,
               sliding_window=4096, sliding_layers=21, hf_id="google/gemma-2-9b-it"),
    ModelShape("gemma-2-27b", 46, 16, 128, 32, 27_227_128_320, _emb(256000, 4608, True), 8192,
               sliding_window=4096, sliding_layers=23, hf_id="google/gemma-2-27b-it"),
    ModelShape("phi-3-mini-4k", 32, 32, 96, 32, 3_821_079_552, _emb(32064, 3072, False), 4096,
               sliding_window=2047, sliding_layers=32, hf_id="microsoft/Phi-3-mini-4k-instruct"),
    ModelShape("phi-3-mini-128k", 32, 32, 96, 32, 3_821_079_552, _emb(32064, 3072, False), 131072,
               hf_id="microsoft/Phi-3-mini-128k-instruct"),
    ModelShape("phi-3-medium-4k", 40, 10, 128, 40, 13_960_238_080, _emb(32064, 5120, False), 4096,
               sliding_window=2047, sliding_layers=40, hf_id="microsoft/Phi-3-medium-4k-instruct"),
    ModelShape("deepseek-v2-lite", 27, 1, 576, 16, 15_706_484_224, _emb(102400, 2048, False), 163840,
               kv_lora_rank=512, qk_rope_head_dim=64, hf_id="deepseek-ai/DeepSeek-V2-Lite-Chat"),
    ModelShape("deepseek-v3", 61, 1, 576, 128, 671_026_419_200, _emb(129280, 7168, False), 163840,
               native_dtype="fp8", kv_lora_rank=512, qk_rope_head_dim=64, hf_id="deepseek-ai/DeepSeek-V3"),
)

PRESETS: dict[str, ModelShape] = {p.name: p for p in _PRESET_LIST}

# Names people type for the same model: the Hugging Face id, "-instruct" suffixes, dots dropped.
_ALIASES: dict[str, str] = {
    "llama-3-8b": "llama-3.1-8b",
    "llama-3-70b": "llama-3.1-70b",
    "qwen2-7b": "qwen2.5-7b",
    "deepseek-r1": "deepseek-v3",
    "mistral-7b-v0.3": "mistral-7b",
    "phi-3-mini": "phi-3-mini-4k",
    "phi-3.5-mini": "phi-3-mini-128k",
    "qwen3-coder-30b-a3b": "qwen3-30b-a3b",  # same attention shape (48 layers × 4 KV heads × 128)
    # DeepSeek-R1 distills keep their base model's attention shape (their config.json is the base's).
    "deepseek-r1-distill-qwen-7b": "qwen2.5-7b",
    "deepseek-r1-distill-qwen-14b": "qwen2.5-14b",
    "deepseek-r1-distill-qwen-32b": "qwen2.5-32b",
    "deepseek-r1-distill-llama-8b": "llama-3.1-8b",
    "deepseek-r1-distill-llama-70b": "llama-3.3-70b",
}


def _normalise(name: str) -> str:
    n = name.strip().lower().rsplit("/", 1)[-1]
    n = re.sub(r"[-_](instruct|chat|it|hf)(?=$|[-_])", "", n)
    return n.replace("_", "-").replace("meta-", "")


def find_preset(name: str) -> ModelShape:
    """Look a preset up by its name, an alias, or a Hugging Face id; unknown names list the closest ones."""
    key = _normalise(name)
    for candidate in (key, _ALIASES.get(key, "")):
        if candidate in PRESETS:
            return PRESETS[candidate]
    for preset in _PRESET_LIST:
        if preset.hf_id and preset.hf_id.lower() == name.strip().lower():
            return preset
    close = difflib.get_close_matches(key, [*PRESETS, *_ALIASES], n=4, cutoff=0.5)
    hint = f" Closest: {', '.join(close)}." if close else ""
    raise ModelError(
        f"unknown model preset {name!r}.{hint} Known presets: {', '.join(PRESETS)}. "
        "Or pass a local config.json path, or --layers/--kv-heads/--head-dim."
    )


# What quantizers append to a checkpoint's name: `-AWQ`, `-GPTQ-Int4`, `-FP8-Dynamic`, `-quantized.w8a8`,
# `-bnb-4bit`, `-AutoRound`, `-NVFP4`, `-AWQ-4bit` … The shape is the base model's.
_QUANT_SUFFIX = re.compile(
    r"[-_.](awq|gptq|int4|int8|fp8|fp4|nvfp4|mxfp4|w4a16|w8a8|w8a16|w4a8|gguf|quantized|bnb|4bit|8bit|autoround"
    r"|exl2|marlin|dynamic|fp8-dynamic)\b.*$"
)


def guess_preset(served_model: str) -> ModelShape | None:
    """The preset whose name or HF id matches a served model path, e.g. '/models/Qwen2.5-7B-Instruct-AWQ'."""
    tail = served_model.strip().rstrip("/").rsplit("/", 1)[-1].lower()
    # HF cache snapshots (`models--Org--Name/snapshots/<sha>`) name the model in a parent folder.
    for part in reversed(served_model.strip().rstrip("/").split("/")):
        if part.startswith("models--"):
            tail = part.rsplit("--", 1)[-1].lower()
            break
    tail = _QUANT_SUFFIX.sub("", tail)
    # `llama-3-1-70b` (a local folder named after the HF id with dots turned into dashes) is llama-3.1-70b.
    # A release-date suffix (`Qwen3-30B-A3B-Instruct-2507`) keeps the base model's shape.
    undated = re.sub(r"[-_](?:2[0-9])(?:0[1-9]|1[0-2])$", "", _normalise(tail))
    for candidate in (tail, re.sub(r"(?<=\d)-(\d)(?=-)", r".\1", tail), undated):
        try:
            return find_preset(candidate)
        except ModelError:
            continue
    return None


# config.json `model_type`s whose per-request state is not a plain per-token KV cache.
_HYBRID_TYPES = frozenset({
    "jamba", "mamba", "mamba2", "falcon_h1", "falcon_mamba", "nemotron_h", "zamba", "zamba2", "bamba",
    "granitemoehybrid", "qwen3_next", "minimax", "minimax_m1", "lfm2", "plamo2", "rwkv", "recurrent_gemma",
})
_HYBRID_KEYS = ("mamba_d_state", "ssm_cfg", "hybrid_override_pattern", "attn_layer_period",
                "linear_num_key_heads", "linear_key_head_dim")
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8": "fp8", "float8_e4m3fn": "fp8"}


def _weights_format(cfg: dict[str, Any]) -> str:
    """How the checkpoint stores its weights: a quantization method wins over the activation dtype."""
    quant = cfg.get("quantization_config")
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
    if method in ("awq", "gptq", "fp8"):
        return method
    if method in ("compressed-tensors", "bitsandbytes"):
        return "int8" if "8" in json.dumps(quant) else "awq"
    return _DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), "bf16")


def _int(cfg: dict[str, Any], path: Path, *keys: str) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    raise ModelError(f"{path}: missing or invalid field {' / '.join(keys)} (expected a positive integer)")


def load_hf_config(path: Path) -> ModelShape:
    """Read a Hugging Face config.json the way vLLM does, naming the field when one is missing."""
    try:
        raw = json.loads(read_small_text(path))
    except OSError as exc:
        raise ModelError(f"{path}: cannot read model config: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path}: not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ModelError(f"{path}: not a config.json: nested too deeply") from exc
    if not isinstance(raw, dict):
        raise ModelError(f"{path}: expected a JSON object (a Hugging Face config.json)")
    # Multimodal wrappers (Gemma-3, Llama-4, Mistral-3 …) keep the language model under text_config.
    cfg: dict[str, Any] = {**raw, **raw["text_config"]} if isinstance(raw.get("text_config"), dict) else raw
    model_type = str(cfg.get("model_type", "")).lower()
    layer_types = cfg.get("layer_types") if isinstance(cfg.get("layer_types"), list) else None
    if (model_type in _HYBRID_TYPES or any(k in cfg for k in _HYBRID_KEYS)
            or (layer_types and any(t not in ("full_attention", "sliding_attention") for t in layer_types))):
        raise ModelError(
            f"{path}: model_type {model_type or '?'} is a hybrid (Mamba / linear-attention) model; its "
            "per-request state is not a per-token KV cache, so this budget would be wrong. Use the "
            "engine's own start-up numbers instead (deepinfer-agent budget --from-log)."
        )
    layers = _int(cfg, path, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(cfg, path, "num_attention_heads", "n_head")
    name = str(cfg.get("_name_or_path") or path.parent.name or "config.json")
    common: dict[str, Any] = {
        "name": name, "layers": layers, "attention_heads": heads,
        "max_position_embeddings": cfg.get("max_position_embeddings"),
        "native_dtype": _weights_format(cfg),
    }
    hidden = cfg.get("hidden_size")
    vocab = cfg.get("vocab_size")
    if isinstance(hidden, int) and isinstance(vocab, int):
        common["embedding_params"] = _emb(vocab, hidden, bool(cfg.get("tie_word_embeddings", False)))
    if "kv_lora_rank" in cfg and cfg["kv_lora_rank"] is not None:
        rank = _int(cfg, path, "kv_lora_rank")
        rope = _int(cfg, path, "qk_rope_head_dim")
        return ModelShape(kv_heads=1, head_dim=rank + rope, kv_lora_rank=rank, qk_rope_head_dim=rope, **common)
    if cfg.get("multi_query") is True:
        kv_heads = 1
    elif isinstance(cfg.get("attn_config"), dict) and "kv_n_heads" in cfg["attn_config"]:
        kv_heads = _int(cfg["attn_config"], path, "kv_n_heads")
    elif any(k in cfg for k in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")):
        kv_heads = _int(cfg, path, "n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")
    else:
        kv_heads = heads
    if isinstance(cfg.get("head_dim"), int):
        head_dim = int(cfg["head_dim"])
    elif isinstance(hidden, int):
        head_dim = hidden // heads
    else:
        raise ModelError(f"{path}: missing field head_dim or hidden_size (needed for the per-token KV size)")
    sliding_window, sliding_layers = _sliding(cfg, model_type, layers, layer_types)
    return ModelShape(kv_heads=kv_heads, head_dim=head_dim, sliding_window=sliding_window,
                      sliding_layers=sliding_layers, **common)


def _sliding(cfg: dict[str, Any], model_type: str, layers: int,
             layer_types: list[Any] | None) -> tuple[int | None, int]:
    """How many layers keep only a window of tokens, following each family's config convention."""
    window = cfg.get("sliding_window")
    if not isinstance(window, int) or window <= 0:
        return None, 0
    max_pos = cfg.get("max_position_embeddings")
    if isinstance(max_pos, int) and window >= max_pos:
        return None, 0  # a window as long as the context slides nothing (Phi-3-128k: 262144)
    if layer_types:
        return window, sum(1 for t in layer_types if t == "sliding_attention")
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if not cfg.get("use_sliding_window"):
            return None, 0
        first = cfg.get("max_window_layers", layers)
        return window, max(0, layers - int(first))
    if model_type == "gemma2":
        return window, (layers + 1) // 2  # even layers slide, odd layers are global
    if model_type in ("gemma3", "gemma3_text"):
        pattern = int(cfg.get("sliding_window_pattern", 6))
        return window, layers - layers // pattern
    return window, layers
