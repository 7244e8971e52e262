"""Shapes the fresh18 batch showed the parsers missing that live in parser code (a request log's outcome, a status
before an error page, driver error names, a locale's decimal mark, a traceback's indent); the catalogued statements
are rendered by test_catalogue behind every prefix."""

from __future__ import annotations

import dataclasses

import pytest

from agent.records import CapacityFact, Event, EventKind
from tests.unit.wordings import kinds, records

MIB = 1024 * 1024


# sgl-project/sglang managers/tokenizer_manager.py (`--log-requests`): the `Finish:` line logs the request's content
# and ends with its meta_info; an abort's finish reason is the scheduler's own message (FINISH_ABORT.to_json). That
# message is read, and nothing else of the line reaches a record
def test_sglangs_request_log_gives_its_abort_message_and_nothing_else() -> None:
    line = ("[2026-05-20 08:02:44] Finish: obj=GenerateReqInput(rid='bf890d9c', text='SECRET PROMPT TEXT', "
            "sampling_params={'max_new_tokens': 32000}), out={'meta_info': {'id': 'bf890d9c', 'finish_reason': "
            "{'type': 'abort', 'message': 'Request running timeout reached.', 'status_code': 503, 'err_type': None}, "
            "'prompt_tokens': 32472}}")
    (event,) = [r for r in records([line]) if isinstance(r, Event)]
    assert event.kind is EventKind.DEADLINE_EXCEEDED
    assert event.fields["scope"] == "request" and event.fields["timeout_on"] == "generation"
    assert "SECRET" not in repr(dataclasses.asdict(event))
    # a request that finished, and one whose abort quotes text of its own, give nothing
    assert kinds([line.replace("'type': 'abort', 'message': 'Request running timeout reached.'",
                               "'type': 'stop', 'matched': 2'")]) == []
    assert kinds([line.replace("Request running timeout reached.", "it's over")]) == []


# a client that prints the status it got and the proxy's error page after it (Squid's, nginx's)
def test_a_504_before_a_proxys_error_page_is_a_timeout() -> None:
    line = ('RuntimeError: Failed to request to remote API after 3 attempts: 504 <!DOCTYPE html PUBLIC '
            '"-//W3C//DTD HTML 4.01//EN" "http://www.w3.org/TR/html4/strict.dtd">')
    assert kinds([line]) == ["deadline_exceeded"]
    assert kinds(["Failed to request to remote API after 3 attempts: 404 <!DOCTYPE html>"]) == []


# CUDA's driver API names its errors (cuGetErrorName); out of memory is an OOM, any other a CUDA error
@pytest.mark.parametrize(("line", "kind"), [
    ("tvm.error.InternalError: CUDA driver error (jit_kernels/impls/smxx_layout.hpp:72): 719 "
     "(CUDA_ERROR_LAUNCH_FAILED)", "cuda_error"),
    ("RuntimeError: Triton Error [CUDA]: CUDA_ERROR_ILLEGAL_ADDRESS", "cuda_error"),
    ("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY", "oom"),
])
def test_cuda_driver_error_names(line: str, kind: str) -> None:
    assert kinds([line]) == [kind]


# NVIDIA's kernel module: the resource manager could not back an allocation (mem_desc.c); on a unified-memory GPU
# the engine's own out of memory
def test_the_kernel_modules_failed_allocation_is_an_oom() -> None:
    assert kinds(["NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned "
                  "from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"]) == ["oom"]
    assert kinds(["NVRM: loading NVIDIA UNIX Open Kernel Module for aarch64  580.95.05"]) == []


# a traceback pasted indented under a report's "Stack trace:", the terminal's padding after each line
def test_an_indented_bare_timeout_error_is_the_engines() -> None:
    lines = ["  Traceback (most recent call last):          ",
             '    File "vllm/distributed/device_communicators/shm_broadcast.py", line 631, in timeout_ms      ',
             "      raise TimeoutError                      ",
             "  TimeoutError                                "]
    (event,) = [r for r in records(lines) if isinstance(r, Event)]
    assert event.kind is EventKind.DEADLINE_EXCEEDED and event.fields["scope"] == "engine"


# ggml prints its buffers with `%.2f` under the process's locale, and names an RPC server's device by its address
def test_llama_cpp_buffers_under_a_decimal_comma_and_on_an_rpc_device() -> None:
    lines = ["llama_kv_cache_init:      SYCL1 KV buffer size =  1024,00 MiB",
             "llama_new_context_with_model:      SYCL1 compute buffer size =   560,00 MiB"]
    facts = {r.name: r.value for r in records(lines) if isinstance(r, CapacityFact)}
    assert facts["kv_cache_bytes"] == 1024 * MIB and facts["activation_peak_bytes"] == 560 * MIB
    rpc = ["llama_kv_cache_unified: RPC[10.0.2.209:50052] KV buffer size =   600.00 MiB"]
    assert {r.name: r.value for r in records(rpc) if isinstance(r, CapacityFact)}["kv_cache_bytes"] == 600 * MIB


# LM Studio's guardrail refuses a model its memory estimate does not fit, as Ollama's "model requires more system
# memory" does: not enough memory at load
def test_lm_studios_load_guardrail_is_an_oom() -> None:
    line = ("[2025-03-07 01:45:37.078] [error] [LMSInternal][Client=LM Studio][Endpoint=loadModel] Error in channel "
            "handler: Error: Model loading aborted due to insufficient system resources. Overloading the system will "
            "likely cause it to freeze.")
    assert kinds([line]) == ["oom"]


# a proposal describes what the server will answer; a log line reports what it answered
def test_a_proposals_will_be_rejected_with_503_is_no_refusal() -> None:
    assert kinds(["Once the queue reaches a specified threshold, any new incoming requests will be rejected "
                  "immediately with an HTTP 503 (Service Unavailable) response."]) == []
    assert kinds(["openai.APIStatusError: Error code: 503 - {'error': 'Service Unavailable'}"]) == ["http_503"]
