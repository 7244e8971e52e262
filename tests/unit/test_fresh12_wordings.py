"""Shapes the fresh12 batch showed the parsers missing, each rendered from its engine's or client's source format and
beside its near miss. The catalogued statements themselves are rendered by test_catalogue behind every prefix; these
are the ones that live in parser code (a record's file, a fact's pattern, a signature) and the cases a wrapper or
paste makes."""

from __future__ import annotations

from agent.records import CapacityFact, Event, ServerStats
from tests.unit.wordings import kinds, records

SITE = "/usr/local/lib/python3.12/dist-packages"


# vllm-project/vllm vllm/engine/multiprocessing/engine.py (0.6–0.10) run_mp_engine: building or running the engine
# raised -> `logger.exception(e)`, `engine_alive.value = False`, re-raise: the record is the exception's own text
def test_v0s_run_mp_engine_logging_the_exception_is_the_engines_death() -> None:
    lines = ["ERROR 06-26 19:39:06 [engine.py:458] UR error",
             "ERROR 06-26 19:39:06 [engine.py:458] Traceback (most recent call last):",
             f'ERROR 06-26 19:39:06 [engine.py:458]   File "{SITE}/vllm/engine/multiprocessing/engine.py", line 446, '
             "in run_mp_engine"]
    assert kinds(lines) == ["engine_dead"]
    # 0.6's prefix (no brackets), ROCm's HIP error: the HIP runtime's error is a GPU runtime error like CUDA's
    hip = ["ERROR 11-29 09:36:15 engine.py:366] HIP error: invalid argument",
           "ERROR 11-29 09:36:15 engine.py:366] HIP kernel errors might be asynchronously reported at some other API "
           "call, so the stacktrace below might be incorrect."]
    assert kinds(hip) == ["cuda_error", "engine_dead"]
    assert kinds(["INFO 11-29 09:36:15 engine.py:366] Aborted request cmpl-1."]) == []


# ROCm's HSA runtime out of device memory (hsa_status_t HSA_STATUS_ERROR_OUT_OF_RESOURCES), as HIP reports a failed
# allocation or launch; a name that is never printed for anything but exhausted resources
def test_rocms_hsa_out_of_resources_is_an_oom() -> None:
    line = ("HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. This error may "
            "also occur when the core runtime library needs to spawn threads or create internal OS-specific events.")
    assert kinds([line]) == ["oom"]


# vllm/v1/worker/gpu_worker.py determine_available_memory logs the KV budget; a negative one is what the profile left
# (weights and activations over util x VRAM), and check_enough_kv_cache_memory then raises "No available memory for
# the cache blocks"; the wording alone tells vLLM's stream even without its logger's prefix
def test_a_negative_kv_budget_is_a_startup_oom_and_the_budget_lines_tell_vllm() -> None:
    lines = ["Loading model weights took 27.5376 GB", "Available KV cache memory: -0.87 GiB"]
    assert kinds(lines) == ["oom"]
    # the weights are a fact; a budget below zero is no cache size
    assert {r.name for r in records(lines) if isinstance(r, CapacityFact)} == {"weights_bytes"}
    plain = records(["Model loading took 13.72 GiB memory and 62.336108 seconds",
                     "Available KV cache memory: 36.56 GiB"])
    assert not [r for r in plain if isinstance(r, Event)]
    assert {r.name for r in plain if isinstance(r, CapacityFact)} >= {"kv_cache_bytes"}


# InternLM/lmdeploy: TurboMind's C++ sizing lines (BlockManager.cc, LlamaBatch.cc, LlamaTritonModel.cc) and the
# PyTorch engine's `Building CacheEngine with config: \n{cache_config}.` (pytorch/engine/executor/base.py)
def test_lmdeploys_kv_blocks_session_cut_and_cache_config_are_facts() -> None:
    def facts(line: str) -> dict[str, float | str]:
        return {r.name: r.value for r in records([line]) if isinstance(r, CapacityFact)}

    assert facts("[TM][INFO] [BlockManager] max_block_count = 1740") == {"gpu_blocks": 1740.0}
    assert facts("[TM][WARNING] No enough blocks for `session_len` (131072), `session_len` truncated to 111360.") == {
        "max_model_len": 111360.0}
    assert facts("[TM][WARNING] [LlamaTritonModel] `max_context_token_num` is not set, default to 40960.") == {
        "max_batch_prefill_tokens": 40960.0}
    config = ("CacheConfig(max_batches=256, block_size=64, num_cpu_blocks=0, num_gpu_blocks=2658, window_size=-1, "
              "cache_max_entry_count=0.8, max_prefill_token_num=4096, enable_prefix_caching=False, quant_policy=0)")
    assert facts(config) == {"max_num_seqs": 256.0, "block_size": 64.0, "gpu_blocks": 2658.0}
    # before the blocks are counted the config holds 0 of them: no fact of that
    assert "gpu_blocks" not in facts(config.replace("num_gpu_blocks=2658", "num_gpu_blocks=0"))
    assert facts("[TM][INFO] [BlockManager] block_size = 0.844 MB") == {}


