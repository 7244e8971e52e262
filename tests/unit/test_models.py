"""Presets match their published configs; config.json is read the way vLLM reads it; hybrids are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.capacity.shapes import PRESETS, find_preset, guess_preset, load_hf_config
from agent.errors import ModelError

# Per-token KV bytes at 16 bit, all layers, from each model's published config.json.
EXPECTED_KV_BYTES_PER_TOKEN = {
    "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,  # 128 KiB
    "llama-3.1-70b": 2 * 80 * 8 * 128 * 2,  # 320 KiB
    "qwen2.5-7b": 2 * 28 * 4 * 128 * 2,  # 56 KiB
    "qwen2.5-72b": 2 * 80 * 8 * 128 * 2,
    "qwen3-8b": 2 * 36 * 8 * 128 * 2,
    "mistral-7b": 2 * 32 * 8 * 128 * 2,
    "mixtral-8x7b": 2 * 32 * 8 * 128 * 2,
    "gemma-2-9b": 2 * 42 * 8 * 256 * 2,
    "gemma-2-27b": 2 * 46 * 16 * 128 * 2,
    "phi-3-mini-4k": 2 * 32 * 32 * 96 * 2,
    "deepseek-v2-lite": 27 * 576 * 2,
    "deepseek-v3": 61 * 576 * 2,
}


def kv_bytes_per_token(name: str) -> int:
    p = PRESETS[name]
    per_layer = p.head_dim * 2 if p.is_mla else 2 * p.kv_heads * p.head_dim * 2
    return p.layers * per_layer


@pytest.mark.parametrize("name", sorted(EXPECTED_KV_BYTES_PER_TOKEN))
def test_preset_kv_per_token(name: str) -> None:
    assert kv_bytes_per_token(name) == EXPECTED_KV_BYTES_PER_TOKEN[name]


def test_every_preset_is_consistent() -> None:
    for p in PRESETS.values():
        assert p.params and p.embedding_params and p.params > p.embedding_params, p.name
        assert p.is_mla or (p.attention_heads is not None and p.attention_heads % p.kv_heads == 0), p.name
        assert 0 <= p.sliding_layers <= p.layers, p.name
        assert p.hf_id, p.name


def test_required_families_have_presets() -> None:
    for name in ("llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b",
                 "qwen3-8b", "mistral-7b", "mixtral-8x7b", "gemma-2-9b", "gemma-2-27b", "phi-3-mini-4k",
                 "deepseek-v2-lite", "deepseek-v3"):
        assert name in PRESETS


@pytest.mark.parametrize(
    ("typed", "expected"),
    [("Qwen2.5-7B", "qwen2.5-7b"), ("qwen2.5-7b-instruct", "qwen2.5-7b"),
     ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
     ("llama-3-8b", "llama-3.1-8b"), ("deepseek-r1", "deepseek-v3")],
)
def test_find_preset_accepts_common_spellings(typed: str, expected: str) -> None:
    assert find_preset(typed).name == expected


def test_unknown_preset_lists_closest_names() -> None:
    with pytest.raises(ModelError) as exc:
        find_preset("qwen2.5-8b")
    message = str(exc.value)
    assert "unknown model preset 'qwen2.5-8b'" in message
    assert "Closest:" in message and "qwen2.5-7b" in message.split("Known")[0]


def test_guess_preset_from_served_model_paths() -> None:
    assert guess_preset("/models/Qwen2.5-7B-Instruct-AWQ").name == "qwen2.5-7b"  # type: ignore[union-attr]
    assert guess_preset("Qwen/Qwen3-0.6B").name == "qwen3-0.6b"  # type: ignore[union-attr]
    assert guess_preset("/models/my-finetune") is None


def write(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


LLAMA_8B = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "hidden_size": 4096, "vocab_size": 128256, "max_position_embeddings": 131072,
            "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def test_llama_config_json(tmp_path: Path) -> None:
    shape = load_hf_config(write(tmp_path, LLAMA_8B))
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (32, 8, 128)
    assert shape.embedding_params == 2 * 128256 * 4096
    assert shape.sliding_layers == 0 and not shape.is_mla


def test_explicit_head_dim_wins(tmp_path: Path) -> None:
    # Qwen3 / Gemma set head_dim independently of hidden_size / heads.
    shape = load_hf_config(write(tmp_path, {**LLAMA_8B, "hidden_size": 2560, "head_dim": 128}))
    assert shape.head_dim == 128


def test_mha_without_kv_heads_uses_attention_heads(tmp_path: Path) -> None:
    cfg = {k: v for k, v in LLAMA_8B.items() if k != "num_key_value_heads"}
    assert load_hf_config(write(tmp_path, cfg)).kv_heads == 32


def test_falcon_multi_query(tmp_path: Path) -> None:
    cfg = {"model_type": "falcon", "num_hidden_layers": 32, "num_attention_heads": 71, "hidden_size": 4544,
           "multi_query": True}
    assert load_hf_config(write(tmp_path, cfg)).kv_heads == 1


def test_deepseek_mla_config(tmp_path: Path) -> None:
    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "num_attention_heads": 128,
           "num_key_value_heads": 128, "hidden_size": 7168, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
           "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280, "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "fp8"}}
    shape = load_hf_config(write(tmp_path, cfg))
    assert shape.is_mla and shape.head_dim == 576 and shape.kv_heads == 1
    assert shape.native_dtype == "fp8"


def test_gemma2_alternates_sliding_layers(tmp_path: Path) -> None:
    cfg = {"model_type": "gemma2", "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
           "head_dim": 256, "hidden_size": 3584, "sliding_window": 4096, "max_position_embeddings": 8192}
    shape = load_hf_config(write(tmp_path, cfg))
    assert (shape.sliding_window, shape.sliding_layers) == (4096, 21)


def test_layer_types_count_sliding_layers(tmp_path: Path) -> None:
    types = ["sliding_attention"] * 5 + ["full_attention"]
    cfg = {**LLAMA_8B, "num_hidden_layers": 6, "sliding_window": 1024, "layer_types": types}
    assert load_hf_config(write(tmp_path, cfg)).sliding_layers == 5


def test_qwen2_sliding_window_only_when_enabled(tmp_path: Path) -> None:
    cfg = {**LLAMA_8B, "model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False}
    assert load_hf_config(write(tmp_path, cfg)).sliding_layers == 0


def test_window_as_long_as_context_slides_nothing(tmp_path: Path) -> None:
    cfg = {**LLAMA_8B, "model_type": "phi3", "sliding_window": 262144}
    assert load_hf_config(write(tmp_path, cfg)).sliding_window is None


def test_multimodal_text_config(tmp_path: Path) -> None:
    cfg = {"model_type": "mistral3", "text_config": {**LLAMA_8B, "num_hidden_layers": 40}}
    assert load_hf_config(write(tmp_path, cfg)).layers == 40


@pytest.mark.parametrize(
    "cfg",
    [{"model_type": "jamba", "num_hidden_layers": 32, "num_attention_heads": 32},
     {"model_type": "qwen3_next", "num_hidden_layers": 48, "num_attention_heads": 16},
     {**LLAMA_8B, "model_type": "custom", "layer_types": ["full_attention", "mamba"]},
     {**LLAMA_8B, "model_type": "custom", "mamba_d_state": 128}],
    ids=["jamba", "qwen3-next", "layer-types-mamba", "mamba-keys"],
)
def test_hybrid_models_are_refused(tmp_path: Path, cfg: dict[str, Any]) -> None:
    with pytest.raises(ModelError, match="hybrid"):
        load_hf_config(write(tmp_path, cfg))


def test_missing_field_is_named(tmp_path: Path) -> None:
    cfg = {k: v for k, v in LLAMA_8B.items() if k != "num_hidden_layers"}
    with pytest.raises(ModelError, match="missing or invalid field num_hidden_layers"):
        load_hf_config(write(tmp_path, cfg))


def test_missing_head_dim_and_hidden_size_is_named(tmp_path: Path) -> None:
    cfg = {k: v for k, v in LLAMA_8B.items() if k != "hidden_size"}
    with pytest.raises(ModelError, match="head_dim or hidden_size"):
        load_hf_config(write(tmp_path, cfg))


def test_malformed_json_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"num_hidden_layers": 32,')
    with pytest.raises(ModelError, match="not valid JSON"):
        load_hf_config(bad)
    with pytest.raises(ModelError, match="cannot read"):
        load_hf_config(tmp_path / "absent.json")
    bad.write_text("[1, 2]")
    with pytest.raises(ModelError, match="expected a JSON object"):
        load_hf_config(bad)
