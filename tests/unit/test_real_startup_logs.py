"""Real vLLM start-up logs pasted in public issues (tests/data/startup/README.md cites each): the facts
parsed from them, the per-token KV size the model shape implies against the engine's, and the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.capacity.budget import compute
from agent.capacity.inputs import SizingRequest, resolve
from agent.capacity.reconcile import latest, reconcile
from agent.capacity.shapes import guess_preset
from agent.records import KvDtype, WeightsDtype
from parsers.vllm import startup_facts

DATA = Path(__file__).parent.parent / "data" / "startup"
GIB = 1024**3


def facts_of(name: str) -> dict[str, float | str]:
    return latest(startup_facts((DATA / name).read_text().splitlines(), name))


def check(name: str, request: SizingRequest) -> tuple[dict[str, tuple[float | None, float | None]], list[str]]:
    facts = facts_of(name)
    rec = reconcile(compute(resolve(request, None, facts).inputs), facts)
    return {r.label.split(" at ")[0]: (r.computed, r.engine) for r in rec.rows}, list(rec.explanations)


def per_token_agrees(rows: dict[str, tuple[float | None, float | None]], tolerance: float = 0.02) -> bool:
    computed, engine = rows["KV bytes per token (per GPU)"]
    assert computed is not None and engine is not None
    return abs(engine - computed) / computed < tolerance


def test_v0_064_profiling_results_line_and_too_long_failure() -> None:
    f = facts_of("real-0.6.4-v0-llama8b-3090-too-long.log")
    assert f["total_gpu_memory_bytes"] == round(23.58 * GIB) and f["gpu_memory_utilization"] == 0.90
    assert f["peak_torch_bytes"] == round(17.98 * GIB) and f["non_torch_bytes"] == round(0.35 * GIB)
    assert f["kv_cache_bytes"] == round(2.89 * GIB) and f["gpu_blocks"] == 1478
    assert (f["max_model_len"], f["kv_cache_tokens"]) == (29000, 23648)
    rows, notes = check("real-0.6.4-v0-llama8b-3090-too-long.log", SizingRequest(model="llama-3.1-8b"))
    assert per_token_agrees(rows)
    # activation peak = torch peak − weights (17.98 − 14.99)
    assert any("activation peak 2.99 GiB" in n for n in notes)


def test_pre_mla_deepseek_v2_lite_is_explained_not_blamed_on_the_model() -> None:
    f = facts_of("real-0.6.4-v0-deepseek-v2-lite-pre-mla.log")
    assert f["kv_cache_bytes"] == round(35.42 * GIB) and f["gpu_blocks"] == 5373
    rows, notes = check("real-0.6.4-v0-deepseek-v2-lite-pre-mla.log", SizingRequest(model="deepseek-v2-lite"))
    assert not per_token_agrees(rows)
    assert any("MLA model" in n and "0.7.1" in n for n in notes)


def test_v1_alpha_blocks_only_and_engine_weights_when_estimate_cannot_fit() -> None:
    rows, _ = check("real-0.7-v1-llama70b-w8a8.log", SizingRequest(model="llama-3.1-70b", vram_gib=79.1, util=0.98))
    assert rows["KV cache tokens"][1] == 1381 * 16
    assert rows["weights (per GPU)"] == (round(67.7229 * GIB), round(67.7229 * GIB))
    assert guess_preset("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8") is not None


def test_qwen3_235b_fp8_tp4_per_gpu_kv() -> None:
    assert guess_preset("/path/to/Qwen3-235B-A22B-FP8") is not None
    request = SizingRequest(model="qwen3-235b-a22b", vram_gib=79.1, tp=4, weights_dtype=WeightsDtype.FP8)
    rows, _ = check("real-0.9-v1-qwen3-235b-fp8-tp4.log", request)
    assert rows["KV bytes per token (per GPU)"][0] == 2 * 94 * 1 * 128 * 2
    assert per_token_agrees(rows)


def test_tp_not_given_is_named_as_the_cause() -> None:
    _, notes = check("real-0.9-v1-qwen3-235b-fp8-tp4.log",
                     SizingRequest(model="qwen3-235b-a22b", vram_gib=300, weights_gib=220, tp=1))
    assert any("pass --tp 4" in n for n in notes)


def test_failed_v1_start_uses_its_own_numbers_not_the_earlier_start() -> None:
    rows, notes = check("real-0.10-v1-fp8-kv-then-too-long.log",
                        SizingRequest(model="qwen3-30b-a3b", vram_gib=79.1, kv_dtype=None))
    _, engine = rows["KV bytes per token (per GPU)"]
    assert engine is not None and abs(engine - 10.12 * GIB / 221000) < 1
    assert rows["KV cache tokens"][1] == 122080
    assert any(n.startswith("the engine refused to start") and "122080" in n for n in notes)
    # the run used an fp8 cache: at bf16 the shape is 2× the engine's, and the note says why
    assert any("KV bytes per token differ" in n and "--kv-dtype fp8" in n for n in notes)
    rows, _ = check("real-0.10-v1-fp8-kv-then-too-long.log",
                    SizingRequest(model="qwen3-30b-a3b", vram_gib=79.1, kv_dtype=KvDtype.FP8))
    assert per_token_agrees(rows)


def test_negative_kv_budget_is_parsed_and_explained() -> None:
    f = facts_of("real-0.7-v0-qwen7b-awq-no-memory.log")
    assert f["kv_cache_bytes"] == -round(1.05 * GIB) and f["gpu_blocks"] == 0
    _, notes = check("real-0.7-v0-qwen7b-awq-no-memory.log",
                     SizingRequest(model="qwen2.5-7b", weights_gib=5.2, overhead_gib=0.2))
    assert any("No available memory" in n for n in notes)


def test_cuda_graph_estimate_per_rank_and_equivalent_util() -> None:
    f = facts_of("real-0.21-v1-tp4-cudagraph-estimate.log")
    assert f["cuda_graph_estimate_bytes"] == round(0.17 * GIB)
    assert f["gpu_memory_utilization"] == 0.92 and f["kv_cache_bytes"] == round(15.72 * GIB)
    _, notes = check("real-0.21-v1-tp4-cudagraph-estimate.log", SizingRequest(model="qwen3-32b", vram_gib=24, tp=4))
    assert any("already took it out of the KV budget" in n for n in notes)


def test_qwen3_14b_v1() -> None:
    rows, _ = check("real-0.11-v1-qwen3-14b.log", SizingRequest(model="qwen3-14b", vram_gib=48))
    assert per_token_agrees(rows, 0.01)
    assert rows["max concurrency"][1] == 1.30


def test_hybrid_mamba_log_is_flagged() -> None:
    f = facts_of("real-0.2x-v1-hybrid-mamba-tp8.log")
    assert f["hybrid_block_size"] == 544 and f["weights_bytes"] == round(15.26 * GIB)


def test_quantized_config_dump() -> None:
    f = facts_of("real-0.8-v1-qwen0.5b-awq-config.log")
    assert (f["model"], f["quantization"], f["max_model_len"]) == ("Qwen/Qwen2.5-0.5B-Instruct-AWQ", "awq_marlin", 512)
    shape = guess_preset(str(f["model"]))
    assert shape is not None and shape.name == "qwen2.5-0.5b"


def test_v04_tp2_blocks() -> None:
    assert facts_of("real-0.4-v0-deepseek-coder-tp2.log")["gpu_blocks"] == 507


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("real-*.log")))
def test_every_real_log_yields_facts(name: str) -> None:
    assert facts_of(name)


def test_config_dump_pasted_without_its_head_and_hf_cache_folder_name() -> None:
    f = facts_of("real-0.5.4-v0-llama70b-tp2-config.log")
    assert (f["max_model_len"], f["tensor_parallel_size"]) == (131072, 2)
    shape = guess_preset(str(f["model"]))  # /mnt/models/models--meta-llama--llama-3-1-70b-instruct
    assert shape is not None and shape.name == "llama-3.1-70b"


def test_per_rank_weights_in_gb_and_inside_kubernetes_box_drawing() -> None:
    assert facts_of("real-0.8.2-v1-gemma3-tp4-per-rank.log")["weights_bytes"] == round(13.1665 * GIB)
    assert facts_of("real-0.8.1-v1-llama-guard-k8s-box.log")["weights_bytes"] == round(14.9888 * GIB)


def test_no_available_memory_alone_is_a_zero_kv_budget() -> None:
    assert facts_of("real-v0-nemotron-ultra-no-available-memory.log") == {"kv_cache_bytes": 0}
    _, notes = check("real-v0-nemotron-ultra-no-available-memory.log",
                     SizingRequest(model="llama-3.1-70b", vram_gib=40, tp=8))
    assert any("No available memory" in n for n in notes)


def test_v0_too_long_failure_alone() -> None:
    f = facts_of("real-0.3-v0-gemma7b-too-long.log")
    assert (f["max_model_len"], f["kv_cache_tokens"]) == (4096, 3664)


def test_a_later_start_up_replaces_the_earlier_one() -> None:
    # two real logs appended, as a restart leaves them: only the second start-up's facts count
    lines = [*(DATA / "real-0.11-v1-qwen3-14b.log").read_text().splitlines(),
             *(DATA / "vllm-0.6-v0-llama8b.log").read_text().splitlines()]
    f = latest(startup_facts(lines))
    assert "kv_cache_tokens" not in f and f["gpu_blocks"] == 5691 and f["kv_cache_bytes"] == round(11.12 * GIB)
    # ranks of one start-up restating a line do not split it
    f = facts_of("real-0.21-v1-tp4-cudagraph-estimate.log")
    assert f["cuda_graph_estimate_bytes"] and f["kv_cache_bytes"]


def test_settings_only_log_does_not_claim_agreement() -> None:
    _, notes = check("real-0.5.4-v0-llama70b-tp2-config.log", SizingRequest(vram_gib=80))
    assert notes and notes[0].startswith("the log holds no capacity numbers")


def test_log_without_a_model_name_asks_for_model() -> None:
    from agent.errors import ModelError

    with pytest.raises(ModelError, match="the log does not name the served model"):
        resolve(SizingRequest(vram_gib=80), None, facts_of("real-0.11-v1-qwen3-14b.log"))


def test_logo_banner_and_model_tag_name_the_served_model() -> None:
    assert facts_of("real-0.19-v1-gemma4-logo-banner.log") == {"model": "google/gemma-4-31B-it",
                                                                "engine_version": "0.19.1rc1.dev301+g60995c05b"}
    from agent.errors import ModelError

    with pytest.raises(ModelError, match="'google/gemma-4-31B-it' matches no preset: pass --model"):
        resolve(SizingRequest(vram_gib=80), None, facts_of("real-0.19-v1-gemma4-logo-banner.log"))


def test_non_default_args_of_a_dp8_deepseek_v4_run() -> None:
    f = facts_of("real-0.25-v1-dsv4-dp8-nondefault.log")
    assert str(f["model"]).endswith("/snapshots/7872f01b1d1fe23eabc4c98b48bffcef5a386062")
    assert (f["block_size"], f["gpu_memory_utilization"], f["kv_cache_dtype"], f["max_num_seqs"]) == (
        256, 0.95, "fp8", 256)
    assert guess_preset(str(f["model"])) is None  # DeepSeek-V4 is no preset: asks for --model, guesses nothing


def test_release_date_suffix_keeps_the_base_shape() -> None:
    shape = guess_preset("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")
    assert shape is not None and shape.name == "qwen3-235b-a22b"


@pytest.mark.parametrize(("served", "preset"), [
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b"),
    ("casperhansen/deepseek-r1-distill-qwen-14b-awq", "qwen2.5-14b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "llama-3.3-70b"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
])
def test_r1_distills_take_their_base_shape(served: str, preset: str) -> None:
    shape = guess_preset(served)
    assert shape is not None and shape.name == preset


def test_tp_beyond_kv_heads_is_mentioned() -> None:
    # qwen3-235b has 4 KV heads: TP 4 and TP 8 both leave one head per GPU
    _, notes = check("real-0.9-v1-qwen3-235b-fp8-tp4.log",
                     SizingRequest(model="qwen3-235b-a22b", vram_gib=300, weights_gib=220, tp=1))
    assert any("or more: past 4 ranks the heads are replicated" in n for n in notes)


def test_pipeline_parallel_failure_of_issue_34076() -> None:
    # vllm-0.15-startup-fail.log is the ValueError of #34076: Qwen3-Coder-30B-A3B-FP8, PP 2 over a 16 GB and a
    # 32 GB card. Its 24.0 GiB for 262,144 tokens is 96 KiB/token: the whole model's 48 layers at 16 bit.
    assert guess_preset("./Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8") is not None
    rows, notes = check("vllm-0.15-startup-fail.log", SizingRequest(model="qwen3-coder-30b-a3b", vram_gib=32))
    assert per_token_agrees(rows, 0.01)
    assert any(n.startswith("the engine refused to start") and "34736" in n for n in notes)
    facts = {**facts_of("vllm-0.15-startup-fail.log"), "pipeline_parallel_size": 2.0,
             "kv_cache_tokens": 100_000.0, "kv_cache_bytes": 100_000 * 49152.0}
    facts.pop("required_kv_bytes")
    facts.pop("estimated_max_model_len")  # a start that succeeded prints no estimate
    rec = reconcile(compute(resolve(SizingRequest(model="qwen3-30b-a3b", vram_gib=32), None, facts).inputs), facts)
    assert any("pipeline parallel 2" in n for n in rec.explanations)