# An engine's /metrics pasted into a thread: a load gauge's sample is a load sample (the names a live scrape reads,
# agent/sources/engine_metrics.py, and Triton's per-model queue depth); HELP/TYPE lines and counters are not load
def test_an_expositions_load_gauges_are_samples_and_a_queue_that_fills_is_pending() -> None:
    lines = ["# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution.",
             "# TYPE nv_inference_pending_request_count gauge",
             'nv_inference_pending_request_count{model="default",version="1"} 17']
    out = records(lines)
    assert [r.waiting for r in out if isinstance(r, ServerStats)] == [17]
    assert kinds(lines) == ["pending"]
    llama = records(["llamacpp:requests_processing 3", "llamacpp:requests_deferred 0",
                     "llamacpp:kv_cache_usage_ratio 0.42"])
    samples = [r for r in llama if isinstance(r, ServerStats)]
    assert [(s.running, s.waiting, s.kv_usage_ratio) for s in samples] == [(3, None, None), (None, 0, None),
                                                                         (None, None, 0.42)]
    vllm = records(['vllm:num_requests_waiting{engine="0",model_name="qwen"} 5.0'])
    assert [r.waiting for r in vllm if isinstance(r, ServerStats)] == [5]
    # not load: a counter, a ratio out of range, prose naming a gauge
    assert not [r for r in records(["llamacpp:prompt_tokens_total 143", "llamacpp:kv_cache_usage_ratio 7",
                                    "the nv_inference_pending_request_count gauge reads 17"])
                if isinstance(r, ServerStats)]


# sgl-project/sglang scheduler.py: the decode retraction's message, counts cut off by a paste or quoted by its words;
# its source literal in a diff (`"Decode out of memory happened. "` then the f-string) is no retraction
def test_sglangs_decode_retraction_by_its_words_alone_is_a_preemption() -> None:
    assert kinds(['sometimes no enough memory and thus occur "Decode out of memory happened". This lowers '
                  "throughput"]) == ["preemption"]
    assert kinds(["[2025-06-01 10:00:00 TP0] Decode out of memory happened."]) == ["preemption"]
    assert kinds(['            logger.info("Decode out of memory happened. "',
                  '                f"#retracted_reqs: {len(retracted_reqs)}, "']) == []
    # the watchdog's wording names SGLang's stream, whose watchdog kills the scheduler
    assert kinds(["it crash with Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)."]) == [
        "deadline_exceeded", "engine_dead"]


# libstdc++'s verbose terminate handler (vterminate.cc) prints `  what():  <message>` under its first line and aborts:
# the second line alone, as a paste keeps it, is the process's end
def test_the_terminate_handlers_what_line_is_the_processs_end() -> None:
    what = ("  what():  [PG ID 2 PG GUID 3 Rank 1] Process group watchdog thread terminated with exception: "
            "CUDA error: an illegal memory access was encountered")
    assert kinds([what]) == ["cuda_error", "engine_dead"]
    assert kinds(["the exception's what(): method returns the message"]) == []


# ggml-org/llama.cpp tools/server/server.cpp: SLT_INF prints `slot <func>: id N | task T | …`, T = -1 while a slot is
# set up at start; a line with a request's task id carries that request's sizes, no start-up facts
def test_a_slot_line_about_a_request_gives_no_start_up_facts() -> None:
    assert not [r for r in records(["slot operator(): id  0 | task 44674 | ...  n_ctx_slot = 8192",
                                    "slot update_slots: id  0 | task 5 | input truncated, n_ctx = 4096, n_keep = 0"])
                if isinstance(r, CapacityFact)]
    start = records(["slot   load_model: id  0 | task -1 | new slot n_ctx_slot = 4096"])
    assert [(r.name, r.value) for r in start if isinstance(r, CapacityFact)] == [("max_model_len", 4096.0)]


