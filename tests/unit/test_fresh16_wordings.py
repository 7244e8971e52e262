"""Shapes the fresh16 batch showed the parsers missing that live in parser code (a load line's reader, a fact's
pattern, a stream's detection); the catalogued statements are rendered by test_catalogue behind every prefix."""

from __future__ import annotations

from agent.records import CapacityFact, Server, ServerStats
from parsers import detect
from tests.unit.wordings import kinds, records


# EricLBuehler/mistral.rs mistralrs-core/src/engine/logger.rs: the interval summary. Its `tracing` prefix is TGI's
# shape too, so the target's crate keeps the stream from TGI's parser
def test_mistral_rs_interval_line_is_a_load_sample() -> None:
    lines = ["2025-06-06T22:31:38.341568Z  INFO mistralrs_core::engine::logger: Throughput (T/s) 320.60, Prefix cache "
             "hitrate 0.00%, 0 running, 0 waiting",
             "2025-06-06T22:31:58.342118Z  INFO mistralrs_core::engine::logger: Throughput (T/s) 334.00, Prefix cache "
             "hitrate 0.00%, 3 running, 2 waiting"]
    assert detect(lines) is not Server.TGI
    samples = [(r.running, r.waiting) for r in records(lines) if isinstance(r, ServerStats)]
    assert samples == [(0, 0), (3, 2)]
    assert kinds(lines) == ["pending"]
    assert not [r for r in records(["2025-06-06T22:31:38.341568Z  INFO mistralrs_core::engine::logger: Throughput "
                                    "(T/s) 320.60"]) if isinstance(r, ServerStats)]


# huggingface/text-generation-inference launcher/src/main.rs: the default total tokens the launcher picks for a model
# whose context is longer; the limit the requests then meet
def test_tgis_own_default_for_a_long_context_is_the_max_length() -> None:
    line = ("2025-03-11T06:56:10.640185Z  INFO text_generation_launcher: Model supports up to 131072 but tgi will now "
            "set its default to 4096 instead. This is to save VRAM by refusing large prompts in order to allow more "
            "users on the same hardware.")
    assert {r.name: r.value for r in records([line]) if isinstance(r, CapacityFact)} == {"max_model_len": 4096.0}
    assert kinds([line]) == []


# vllm-project/vllm csrc/cumem_allocator.cpp (sleep mode): its CUDA_CHECK prints without vLLM's logger, and the file
# names vLLM's stream; an allocation's out of memory is an OOM, the calls that then fail are CUDA errors
def test_vllms_sleep_mode_allocator_errors_name_vllm() -> None:
    lines = ["CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:56",
             "CUDA Error: invalid argument at /workspace/csrc/cumem_allocator.cpp:57"]
    assert detect(lines) is Server.VLLM
    assert kinds(lines) == ["cuda_error", "oom"]
    assert kinds(lines[:1]) == ["oom"]


# gpustack/llama-box prints its command line at start; its `--ctx-size` is shared by the `--parallel` slots, as in
# llama.cpp's server and Ollama's runner command (parsers/server_args.py), whichever parser reads the stream
def test_llama_boxs_command_line_gives_its_slots_and_their_context() -> None:
    line = ("[2025-07-12 01:25:26.526801] I arguments  : /usr/local/lib/python3.10/dist-packages/gpustack/third_party/"
            "bin/llama-box/llama-box --host 0.0.0.0 --embeddings --gpu-layers 13 --parallel 2 --ctx-size 8192 --port "
            "40514")
    expected = {"kv_cache_tokens": 8192.0, "max_num_seqs": 2.0, "max_model_len": 4096.0}
    behind_gpustack = ["2025-07-12T01:25:26+00:00 - gpustack.worker.backends.llama_box - INFO - Starting llama-box "
                       "server", line]
    assert detect(behind_gpustack) is Server.LLAMA_BOX
    assert {r.name: r.value for r in records(behind_gpustack) if isinstance(r, CapacityFact)} == expected
    behind_ggml = ["[2025-07-12 01:25:27.527114] I ggml_cuda_init: GGML_CUDA_FORCE_MMQ:    no", line]
    assert detect(behind_ggml) is Server.LLAMACPP
    assert {r.name: r.value for r in records(behind_ggml) if isinstance(r, CapacityFact)} == expected
    assert not [r for r in records(["[2025-07-12 01:25:26.526801] I version    : v0.0.136 (b376289)"])
                if isinstance(r, CapacityFact)]


# The argparse dumps of koboldcpp (its `contextsize`) and FastChat's model worker (its `limit_model_concurrency`),
# servers without a parser of their own (parsers/argdumps.py)
def test_koboldcpp_and_fastchat_argument_dumps_give_their_limits() -> None:
    def facts(line: str) -> dict[str, float | str]:
        return {r.name: r.value for r in records([line]) if isinstance(r, CapacityFact)}

    assert facts("Namespace(bantokens=None, blasbatchsize=512, contextsize=16384, gpulayers=43, host='')") == {
        "max_model_len": 16384.0}
    assert facts("2023-04-08 03:22:40 | INFO | model_worker | args: Namespace(host='localhost', port=21002, "
                 "limit_model_concurrency=5, stream_interval=2)") == {"max_concurrent_requests": 5.0}
    assert facts("Namespace(host='localhost', port=21002)") == {}
    assert facts("contextsize=16384 is what I set") == {}
