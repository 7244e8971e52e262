"""Shapes the fresh5 batch showed the parsers missing that the catalogue's renderings do not cover on their own
(TensorRT-LLM's KV budget read by the generic path, a log statement quoted in prose), each beside its near
miss; the statements themselves are catalogued and rendered by test_catalogue."""

from __future__ import annotations

from agent.records import CapacityFact, Event, Server
from parsers import make_parser
from tests.unit.wordings import kinds, records


def _facts(lines: list[str]) -> dict[str, object]:
    return {r.name: r.value for r in records(lines) if isinstance(r, CapacityFact)}


def test_tensorrt_llm_kv_budget_is_read_without_a_parser_of_its_own() -> None:
    facts = _facts(["[TensorRT-LLM][INFO] Number of tokens per block: 64.",
                    "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 26.91 GiB for max tokens in paged KV cache "
                    "(220480)."])
    assert facts == {"block_size": 64.0, "kv_cache_tokens": 220480.0, "kv_cache_bytes": 26.91 * 2**30}


def test_tensorrt_llm_settings_echoed_at_start_up_are_no_budget() -> None:
    lines = ["[TensorRT-LLM][WARNING] max_tokens_in_paged_kv_cache is not specified, will use default value",
             "[TensorRT-LLM][WARNING] kv_cache_free_gpu_mem_fraction is not specified, will use default value of "
             "0.9 or max_tokens_in_paged_kv_cache",
             "If you see `Allocated 0.14 GiB for max tokens in paged KV cache`, increase the fraction."]
    assert _facts(lines[:2]) == {}
    assert kinds(lines) == []


def test_tensorrt_llm_start_up_failures() -> None:
    assert kinds(["[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [E] Failed to initialize executor on rank 1: "
                   "Executor creation failed due to insufficient GPU memory."]) == ["engine_dead", "oom"]
    assert kinds(["E1103 02:59:01.152656 81041 backend_model.cc:553] ERROR: Failed to create instance: unexpected "
                   "error when creating modelInstanceState: [TensorRT-LLM][ERROR] CUDA runtime error in "
                   "::cudaMallocAsync(ptr, n, mCudaSt"]) == ["engine_dead", "oom"]
    # another CUDA call failing is not an allocation: a CUDA error, no OOM (fresh16's reading)
    assert kinds(["[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, "
                   "stream): invalid argument (/app/bufferManager.cpp:96)"]) == ["cuda_error"]


_RETRACT = "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.9998 -> 1.0000"


def test_a_statement_quoted_inline_in_advice_is_no_event() -> None:
    assert kinds([f"`{_RETRACT}`, you can increase `--schedule-conservativeness` to a value like 1.3."]) == []
    assert kinds(["If you see `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.` lower "
                   "the fraction."]) == []


def test_the_same_statement_as_a_log_line_still_counts() -> None:
    sglang = f"[2025-01-01 10:00:00 TP0] {_RETRACT}"
    assert kinds([sglang]) == ["preemption"]
    assert kinds(["```", sglang, "```"]) == ["preemption"]  # pasted inside a code fence
    assert kinds([f"> {sglang}"]) == ["preemption"]  # quoted as a block
    # a client's own message with backticks in it (Guzzle's RequestException) speaks to no reader
    assert kinds(["Server error: `POST https://h:23000/query` resulted in a `504 Gateway Time-out` response: "
                   "<html><body><h1>504 Gateway Time-out</h1></body></html>"]) == ["deadline_exceeded"]
    # a user reporting what they saw, in backticks
    assert kinds([f"After an hour I got `{_RETRACT}` on every step"]) == ["preemption"]


def test_vllm_rs_swap_out_and_usage_are_read_and_its_tracing_prefix_is_not_tgi() -> None:
    lines = ["2025-11-10T11:16:25.751531Z  INFO runner: Received KVCacheSwap message: 171 kv cache blocks need to "
             "swap out!",
             "2025-11-10T11:16:27.857622Z  INFO vllm_rs::core::scheduler: GPU Kvcache: 170 blocks (10880 tokens) "
             "free, used 45.5% (0.42GB/0.91GB); CPU swap used 11.0% (0.50GB/4.57GB)"]
    parser = make_parser(Server.AUTO)
    records: list[object] = []
    for line in lines:
        records += parser.feed(line)
    records += parser.flush()
    assert parser.server is Server.VLLM_RS  # type: ignore[union-attr]  # named, never TGI's
    assert [r.kind.value for r in records if isinstance(r, Event)] == ["preemption"]
    assert [getattr(r, "kv_usage_ratio", None) for r in records if not isinstance(r, Event)] == [0.455]
    # swapping back in is the sequence resuming
    assert kinds(["2025-11-10T11:16:30.0Z  INFO runner: Received KVCacheSwap message: 171 kv cache blocks need "
                   "to swap in!"]) == []


def test_tgi_tracing_lines_are_still_tgi() -> None:
    parser = make_parser(Server.AUTO)
    parser.feed("2024-07-01T10:00:00.123456Z  INFO text_generation_launcher: Starting shard rank=0")
    parser.flush()
    assert parser.server is Server.TGI  # type: ignore[union-attr]