# mlc-ai/mlc-llm python/mlc_llm/serve/engine.py stamps `[YYYY-MM-DD HH:MM:SS] INFO engine.py:N:` as SGLang does; its
# start-up wordings keep the stream MLC's (read by the generic path), so its KV budget is a fact
def test_mlcs_python_engine_lines_are_not_taken_for_sglangs() -> None:
    lines = ['[2024-01-14 15:35:39] INFO engine.py:186: Estimated KVCacheConfig "max_total_sequence_length": 18267.',
             "[2024-01-14 15:35:39] INFO engine.py:191: Estimated total single GPU memory usage: 23374.68 MB "
             "(Parameters: 12852.51 MB. KVCache: 9590.18 MB. Temporary buffer: 932.00 MB)"]
    facts = {r.name: r.value for r in records(lines) if isinstance(r, CapacityFact)}
    assert facts["kv_cache_tokens"] == 18267.0 and round(float(facts["weights_bytes"]) / 1024**2, 2) == 12852.51


# ollama/ollama server/sched.go: placing a model, the scheduler logs the slots it will run (`parallel`) and the VRAM
# free for it in bytes (`available`), before the runner starts
def test_ollamas_scheduler_placing_a_model_gives_its_slots_and_free_vram() -> None:
    line = ('time=2025-07-24T18:29:07.044+09:00 level=INFO source=sched.go:788 msg="new model will fit in available '
            'VRAM in single GPU, loading" model=/models/blobs/sha256-e7 gpu=0 parallel=2 available=36083236864 '
            'required="20.1 GiB"')
    facts = {r.name: r.value for r in records([line]) if isinstance(r, CapacityFact)}
    assert facts == {"max_num_seqs": 2.0, "device_free_bytes": 36083236864.0}
    assert not [r for r in records(['time=2025-07-24T18:29:07.044+09:00 level=INFO source=sched.go:788 msg="updated '
                                    'VRAM based on existing loaded models" gpu=GPU-1 library=cuda total="23.6 GiB"'])
                if isinstance(r, CapacityFact) and r.name == "max_num_seqs"]


# vllm-project/vllm vllm/core/scheduler.py (V0) _swap_out: a swap preemption with the CPU swap space full raises
# "Aborted due to the lack of CPU swap space. Please increase the swap space to avoid this error."
def test_v0s_swap_preemption_out_of_cpu_swap_space_is_a_preemption_and_an_oom() -> None:
    line = ("RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap space to avoid this "
            "error.")
    assert kinds([line]) == ["engine_dead", "oom", "preemption"]  # raised, the step's end too (fresh14's reading)


# fresh13's shapes that live in parser code: ggml-cuda.cu's ggml_cuda_host_malloc warns of pinned host memory it could
# not get and falls back to ordinary memory; llama.cpp's mid-2024 JSON log gives its slots' sizes as fields;
# trtllm-serve's /metrics gauges
def test_pinned_host_memory_is_no_oom_json_slot_sizes_are_facts_and_trtllm_gauges_are_load() -> None:
    assert kinds(["ggml_cuda_host_malloc: failed to allocate 349659.17 MiB of pinned memory: out of memory"]) == []
    assert kinds(["ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc "
                  "failed: out of memory"]) == ["oom"]
    json_lines = ["llama_new_context_with_model: graph splits = 1",  # the runner's own lines tell its stream
                  '{"function":"initialize","level":"INFO","line":448,"msg":"initializing slots","n_slots":4,'
                  '"tid":"1","timestamp":1713627866}',
                  '{"function":"initialize","level":"INFO","line":457,"msg":"new slot","n_ctx_slot":8192,'
                  '"slot_id":0,"tid":"1","timestamp":1713627866}']
    facts = {r.name: r.value for r in records(json_lines) if isinstance(r, CapacityFact)}
    assert facts["max_num_seqs"] == 4.0 and facts["max_model_len"] == 8192.0
    gauges = records(['pytrtllm:num_requests_waiting{model_name="deepseek-ai/DeepSeek-V3-0324"} 2.0'])
    assert [r.waiting for r in gauges if isinstance(r, ServerStats)] == [2]


# Habana's PyTorch bridge (tgi-gaudi, vLLM's HPU fork): `FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for
# size::N (M)MB` is the HPU's device memory run out
def test_habanas_device_memory_allocation_failure_is_an_oom() -> None:
    assert kinds(["Check $HABANA_LOGS/ for details[Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for "
                  "size::1073741824 (1024)MB"]) == ["oom"]
