"""Computed vs engine-reported budgets, on real start-up logs, with the differences explained."""

from __future__ import annotations

from pathlib import Path

from agent.capacity.budget import compute
from agent.capacity.inputs import SizingRequest, resolve
from agent.capacity.reconcile import latest, reconcile
from parsers.vllm import startup_facts

DATA = Path(__file__).parent.parent / "data" / "startup"


def rows_and_notes(log: str, request: SizingRequest) -> tuple[dict[str, tuple[float | None, float | None]],
                                                              list[str]]:
    facts = latest(startup_facts((DATA / log).read_text().splitlines()))
    budget = compute(resolve(request, None, facts).inputs)
    rec = reconcile(budget, facts)
    return {r.label: (r.computed, r.engine) for r in rec.rows}, list(rec.explanations)


def test_v0_log_matches_llama_8b_shape_and_explains_the_activation_peak() -> None:
    rows, notes = rows_and_notes("vllm-0.6-v0-llama8b.log", SizingRequest(overhead_gib=1.6))
    computed, engine = rows["KV bytes per token (per GPU)"]
    assert computed == 131072 and engine is not None and abs(engine - computed) / computed < 0.01
    assert rows["util × VRAM"] == (int(0.9 * 39.5 * 2**30), round(35.55 * 2**30))
    overhead = next(n for n in notes if n.startswith("overhead differs"))
    assert "activation peak 9.37 GiB" in overhead and "non-torch memory 0.10 GiB" in overhead
    assert any("CUDA graphs took 0.31 GiB" in n for n in notes)
    assert rows["max concurrency at 8192 tokens"][1] == 11.12


def test_wrong_model_is_flagged_by_per_token_size() -> None:
    _, notes = rows_and_notes("vllm-0.6-v0-llama8b.log", SizingRequest(model="qwen2.5-7b", overhead_gib=9.5))
    assert any(n.startswith("KV bytes per token differ") and "check --model" in n for n in notes)


def test_v1_log_guesses_the_preset_and_derives_overhead() -> None:
    rows, notes = rows_and_notes("vllm-0.10-v1-qwen3.log", SizingRequest(vram_gib=24, util=0.9, overhead_gib=1.6))
    computed, engine = rows["KV bytes per token (per GPU)"]
    assert computed == 2 * 28 * 8 * 128 * 2  # qwen3-0.6b, guessed from model='Qwen/Qwen3-0.6B'
    assert engine is not None and abs(engine - computed) / computed < 0.01
    # V1 prints no breakdown: overhead = 0.9 × 24 − 1.12 (weights) − 18.83 (KV) = 1.65 GiB.
    overhead = rows["activations + framework overhead"][1]
    assert overhead is not None and abs(overhead / 2**30 - 1.65) < 0.01
    assert rows["max concurrency at 8192 tokens"][1] == 21.51
    assert notes == ["computed and engine-reported budgets agree (within 3 % or 0.1 GiB)."]


def test_fp8_ds_mla_is_named_rather_than_blamed_on_the_model() -> None:
    from agent.capacity.inputs import SizingRequest as Req

    # DeepSeek-V3.2's fp8_ds_mla: 656 B per token per layer (0.11 MLAAttentionSpec.page_size_bytes)
    facts: dict[str, float | str] = {"kv_cache_dtype": "fp8_ds_mla", "kv_cache_bytes": 61 * 656 * 100_000,
                                     "kv_cache_tokens": 100_000, "block_size": 64}
    budget = compute(resolve(Req(model="deepseek-v3", vram_gib=141, tp=8, weights_gib=640), None, facts).inputs)
    notes = reconcile(budget, facts).explanations
    assert any("fp8_ds_mla" in n and "656 bytes" in n for n in notes)
