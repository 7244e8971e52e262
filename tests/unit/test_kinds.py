"""One real (or source-rendered) line per event kind and server: the table a reviewer reads to see what
each parser recognises. Lines are from the engines' logging calls (parsers/catalogue) and public issues."""

from __future__ import annotations

import pytest

from agent.records import Event, EventKind, Phase, Server
from parsers import make_parser

from .conftest import REF_TIME, run

K = EventKind
CASES: list[tuple[Server, str, EventKind, Phase]] = [
    # vLLM
    (Server.VLLM, "(EngineCore_DP0 pid=1) ERROR 02-03 08:00:41 [core.py:866] ValueError: No available memory for the "
     "cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", K.OOM, Phase.STARTUP),
    # V1 runs the sampler warm-up only while initializing (profile run, compile/warm-up): a start-up failure
    (Server.VLLM, "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please "
     "try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.", K.OOM, Phase.STARTUP),
    (Server.VLLM, "RuntimeError: CUDA driver error: out of memory", K.OOM, Phase.RUNTIME),
    (Server.VLLM, "(APIServer pid=7) WARNING 11-02 10:02:00 [loggers.py:257] Engine 000: Avg prompt throughput: 1.0 "
     "tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, Preemptions: 3, GPU KV "
     "cache usage: 99.0%, Prefix cache hit rate: 0.0%", K.PREEMPTION, Phase.RUNTIME),
    (Server.VLLM, "(APIServer pid=7) ERROR 11-02 10:02:01 [serving.py:312] The engine has reached its prefill token "
     "backlog limit. Please try again later or on a different instance.", K.QUEUE_FULL, Phase.ADMISSION),
    (Server.VLLM, 'INFO:     127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 429 Too Many Requests', K.HTTP_429,
     Phase.ADMISSION),
    (Server.VLLM, "ERROR 10-23 18:21:12 [core_client.py:597] Engine core proc EngineCore_DP0 died unexpectedly, "
     "shutting down client.", K.ENGINE_DEAD, Phase.RUNTIME),
    (Server.VLLM, "RuntimeError: Engine process failed to start. See stack trace for the root cause.", K.ENGINE_DEAD,
     Phase.STARTUP),
    (Server.VLLM, "ERROR 12-19 21:40:35 [async_llm_engine.py:64] RuntimeError: Error in model execution: CUDA error: "
     "an illegal memory access was encountered", K.CUDA_ERROR, Phase.RUNTIME),
    (Server.VLLM, "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600059 milliseconds "
     "before timing out.", K.NCCL_TIMEOUT, Phase.RUNTIME),
    (Server.VLLM, "(EngineCore_DP0 pid=5) WARNING 10-01 12:00:00 [shm_broadcast.py:466] No available shared memory "
     "broadcast block found in 60 seconds. This typically happens when some processes are hanging.",
     K.NCCL_TIMEOUT, Phase.RUNTIME),
    (Server.VLLM, "INFO 04-27 10:13:05 llm_engine.py:275] # GPU blocks: 0, # CPU blocks: 256", K.OOM, Phase.STARTUP),
    (Server.VLLM, "ERROR 03-21 07:20:45 [core.py:330] EngineCore hit an exception: Traceback (most recent call last):",
     K.ENGINE_DEAD, Phase.RUNTIME),
    (Server.VLLM, "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. "
     "Try increasing `gpu_memory_utilization` when initializing the engine.", K.OOM, Phase.STARTUP),
    # SGLang
    (Server.SGLANG, "[2025-08-06 20:26:20 TP0] RuntimeError: Not enough memory. Please try to increase "
     "--mem-fraction-static. Current value: mem_fraction_static=0.88", K.OOM, Phase.STARTUP),
    (Server.SGLANG, "[2026-04-08 14:05:21 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
     "#new_token_ratio: 0.3000 -> 0.5000", K.PREEMPTION, Phase.RUNTIME),
    # ≤0.2 (managers/router/model_rpc.py): lower case and a comma
    (Server.SGLANG, "decode out of memory happened, #retracted_reqs: 1, #new_token_ratio: 0.9998 -> 1.0000",
     K.PREEMPTION, Phase.RUNTIME),
    (Server.SGLANG, "[2026-04-08 14:05:21] The request queue is full.", K.QUEUE_FULL, Phase.ADMISSION),
    (Server.SGLANG, "[2026-04-08 14:05:22] Request running timeout reached.", K.DEADLINE_EXCEEDED, Phase.GENERATION),
    (Server.SGLANG, '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /generate HTTP/1.1" 503 Service '
     "Unavailable", K.HTTP_503, Phase.ADMISSION),
    (Server.SGLANG, "[2025-02-27 04:48:00 TP0] Watchdog timeout (self.watchdog_timeout=300)", K.ENGINE_DEAD,
     Phase.RUNTIME),
    (Server.SGLANG, "AssertionError: No space left for only one request, "
     "self.token_to_kv_pool_allocator.available_size()=0", K.OOM, Phase.RUNTIME),
    (Server.SGLANG, "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. "
     "Use the profiled value instead.", K.OOM, Phase.STARTUP),
    # TGI
    (Server.TGI, "2025-05-01T01:33:00.000001Z ERROR chat_completions{parameters=\"x\"}: text_generation_router::infer: "
     "router/src/infer/mod.rs:66: Model is overloaded", K.QUEUE_FULL, Phase.ADMISSION),
    (Server.TGI, "2024-06-01T10:00:40.000001Z ERROR text_generation_launcher: Shard 1 failed to start",
     K.ENGINE_DEAD, Phase.STARTUP),
    (Server.TGI, "2024-06-01T10:00:40.000001Z ERROR warmup{max_input_length=4095}:warmup: text_generation_client: "
     "router/client/src/lib.rs:33: Server error: Not enough memory to handle 4096 prefill tokens. You need to decrease "
     "`--max-batch-prefill-tokens`", K.OOM, Phase.STARTUP),
    (Server.TGI, "Error: ShardFailed", K.ENGINE_DEAD, Phase.RUNTIME),
    (Server.TGI, "Error: ShardCannotStart", K.ENGINE_DEAD, Phase.STARTUP),
    (Server.TGI, '{"timestamp":"2025-08-29T14:40:17.288163Z","level":"ERROR","message":"Request failed during '
     'generation: Server error: error trying to connect: No such file or directory (os error 2)","target":'
     '"text_generation_router_v3::backend"}', K.ENGINE_DEAD, Phase.RUNTIME),
    # llama.cpp / Ollama
    (Server.LLAMACPP, "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc "
     "failed: out of memory", K.OOM, Phase.RUNTIME),
    # llama.cpp never preempts: when the last retry of a decode fails, the requests in it fail (tests/engines)
    (Server.LLAMACPP, "0.00.404.024 E srv  update_slots: decode() failed: Context size has been exceeded.", K.OOM,
     Phase.RUNTIME),
    (Server.LLAMACPP, "0.00.403.897 E srv    send_error: task id = 203, error: Context size has been exceeded.",
     K.REQUEST_FAILED, Phase.GENERATION),
    (Server.LLAMACPP, "0.00.372.947 E srv    send_error: task id = 196, error: request (702 tokens) exceeds the "
     "available context size (512 tokens), try increasing it", K.REQUEST_FAILED, Phase.ADMISSION),
    (Server.LLAMACPP, "slot launch_slot_: id  0 | task 5 | no slot is available, defer task, id_task = 5",
     K.PENDING, Phase.QUEUE),
    (Server.LLAMACPP, 'time=2024-08-19T14:12:00.000+08:00 level=WARN source=sched.go:137 msg="server busy, please try '
     'again.  maximum pending requests exceeded"', K.QUEUE_FULL, Phase.ADMISSION),
    (Server.LLAMACPP, '[GIN] 2024/08/19 - 14:12:00 | 503 |     101.2µs |       127.0.0.1 | POST     "/api/generate"',
     K.HTTP_503, Phase.ADMISSION),
    (Server.LLAMACPP, "/src/ggml/src/ggml-cuda/ggml-cuda.cu:88: GGML_ASSERT(ctx->kv_self.size > 0) failed",
     K.ENGINE_DEAD, Phase.RUNTIME),
    (Server.LLAMACPP, "llama-server: src/llama-sampler.cpp:1094: void llama_sampler_dist_apply(llama_sampler*, "
     "llama_token_data_array*): Assertion `found' failed.", K.ENGINE_DEAD, Phase.RUNTIME),
    # kernel
    (Server.KERNEL, "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics SM Warp Exception", K.XID,
     Phase.RUNTIME),
    (Server.KERNEL, "NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:2330) installed in this system has fallen off "
     "the bus and is not responding to commands.", K.GPU_LOST, Phase.RUNTIME),
]


