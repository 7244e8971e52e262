"""Shapes the fresh20 batch showed the parsers missing that live in parser code (ggml's ROCm and MUSA builds naming
their errors, a model that failed to load because memory ran out, late-2023 llama.cpp's sizes, libllama's device line
with its PCI id, TabbyAPI's context, cache and metrics); the catalogued statements are rendered by test_catalogue
behind every prefix."""

from __future__ import annotations

import pytest

from agent.records import CapacityFact, Server, ServerStats
from parsers import make_parser
from tests.unit.wordings import kinds, records


# ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_error: `GGML_CUDA_NAME " error: %s"`, the build's name in front
@pytest.mark.parametrize("line", ["ROCm error: invalid device function", "MUSA error: unspecified launch failure"])
def test_ggmls_rocm_and_musa_builds_name_their_cuda_errors(line: str) -> None:
    assert kinds([line]) == ["cuda_error"]


def test_an_out_of_memory_in_those_builds_is_an_out_of_memory() -> None:
    assert kinds(["ROCm error: out of memory"]) == ["oom"]


# libllama: the allocator's failure, then the loader's; the second is the first's consequence, not a second incident
ALLOC_FAILED = [
    "llama_model_load: loading model tensors, this can take a while... (mmap = true)",
    "ggml_vulkan: Device memory allocation of size 4697620480 failed.",
    "alloc_tensor_range: failed to allocate Vulkan0 buffer of size 4697620480",
    "llama_model_load: error loading model: unable to allocate Vulkan0 buffer",
    "llama_model_load_from_file_impl: failed to load model",
]


@pytest.mark.parametrize("server", [Server.AUTO, Server.LLAMACPP])
def test_a_model_that_failed_to_load_for_want_of_memory_is_the_out_of_memory(server: Server) -> None:
    parser = make_parser(server)
    out = [r for line in ALLOC_FAILED for r in parser.feed(line)] + parser.flush()
    assert sorted({r.kind.value for r in out if hasattr(r, "kind")}) == ["oom"]


def test_a_server_that_then_says_it_exits_has_died() -> None:
    assert kinds([*ALLOC_FAILED, "main: exiting due to model loading error"]) == ["engine_dead", "oom"]


def test_a_model_that_failed_to_load_otherwise_is_an_engine_death() -> None:
    lines = ["llama_model_load: error loading model: llama_model_loader: failed to load model from /models/",
             "llama_model_load_from_file_impl: failed to load model"]
    assert kinds(lines) == ["engine_dead"]


def test_an_out_of_memory_long_before_leaves_a_later_failed_load_an_engine_death() -> None:
    filler = [f"llama_model_loader: - kv {i:3d}: general.name str = model" for i in range(400)]
    lines = ["ggml_vulkan: Device memory allocation of size 4697620480 failed.", *filler,
             "llama_model_load: error loading model: llama_model_loader: failed to load model from /models/"]
    assert kinds(lines) == ["engine_dead", "oom"]


def _facts(lines: list[str], server: Server = Server.LLAMACPP) -> dict[str, float | str]:
    parser = make_parser(server)
    out = [r for line in lines for r in parser.feed(line)] + parser.flush()
    return {r.name: r.value for r in out if isinstance(r, CapacityFact)}


# late 2023's llama.cpp: llama_new_context_with_model's device total, the server's slots
def test_late_2023_llama_cpp_gives_its_weights_and_a_slots_context() -> None:
    facts = _facts(["llama_new_context_with_model: total VRAM used: 8930.69 MB (model: 8785.69 MB, context: 145.00 MB)",
                    "Available slots:", " -> Slot 0 - max context: 512"])
    assert facts["weights_bytes"] == round(8785.69 * 2**20)
    assert facts["max_model_len"] == 512


# src/llama.cpp llama_model_load_from_file_impl, 2025 on: `using device %s (%s) (%s) - %zu MiB free`
@pytest.mark.parametrize("line", [
    "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4060) (0000:01:00.0) - 7044 MiB free",
    "0.01.746.150 I llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4060) (0000:01:00.0) - "
    "7044 MiB free",
    "llama_model_load_from_file_impl: using device Metal (Apple M4) - 7044 MiB free",
])
def test_the_devices_free_memory_with_and_without_its_id(line: str) -> None:
    assert _facts([line])["device_free_bytes"] == 7044 * 2**20


def test_a_cpus_free_memory_is_no_devices() -> None:
    assert "device_free_bytes" not in _facts(
        ["llama_model_load_from_file_impl: using device CPU (AMD Ryzen 9) (unknown id) - 64000 MiB free"])


# theroyallab/tabbyAPI backends/exllamav3/model.py: the context and the cache, as configured or defaulted
TABBY_LOAD = [
    "2026-07-22 04:58:13.600 INFO:     Using configured max_seq_len: 256000 tokens.",
    "2026-07-22 04:58:13.601 INFO:     Using configured cache_size: 131072 tokens.",
    "2026-07-22 04:58:13.602 WARNING:  The given max_seq_len (256000) is larger than the cache size and will be "
    "limited to 131072 tokens.",
]


def test_tabbyapis_context_and_cache_are_start_up_facts() -> None:
    assert _facts(TABBY_LOAD, Server.AUTO) == {"max_model_len": 131072.0, "kv_cache_tokens": 131072.0}
    assert _facts(["2026-07-22 04:58:13.600 INFO:     Using default max_seq_len from model: 40960 tokens."],
                  Server.AUTO) == {"max_model_len": 40960.0}


# common/gen_logging.py log_metrics: one generation's speeds
def test_tabbyapis_metrics_are_a_speed_sample() -> None:
    line = ("2026-09-10 15:01:39.976 INFO:     Metrics (ID: ba98857171f843819f1002589743de29): 412 tokens generated in "
            "16.44 seconds (Queue: 0.02 s, Process: 3840 cached tokens and 11926 new tokens at 727.64 T/s, Generate: "
            "28.2 T/s, Context: 15766 tokens)")
    samples = [r for r in records([line]) if isinstance(r, ServerStats)]
    assert [(s.prompt_tps, s.gen_tps, s.kv_usage_ratio, s.running) for s in samples] == [(727.64, 28.2, None, None)]
    assert not [r for r in records(["Metrics (ID: x): see the console"]) if isinstance(r, ServerStats)]
