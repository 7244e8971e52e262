"""Shapes the fresh14 batch showed the parsers missing, each rendered from its engine's or client's source format and
beside its near miss. The catalogued statements themselves are rendered by test_catalogue behind every prefix; these
are the ones that live in parser code (a fact's pattern, a signature, a stream's detection, an exception to a
wording) and the cases a paste or a terminal makes."""

from __future__ import annotations

from agent.records import CapacityFact, Server
from parsers import detect
from tests.unit.wordings import kinds, records

MIB = 1024**2


# NVIDIA/TensorRT-LLM cpp/tensorrt_llm/runtime/tllmRuntime.cpp: the engine's size once deserialized (its weights) and
# the execution context's workspace (the activations), the two parts of the budget besides the KV cache
def test_tensorrt_llms_engine_size_and_context_memory_are_the_weights_and_the_activations() -> None:
    lines = ["[TensorRT-LLM][INFO] Loaded engine size: 17360 MiB",
             "[TensorRT-LLM][INFO] Allocated 3456.01 MiB for execution context memory."]
    facts = {r.name: r.value for r in records(lines) if isinstance(r, CapacityFact)}
    assert facts == {"weights_bytes": 17360 * MIB, "activation_peak_bytes": 3456.01 * MIB}
    assert kinds(lines) == []
    # another engine's "engine size" is no TensorRT engine: a stream not TensorRT-LLM's gives no fact
    assert not [r for r in records(["INFO 01-22 18:27:20 llm_engine.py:100] Loaded engine size: 12 MiB"])
                if isinstance(r, CapacityFact)]


# sgl-project/sglang python/sglang/srt/entrypoints/engine.py _scheduler_died_error, and the disaggregation's KV
# handshake (disaggregation/mooncake/conn.py, `kv_mgr.record_failure`): both wordings are SGLang's alone, so a
# traceback's last line or a prefill worker's error names the stream even without SGLang's prefix
def test_sglangs_scheduler_died_and_kv_handshake_timeout_name_their_engine() -> None:
    died = ("RuntimeError: Rank 0 scheduler died during initialization (exit code: -3). If exit code is -9 (SIGKILL), "
            "a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.")
    assert detect([died]) is Server.SGLANG
    assert kinds([died]) == ["engine_dead"]  # the OOM-killer sentence is the launcher's hint, not an OOM
    poll = ("Prefill bootstrap failed for request rank=2 req.rid='d3fd6575' req.bootstrap_room=5975098084415727586 "
            "with exception KVTransferError(bootstrap_room=5975098084415727586): Request 5975098084415727586 timed "
            "out after 300.0s in KVPoll.Bootstrapping")
    assert detect([poll]) is Server.SGLANG
    events = [r for r in records([poll]) if getattr(r, "kind", None) is not None]
    assert [(e.kind.value, e.fields["scope"], e.fields["knob"]) for e in events] == [  # type: ignore[union-attr]
        ("deadline_exceeded", "engine", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT")]


# vllm-project/vllm vllm/core/scheduler.py (V0) _swap_out: the CPU swap space is full, it raises, and nothing in the
# step catches it, so the raised exception is the engine's end as well as a swap preemption out of room
def test_v0s_cpu_swap_space_raised_is_also_the_engines_end() -> None:
    raised = ("RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap space to avoid this "
              "error.")
    assert kinds([raised]) == ["engine_dead", "oom", "preemption"]
    # the message without the exception's type (as a summary quotes it) is the preemption and the pool, not the end
    assert kinds(["ERROR 02-01 06:36:05 scheduler.py:900] Aborted due to the lack of CPU swap space."]) == [
        "oom", "preemption"]


# A change's description of what a server does is no refusal; a log line reporting one still is
def test_a_description_of_rejecting_with_503_is_no_refusal() -> None:
    prose = ("Adds a `--max-queued-requests` flag to the diffusion runtime that bounds the scheduler's "
             "`waiting_queue` and rejects overflow generation requests with HTTP 503. Mirrors the existing behavior.")
    assert kinds([prose]) == []
    assert kinds(["openai.InternalServerError: Error code: 503 - {'error': 'Service Unavailable'}"]) == ["http_503"]


# Kubernetes' scheduler speaks of a node's memory, not of an allocation that failed; an OOMKilled container is
# a status, not a word in a sentence
def test_a_pod_that_cannot_be_scheduled_is_no_oom_and_oomkilled_prose_no_death() -> None:
    assert kinds(["# The second pod cannot be scheduled because of insufficient memory. The first pod is fine."]) == []
    assert kinds(["  Warning  FailedScheduling  2m  default-scheduler  0/3 nodes are available: 3 Insufficient "
                  "memory."]) == []
    # the same signature's other wordings still read (Ollama's llm/server.go, a model over the host's memory)
    assert kinds(['time=2024-05-01T10:00:00.000Z level=ERROR source=sched.go:186 msg="error loading llama server" '
                  'error="model requires more system memory (16.5 GiB) than is available (8.0 GiB)"']) == ["oom"]
    prose = ("One key concern: Kubernetes OOMKilled reflects host/cgroup memory pressure (system RAM), not GPU memory "
             "exhaustion, and does not set the container termination reason to OOMKilled.")
    assert kinds([prose]) == []
    for status in ["      Reason:       OOMKilled", "vllm-0   0/1     OOMKilled   3 (1m ago)   10m",
                   '"reason": "OOMKilled"', "Last State:     Terminated (OOMKilled)"]:
        assert kinds([status]) == ["engine_dead"], status


# ggml/src/ggml-vulkan/ggml-vulkan.cpp prints the caught exception after both the device buffer's failure and the
# pinned host buffer's: only the former is an OOM (the latter falls back to ordinary host memory)
def test_vulkans_exception_text_follows_its_line_before() -> None:
    device = ["ggml_vulkan: Device memory allocation of size 369827840 failed.",
              "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory"]
    assert kinds(device) == ["oom"]
    assert kinds([*device, "double free or corruption (out)"]) == ["engine_dead", "oom"]
    pinned = ["ggml_vulkan: Failed to allocate pinned memory.",
              "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory"]
    assert kinds(pinned) == []


# torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp's heartbeat monitor, as a terminal hard-wraps it at 120 columns:
# the watchdog's stall and the fatal line still read on the lines they land on
def test_a_hard_wrapped_nccl_watchdog_stall_and_its_fatal_line() -> None:
    lines = ["[rank6]:[E429 13:55:49.384372190 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 6] "
             "ProcessGroupNCCL'",
             "s watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives. This "
             "typically indi",
             "[rank6]:[F429 14:03:49.385461578 ProcessGroupNCCL.cpp:1554] [PG ID 0 PG GUID 0(default_pg) Rank 6] [PG "
             "ID 0 PG GUID ",
             "0(default_pg) Rank 6] Terminating the process after attempting to dump debug info, due to "
             "ProcessGroupNCCL"]
    assert kinds(lines) == ["engine_dead", "nccl_timeout"]
    # the start-up line that names the heartbeat's limit is no stall
    assert kinds(["[rank0]:[I1019 01:04:03.356947152 ProcessGroupNCCL.cpp:913] [PG 0 Rank 0] ProcessGroupNCCL "
                  "initialization options: TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480"]) == []