@pytest.mark.parametrize(("server", "line", "kind", "phase"), CASES, ids=[f"{c[0].value}-{c[2].value}-{i}"
                                                                           for i, c in enumerate(CASES)])
def test_line_is_classified(server: Server, line: str, kind: EventKind, phase: Phase) -> None:
    events = [r for r in run(make_parser(server, "t", REF_TIME), [line]) if isinstance(r, Event)]
    assert [(e.kind, e.phase) for e in events if e.kind is kind] == [(kind, phase)], [e.kind for e in events]


@pytest.mark.parametrize("line", [
    # llama.cpp does not preempt: a full KV cache makes it halve the batch and go on (tools/server/server.cpp)
    "srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch size, i = 0, "
    "n_batch = 512, ret = 1",
    "decode: failed to find a memory slot for batch of size 512",
    # a request longer than the context, refused with a 400 before any allocation: never an oom
    "srv    send_error: task id = 12, error: the request exceeds the available context size. try increasing the "
    "context size or enable context shift",
])
def test_llamacpp_lines_that_are_no_incident(line: str) -> None:
    events = [r for r in run(make_parser(Server.LLAMACPP, "t", REF_TIME), [line]) if isinstance(r, Event)]
    assert [e.kind for e in events if e.kind in (K.PREEMPTION, K.OOM)] == []
