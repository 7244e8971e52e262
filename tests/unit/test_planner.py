"""The inverse plan follows the seed's order and stops at the target; out-of-reach targets say why."""

from __future__ import annotations

from agent.capacity.budget import GIB, BudgetInputs
from agent.capacity.plan import plan
from agent.capacity.shapes import find_preset
from agent.records import KvDtype, WeightsDtype

QWEN7B = find_preset("qwen2.5-7b")


def seed_inputs(**changes: object) -> BudgetInputs:
    base: dict[str, object] = {"shape": QWEN7B, "vram_bytes": 24 * GIB, "util": 0.90,
                               "weights_bytes": int(14.2 * GIB), "overhead_bytes": int(1.6 * GIB),
                               "tokens_per_request": 8192, "weights_dtype": WeightsDtype.BF16}
    return BudgetInputs(**{**base, **changes})  # type: ignore[arg-type]


def test_sixty_streams_in_the_seeds_order() -> None:
    result = plan(seed_inputs(), 60)
    assert [s.action.split(" (")[0] for s in result.steps] == [
        "as configured", "quantize weights to 4-bit", "FP8 KV cache"]
    assert result.steps[0].concurrency == 13
    assert 30 <= result.steps[1].concurrency < 60  # seed: ≈ 33 with AWQ weights
    assert result.steps[2].concurrency >= 60  # seed: ≈ 66 with AWQ + FP8 KV
    assert result.steps[2].budget is not None and result.steps[2].budget.inputs.kv_dtype is KvDtype.FP8
    assert result.reached


def test_stops_as_soon_as_reached() -> None:
    result = plan(seed_inputs(), 20)
    assert len(result.steps) == 2 and result.reached
    assert plan(seed_inputs(), 13).steps[-1].action == "as configured"


def test_already_quantized_skips_to_fp8() -> None:
    result = plan(seed_inputs(weights_bytes=int(5.5 * GIB), weights_dtype=WeightsDtype.AWQ), 60)
    assert [s.concurrency for s in result.steps] == [33, 66]


def test_caps_max_model_len_to_the_workload() -> None:
    result = plan(seed_inputs(), 120, workload_tokens=4096)
    last = result.steps[-1]
    assert last.flag == "--max-model-len 4096"
    assert last.concurrency >= 120 and result.reached


def test_without_workload_the_cap_carries_a_caveat() -> None:
    result = plan(seed_inputs(), 120)
    assert result.reached
    assert result.steps[-1].flag is not None and result.steps[-1].flag.startswith("--max-model-len ")
    cap = int(result.steps[-1].flag.split()[-1])
    assert cap % 16 == 0 and cap < 8192
    assert "only if every request" in result.reason
    # One more block per request would drop below the target: the cap is the longest that works.
    longer = plan(seed_inputs(tokens_per_request=cap + 16), 120)
    assert longer.steps[-1].flag != f"--max-model-len {cap + 16}"


def test_out_of_reach_says_so_and_offers_tensor_parallel() -> None:
    result = plan(seed_inputs(), 200, workload_tokens=4096)
    assert not result.reached
    assert "out of reach on this card" in result.reason and "4096" in result.reason
    assert result.tensor_parallel, "must say what tensor parallelism would need"
    assert result.tensor_parallel[-1].with_steps >= 200
    assert all(28 % t.tp == 0 for t in result.tensor_parallel)


def test_plan_from_a_model_that_does_not_fit_at_all() -> None:
    result = plan(seed_inputs(vram_bytes=16 * GIB), 10)
    assert result.steps[0].budget is None and result.steps[0].error and "exceed" in result.steps[0].error
    assert result.steps[1].concurrency > 0
