"""Shapes the fresh7 batch showed the parsers missing (or reading as an incident that was not one), each rendered
from its engine's or client's source format and beside its near miss (the same words, no incident). The
catalogued statements themselves are rendered by test_catalogue behind every prefix of their source."""

from __future__ import annotations

from agent.records import CapacityFact, Event
from tests.unit.wordings import kinds, records


def _facts(lines: list[str]) -> dict[str, float]:
    return {r.name: r.value for r in records(lines) if isinstance(r, CapacityFact)}


# ggml-cuda.cu ggml_backend_cuda_buffer_type_alloc_buffer: "allocating %.2f MiB on device %d: cudaMalloc failed: %s"
_GGML_OOM = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc failed: "
             "out of memory")


def test_a_sentence_naming_a_quoted_call_and_its_error_is_advice() -> None:
    # the call in a code span and its error after it, in a sentence that speaks to the reader
    assert kinds(["The error means a call to `cudaMalloc` failed with an out of memory error; if you see it, "
                   "free some memory first."]) == []
    assert kinds(["A call to `cudaMalloc` failed with out of memory, something you can fix with more RAM."]) == []


def test_the_allocation_failure_as_logged_stays_an_oom() -> None:
    assert kinds([_GGML_OOM]) == ["oom"]
    # backticks of a log line's own that address no reader (a path in a code span) keep it a log line
    assert kinds(["error: loading `model.gguf` failed: out of memory"]) == ["oom"]


# torch_npu (Ascend/pytorch, torch_npu/csrc/core/npu/NPUCachingAllocator.cpp, DeviceCachingAllocator::malloc):
# AT_ERROR("NPU out of memory. Tried to allocate ", size, " (NPU ", device, "; ", total, " total capacity; ",
# allocated, " already allocated; ", active, " current active; ", free, " free; ", …, " reserved in total by
# PyTorch)", " If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
_NPU_OOM = ("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 3; 32.00 GiB total capacity; 29.50 GiB "
            "already allocated; 29.50 GiB current active; 512.00 MiB free; 30.00 GiB reserved in total by PyTorch) If "
            "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")


def test_torch_npu_out_of_memory_is_an_oom_with_its_sizes() -> None:
    events = [r for r in records([_NPU_OOM]) if isinstance(r, Event)]
    assert [e.kind.value for e in events] == ["oom"]
    assert events[0].fields == {"requested_bytes": 2 * 2**30, "gpu": 3, "total_bytes": 32 * 2**30,
                                "free_bytes": 512 * 2**20}
    # its older allocator had no "current active" field
    assert kinds(["NPU out of memory. Tried to allocate 20.00 MiB (NPU 0; 15.00 GiB total capacity; 14.90 GiB "
                   "already allocated; 10.00 MiB free; 0 bytes cached)"]) == ["oom"]


def test_torch_npu_memory_settings_are_no_oom() -> None:
    assert kinds(["export PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256"]) == []


# vLLM V0 engine/multiprocessing/__init__.py ENGINE_DEAD_ERROR: the 500 body of every request after the death
_MQ_DEAD = "Engine loop is not running. Inspect the stacktrace to find the original error: {}."


def test_a_client_relaying_v0_engine_dead_body_is_a_death() -> None:
    assert kinds([_MQ_DEAD.format("RuntimeError('Engine process (pid 402) died.')")]) == ["engine_dead"]
    # 0.6.0's constant wording, and AsyncLLMEngine.generate's
    assert kinds(["Engine loop is not running. Inspect the output to find the stacktrace of the error that caused "
                   "the engine loop to stop (MQEngineDeadError)."]) == ["engine_dead"]
    assert kinds(["openai.InternalServerError: Background loop has errored already."]) == ["engine_dead"]


def test_a_relayed_death_keeps_the_oom_it_names() -> None:
    line = _MQ_DEAD.format("OutOfMemoryError('HIP out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total "
                           "capacity of 63.98 GiB of which 100.00 MiB is free.')")
    assert kinds([line]) == ["engine_dead", "oom"]


def test_the_engine_loop_quoted_in_advice_is_no_death() -> None:
    assert kinds(["If you see `Engine loop is not running. Inspect the stacktrace to find the original error`, "
                   "restart the server."]) == []


_V05 = "2024-06-10 13:26:25 "


