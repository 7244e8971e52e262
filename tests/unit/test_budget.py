"""The seeds' worked examples must reproduce exactly; TP, MLA, sliding windows and rounding follow vLLM."""

from __future__ import annotations

import pytest

from agent.capacity.budget import GIB, KIB, BudgetInputs, compute, estimate_weights_bytes
from agent.capacity.shapes import ModelShape, find_preset
from agent.errors import BudgetError
from agent.records import KvDtype, WeightsDtype

QWEN7B = find_preset("qwen2.5-7b")
SEED_000 = ModelShape("seed-000", layers=32, kv_heads=8, head_dim=128, attention_heads=32)


def gib(x: float) -> int:
    return int(x * GIB)


def seed_003(weights_gib: float, kv: KvDtype = KvDtype.AUTO) -> BudgetInputs:
    """Seed 003: Qwen2.5-7B on a 24 GiB card, util 0.90, activations + overhead 1.6 GiB, S = 8192."""
    return BudgetInputs(QWEN7B, gib(24), 0.90, gib(weights_gib), gib(1.6), 8192, kv)


def test_qwen25_7b_is_56_kib_per_token() -> None:
    assert compute(seed_003(14.2)).kv_bytes_per_token == 56 * KIB == 57344


@pytest.mark.parametrize(
    ("weights", "kv", "expected"),
    [(14.2, KvDtype.AUTO, 13), (5.5, KvDtype.AUTO, 33), (5.5, KvDtype.FP8, 66)],
    ids=["bf16-weights", "awq-weights", "awq-weights-fp8-kv"],
)
def test_seed_003_concurrency(weights: float, kv: KvDtype, expected: int) -> None:
    budget = compute(seed_003(weights, kv))
    assert budget.max_concurrency == expected


def test_seed_003_intermediate_numbers() -> None:
    budget = compute(seed_003(14.2))
    assert budget.usable_kv_bytes / GIB == pytest.approx(5.8, abs=1e-6)
    assert budget.kv_bytes_per_request == 8192 * 57344  # 0.4375 GiB, "κS = 0.44 GiB/seq"
    assert budget.max_concurrency_unrounded == pytest.approx(13.257, abs=1e-3)


def test_fp8_halves_per_token_kv() -> None:
    assert compute(seed_003(5.5, KvDtype.FP8)).kv_bytes_per_token == 28 * KIB


def test_seed_000_is_128_kib_per_token() -> None:
    inputs = BudgetInputs(SEED_000, gib(80), 1.0, 0, gib(72), 512, KvDtype.FP16)  # 8 GiB left for KV
    assert compute(inputs).kv_bytes_per_token == 131072


@pytest.mark.parametrize(("tokens", "expected"), [(512, 128), (4096, 16)])
def test_seed_000_eight_gib_budget(tokens: int, expected: int) -> None:
    inputs = BudgetInputs(SEED_000, gib(80), 1.0, 0, gib(72), tokens, KvDtype.FP16)
    budget = compute(inputs)
    assert budget.usable_kv_bytes == gib(8)
    assert budget.max_concurrency == expected


def test_seed_000_skeleton_example_is_5() -> None:
    # 24 GiB × 0.90 − 14 GiB weights − 2 GiB framework ≈ 5.6 GiB at 1 GiB per 8192-token request.
    budget = compute(BudgetInputs(SEED_000, gib(24), 0.90, gib(14), gib(2), 8192, KvDtype.FP16))
    assert budget.kv_bytes_per_request == GIB
    assert budget.max_concurrency == 5


def test_block_rounding_reserves_whole_blocks() -> None:
    # 1000 tokens need ceil(1000/16) = 63 blocks = 1008 tokens of KV each.
    inputs = BudgetInputs(SEED_000, gib(80), 1.0, 0, gib(80) - 1008 * 131072 * 10, 1000, KvDtype.FP16)
    budget = compute(inputs)
    assert budget.blocks_per_request == 63
    assert budget.kv_bytes_per_request == 1008 * 131072
    assert budget.max_concurrency == 10
    assert budget.max_concurrency_unrounded == pytest.approx(10.08)


def test_tensor_parallel_splits_kv_heads_and_weights() -> None:
    llama70 = find_preset("llama-3.1-70b")
    one = BudgetInputs(llama70, gib(80), 0.9, gib(131.5), gib(2), 8192, tp=1)
    with pytest.raises(BudgetError, match="exceed util × VRAM"):
        compute(one)
    four = compute(BudgetInputs(llama70, gib(80), 0.9, gib(131.5), gib(2), 8192, tp=4))
    assert four.kv_heads_per_gpu == 2
    assert four.kv_bytes_per_token == 2 * 80 * 2 * 128 * 2
    assert four.weights_per_gpu_bytes == pytest.approx(gib(131.5) / 4, abs=1)
    # 72 − 32.875 − 2 = 37.125 GiB per GPU; 8192 × 80 KiB = 640 MiB per request per GPU → 59.
    assert four.max_concurrency == 59


