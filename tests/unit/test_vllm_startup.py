"""vLLM start-up capacity lines of every era become facts with the right names, units and values."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.capacity.reconcile import latest
from parsers.vllm import startup_facts

DATA = Path(__file__).parent.parent / "data" / "startup"
GIB = 1024**3


def facts_of(name: str) -> dict[str, float | str]:
    return latest(startup_facts((DATA / name).read_text().splitlines(), name))


def test_v0_profiling_breakdown() -> None:
    f = facts_of("vllm-0.6-v0-llama8b.log")
    assert f["total_gpu_memory_bytes"] == round(39.50 * GIB)
    assert f["gpu_memory_utilization"] == 0.90
    assert f["requested_memory_bytes"] == round(35.55 * GIB)
    assert f["weights_bytes"] == round(14.96 * GIB)
    assert f["non_torch_bytes"] == round(0.10 * GIB)
    assert f["activation_peak_bytes"] == round(9.37 * GIB)
    assert f["kv_cache_bytes"] == round(11.12 * GIB)
    assert (f["gpu_blocks"], f["cpu_blocks"]) == (5691, 2048)
    assert (f["max_concurrency"], f["tokens_per_request"]) == (11.12, 8192)
    assert f["cuda_graph_bytes"] == round(0.31 * GIB)


def test_v0_engine_args_from_namespace_and_config_dump() -> None:
    f = facts_of("vllm-0.6-v0-llama8b.log")
    assert f["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert (f["max_num_seqs"], f["block_size"], f["max_model_len"]) == (256, 16, 8192)
    assert f["kv_cache_dtype"] == "auto" and f["tensor_parallel_size"] == 1
    assert "quantization" not in f  # quantization=None is not a fact


def test_v1_lines_with_thousands_separators_and_ansi_tags() -> None:
    f = facts_of("vllm-0.10-v1-qwen3.log")
    assert f["kv_cache_tokens"] == 176240
    assert (f["max_concurrency"], f["tokens_per_request"]) == (21.51, 8192)
    assert f["weights_bytes"] == round(1.1201 * GIB)
    assert f["kv_cache_bytes"] == round(18.83 * GIB)
    assert f["model"] == "Qwen/Qwen3-0.6B"


def test_non_default_args_dict() -> None:
    f = facts_of("vllm-0.11-nondefault.log")
    assert f["model"] == "Qwen/Qwen2.5-7B-Instruct-AWQ"
    assert (f["max_model_len"], f["gpu_memory_utilization"], f["max_num_seqs"]) == (16384, 0.92, 64)
    assert f["kv_cache_dtype"] == "fp8"


def test_startup_failure_numbers() -> None:
    f = facts_of("vllm-0.15-startup-fail.log")
    assert f["max_model_len"] == 262144
    assert f["required_kv_bytes"] == round(24.0 * GIB)
    assert f["kv_cache_bytes"] == round(3.18 * GIB)
    assert f["estimated_max_model_len"] == 34736


@pytest.mark.parametrize(
    ("line", "name", "value"),
    [
        ("INFO 05-11 12:04:07 [executor_base.py:112] # cuda blocks: 27000, # CPU blocks: 2048", "gpu_blocks", 27000),
        ("INFO 03-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 1,234 tokens, Maximum concurrency for "
         "4,096 tokens per request: 0.30x", "max_concurrency", 0.30),
        ("(EngineCore pid=7) INFO 03-01 10:00:00 [kv_cache_utils.py:1] GPU + host KV cache size: 9,000 tokens",
         "kv_cache_tokens", 9000),
        ("INFO 03-01 10:00:00 [cuda.py:1] Forcing kv cache block size to 64 for FlashMLA backend.", "block_size", 64),
        ("INFO 04-28 03:36:10 model_runner.py:146] Loading model weights took 13.4966 GB", "weights_bytes",
         round(13.4966 * GIB)),
        ("ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be "
         "stored in KV cache (81536). Try increasing", "kv_cache_tokens", 81536),
    ],
)
def test_single_lines_of_other_eras(line: str, name: str, value: float) -> None:
    assert latest(startup_facts([line]))[name] == pytest.approx(value)


def test_stats_and_request_lines_are_not_facts() -> None:
    lines = [
        "INFO 07-28 06:40:59 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 239.2 tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 91.2%, Prefix cache "
        "hit rate: 0.0%",
        "INFO 01-01 00:00:00 logger.py:37] Received request chat-1: prompt: 'model=secret max_num_seqs=9', "
        "params: SamplingParams(n=1)",
    ]
    assert startup_facts(lines) == []


@given(st.lists(st.text(), max_size=20))
def test_never_raises_on_arbitrary_text(lines: list[str]) -> None:
    startup_facts(lines)


@given(st.text(alphabet="0123456789,.", max_size=40))
def test_number_shapes_never_raise(number: str) -> None:
    startup_facts([f"GPU KV cache size: {number} tokens", f"Model loading took {number} GiB",
                   f"non-default args: {{'max_num_seqs': {number}}}"])


def test_dcp_multiplied_token_count_is_compared_per_gpu() -> None:
    from agent.capacity.budget import compute
    from agent.capacity.inputs import SizingRequest, resolve
    from agent.capacity.reconcile import reconcile

    # the format strings of vllm/v1/core/kv_cache_utils.py (0.10+) with Llama-3.1-8B numbers: 8 GiB per GPU
    # holds 65,536 tokens at 128 KiB; with DCP 2 the engine prints twice that
    lines = ["INFO 10-01 00:00:00 [kv_cache_utils.py:1] Multiplying the GPU KV cache size by the dcp_world_size 2.",
             "INFO 10-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 8.00 GiB",
             "INFO 10-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 131,072 tokens"]
    facts = latest(startup_facts(lines))
    assert facts["dcp_world_size"] == 2
    rec = reconcile(compute(resolve(SizingRequest(model="llama-3.1-8b", vram_gib=80), None, facts).inputs), facts)
    row = next(r for r in rec.rows if r.label.startswith("KV bytes per token"))
    assert row.engine == 131072
    assert any(n.startswith("decode context parallelism 2") for n in rec.explanations)


def test_per_rank_sizes_take_the_binding_rank() -> None:
    lines = ["(Worker_TP0 pid=1) INFO 05-14 00:04:17 [gpu_worker.py:460] Available KV cache memory: 15.72 GiB",
             "(Worker_TP1 pid=2) INFO 05-14 00:04:17 [gpu_worker.py:460] Available KV cache memory: 15.31 GiB",
             "(Worker_TP0 pid=1) INFO 05-14 00:04:10 [gpu_model_runner.py:1] Model loading took 15.2 GiB memory and 4s",
             "(Worker_TP1 pid=2) INFO 05-14 00:04:10 [gpu_model_runner.py:1] Model loading took 15.9 GiB memory and 4s"]
    f = latest(startup_facts(lines))
    assert f["kv_cache_bytes"] == round(15.31 * GIB) and f["weights_bytes"] == round(15.9 * GIB)