def test_v0_engine_step_calling_the_step_is_the_loop_ending() -> None:
    # async_llm_engine.py AsyncLLMEngine.engine_step, called by run_engine_loop, which catches nothing of it
    frames = [f'{_V05}  File "/opt/venv/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 510, in '
              "engine_step",
              f"{_V05}    request_outputs = await self.engine.step_async(virtual_engine)",
              f'{_V05}  File "/opt/venv/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 210, in '
              "step_async"]
    assert kinds(frames) == ["engine_dead"]
    assert kinds([f'{_V05}  File "/opt/vllm/vllm/engine/async_llm_engine.py", line 393, in engine_step',
                   f"{_V05}    request_outputs = await self.engine.step.remote()"]) == ["engine_dead"]


def test_v0_engine_step_adding_a_request_is_no_death() -> None:
    # the same frame over add_request_async: a ValueError caught there and handed to that request alone
    assert kinds([f'{_V05}  File "/opt/venv/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 480, '
                   "in engine_step",
                   f"{_V05}    await self.engine.add_request_async(**new_request)"]) == []


_SGL = "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py"


def test_a_traceback_out_of_run_scheduler_process_is_the_scheduler_dying() -> None:
    lines = ["Traceback (most recent call last):",
             f'  File "{_SGL}", line 2390, in run_scheduler_process',
             "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
             f'  File "{_SGL}", line 310, in __init__',
             "    self.tp_worker = TpWorkerClass(",
             "ValueError: The model's max seq len is larger than the KV cache"]
    assert kinds(lines) == ["engine_dead"]


def test_a_py_spy_dump_naming_run_scheduler_process_is_no_death() -> None:
    # py-spy dump prints a live thread's frames as `function (file:line)`
    assert kinds(['Thread 4711 (idle): "MainThread"',
                   "    event_loop_normal (sglang/srt/managers/scheduler.py:1007)",
                   "    run_scheduler_process (sglang/srt/managers/scheduler.py:2390)"]) == []


def test_an_sdk_error_message_shown_alone_keeps_its_status() -> None:
    # openai-node APIError.makeMessage: `${status} ${msg}`, or `${status} status code (no body)`
    assert kinds(["503 The server is overloaded, please try again later."]) == ["http_503"]
    assert kinds(["Error: 503 status code (no body)"]) == ["http_503"]
    assert kinds(["429 You exceeded your current quota, please check your plan."]) == ["http_429"]


def test_a_count_of_503_at_a_line_start_is_no_status() -> None:
    assert kinds(["503 requests completed, 0 failed"]) == []


def test_a_json_record_naming_its_status_field_error_code() -> None:
    assert kinds(['{"type":"ERROR_MESSAGE","error":"Resource exhausted","error_code": 429}']) == ["http_429"]
    assert kinds(['{"status_code":503,"detail":"upstream unavailable"}']) == ["http_503"]
    # a number 429 under another key, and an error code of no status
    assert kinds(['{"step_index":429,"error_code":null}']) == []
    assert kinds(['{"error_code":"RESOURCE_EXHAUSTED","count":429}']) == []


def test_revchatgpt_error_ends_with_the_status() -> None:
    # revChatGPT V1 Error.__str__: f"{self.source}: {self.message} (code: {self.code})", code = status
    assert kinds(['OpenAI: {"detail":"Too many requests in 1 hour. Try again later."} (code: 429)']) == ["http_429"]
    assert kinds(['OpenAI: {"detail":"Unauthorized"} (code: 401)']) == []


def test_memgpt_backoff_prints_only_rate_limit_errors() -> None:
    # aretry_with_exponential_backoff catches openai.RateLimitError alone and prints it
    assert kinds(["acreate (backoff): caught error: You exceeded your current quota"]) == ["http_429"]
    # the API's 429 message, under openai v0's class name
    assert kinds(["openai.error.RateLimitError: Rate limit reached for default-gpt-3.5-turbo in organization "
                   "org-abc on requests per min. Limit: 3 / min. Please try again in 20s."]) == ["http_429"]
    assert kinds(["Exception: Maximum number of retries (20) exceeded."]) == []


def test_the_inference_api_loading_body_is_its_503() -> None:
    # huggingface_hub InferenceClient.post: a 503 is a model still loading, logged and retried
    assert kinds(['{"error":"Model gpt2 is currently loading","estimated_time":35.5}']) == ["http_503"]
    assert kinds(["INFO:huggingface_hub.inference._client:Waiting for model to be loaded on the server: 503 "
                   "Server Error: Service Unavailable for url: https://api-inference.huggingface.co/models/gpt2"]) \
        == ["http_503"]
    assert kinds(["{'error': 'Model gpt3 does not exist'}"]) == []