def test_tensor_parallel_beyond_kv_heads_replicates_one_head() -> None:
    shape = ModelShape("gqa2", layers=10, kv_heads=2, head_dim=128, attention_heads=16)
    budget = compute(BudgetInputs(shape, gib(80), 0.9, 0, 0, 1024, tp=8))
    assert budget.kv_heads_per_gpu == 1


def test_tensor_parallel_must_divide_attention_heads() -> None:
    with pytest.raises(BudgetError, match="does not divide"):
        BudgetInputs(QWEN7B, gib(24), 0.9, gib(14.2), gib(1.6), 8192, tp=8)


def test_mla_caches_one_latent_not_k_and_v() -> None:
    dsv3 = find_preset("deepseek-v3")
    budget = compute(BudgetInputs(dsv3, gib(141), 0.9, gib(671 / 8), gib(4), 8192, tp=8))
    assert budget.kv_bytes_per_token == 61 * 576 * 2 == 70272  # ≈ 68.6 KiB, no ×2, no per-head split
    assert budget.kv_heads_per_gpu == 1
    lite = compute(BudgetInputs(find_preset("deepseek-v2-lite"), gib(80), 0.9, gib(31.5), gib(2), 4096))
    assert lite.kv_bytes_per_token == 27 * 576 * 2


def test_sliding_window_layers_hold_only_the_window() -> None:
    gemma = find_preset("gemma-2-9b")
    budget = compute(BudgetInputs(gemma, gib(80), 0.9, gib(17.2), gib(2), 8192))
    per_layer = 2 * 8 * 256 * 2
    # 21 global layers hold 8192 tokens; 21 local layers hold the 4096 window plus one partial block.
    assert budget.kv_bytes_per_request == 21 * per_layer * 8192 + 21 * per_layer * (4096 + 16)
    short = compute(BudgetInputs(gemma, gib(80), 0.9, gib(17.2), gib(2), 2048))
    assert short.kv_bytes_per_request == 42 * per_layer * 2048


def test_negative_budget_says_by_how_much() -> None:
    with pytest.raises(BudgetError) as exc:
        compute(BudgetInputs(QWEN7B, gib(16), 0.9, gib(14.2), gib(1.6), 8192))
    # 0.9 × 16 = 14.4 GiB < 14.2 + 1.6 = 15.8 GiB: short by 1.40 GiB.
    assert "by 1.40 GiB" in str(exc.value)
    assert "14.20 GiB" in str(exc.value) and "14.40 GiB" in str(exc.value)


def test_zero_concurrency_reports_longest_that_fits() -> None:
    budget = compute(BudgetInputs(QWEN7B, gib(16), 0.95, gib(14.2), gib(0.5), 32768))
    assert budget.max_concurrency == 0
    assert 0 < budget.max_model_len_that_fits < 32768
    assert budget.max_model_len_that_fits % 16 == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("util", 1.5, "util must be in"), ("tokens_per_request", 0, "tokens per request"),
     ("block_size", 0, "block size"), ("tp", 0, "tensor parallel size must be positive")],
)
def test_out_of_range_inputs_are_refused(field: str, value: float, message: str) -> None:
    kwargs = {"shape": QWEN7B, "vram_bytes": gib(24), "util": 0.9, "weights_bytes": gib(14.2),
              "overhead_bytes": gib(1.6), "tokens_per_request": 8192, field: value}
    with pytest.raises(BudgetError, match=message):
        BudgetInputs(**kwargs)  # type: ignore[arg-type]


def test_weights_estimates() -> None:
    # Seed 003: BF16 ≈ 14.2 GiB; the published AWQ checkpoint is ≈ 5.2–5.5 GiB.
    assert estimate_weights_bytes(QWEN7B, WeightsDtype.BF16) / GIB == pytest.approx(14.18, abs=0.01)
    assert 5.0 < estimate_weights_bytes(QWEN7B, WeightsDtype.AWQ) / GIB < 5.6
    assert estimate_weights_bytes(QWEN7B, WeightsDtype.FP8) / GIB == pytest.approx(8.1, abs=0.1)
    with pytest.raises(BudgetError, match="--weights-gib"):
        estimate_weights_bytes(SEED_000, WeightsDtype.BF16)


def test_kv_dtype_accepts_vllm_spellings() -> None:
    assert KvDtype.parse("fp8_e4m3") is KvDtype.FP8
    assert KvDtype.parse("bfloat16") is KvDtype.BF16
    with pytest.raises(ValueError):
        KvDtype.parse("int3")