def test_the_old_server_refusing_for_want_of_a_slot_is_a_queue_refusal() -> None:
    # process_tasks: LOG_TEE("slot unavailable\n"); send_error(task, "slot unavailable")
    assert kinds(["slot unavailable"]) == ["queue_full"]
    assert kinds(['{"content":"slot unavailable","stop":true}']) == ["queue_full"]
    assert kinds(["all slots are idle and system prompt is empty, clear the KV cache"]) == []


# TGI launcher main: `info!("{:?}", args)`, the Args struct's Debug form, model_id and revision first
_ARGS = ('{ model_id: "bigscience/bloom", revision: None, validation_workers: 2, sharded: Some(true), num_shard: '
         "Some(2), quantize: None, max_concurrent_requests: 64, max_best_of: 2, max_stop_sequences: 4, "
         "max_input_length: 1000, max_total_tokens: 2048, waiting_served_ratio: 1.2, max_batch_prefill_tokens: 1024,")


def test_tgi_args_dump_without_its_name_gives_the_limits() -> None:
    facts = _facts([_ARGS])
    assert {k: facts[k] for k in ("max_concurrent_requests", "max_model_len", "max_batch_prefill_tokens",
                                  "tensor_parallel_size")} == {"max_concurrent_requests": 64, "max_model_len": 2048,
                                                               "max_batch_prefill_tokens": 1024,
                                                               "tensor_parallel_size": 2}


def test_another_programs_struct_with_a_model_id_is_not_tgi() -> None:
    assert _facts(['{ model_id: "x", max_concurrent_requests: 64, max_total_tokens: 4096 }']) == {}


# model_runner.py ModelRunner.init_memory_pool: f"Memory pool end. avail mem={…:.2f} GB", GiB as SGLang counts
def test_sglang_memory_left_after_the_kv_pool_is_a_fact() -> None:
    facts = _facts(["[2024-10-22 06:31:49 TP0] Memory pool end. avail mem=2.50 GB"])
    assert facts == {"free_after_kv_bytes": 2.5 * 2**30}


def test_sglang_memory_before_the_weights_stays_its_own_fact() -> None:
    assert _facts(["[2024-10-22 06:30:01 TP0] Load weight begin. avail mem=78.00 GB"]) == {
        "device_free_bytes": 78 * 2**30}


# gpud newXIDErrorReason: "XID %d(%s) detected on %s", later "XID %d (%s) detected on GPU %s"
def test_gpud_naming_an_xid_is_an_xid_event() -> None:
    events = [r for r in records(["XID 31 (MMU Fault) detected on GPU 0000:3b:00.0 UUID:GPU-ac896b35"])
              if isinstance(r, Event)]
    assert [(e.kind.value, e.fields["xid"], e.fields["pci_bus"]) for e in events] == [("xid", 31, "0000:3b:00.0")]
    assert kinds(["XID 13 detected on PCI:0000:ae:00"]) == ["xid"]


def test_gpud_xid_79_is_an_xid_and_the_bus_loss_it_reports() -> None:
    # the code is named (xid); its words are the driver's own for a lost GPU (gpu_lost, as the kernel line is)
    assert kinds(["XID 79(GPU has fallen off the bus) detected on PCI:0000:ae:00"]) == ["gpu_lost", "xid"]


def test_gpud_healthy_states_are_no_xid() -> None:
    assert kinds(["XIDComponent is healthy"]) == []
    assert kinds(["No XID found"]) == []


# Triton core: ModelLifeCycle::CreateModel and ModelRepositoryManager::CheckNode
def test_triton_model_that_could_not_load_is_a_death_at_start_up() -> None:
    assert kinds(["E0103 08:11:15.842858 1 model_lifecycle.cc:626] failed to load 'llama' version 2: Internal: "
                   "unexpected error when creating modelInstanceState"]) == ["engine_dead"]
    assert kinds(["ensemble 'ensemble' depends on 'llama' which has no loaded version. Model 'llama' loading "
                   "failed with error: version 2 is at UNAVAILABLE state"]) == ["engine_dead"]


def test_triton_model_that_loaded_is_no_death() -> None:
    assert kinds(["I0103 08:11:15.842858 1 model_lifecycle.cc:818] successfully loaded 'llama' version 2"]) == []
