"""Shapes the fresh15 batch showed the parsers missing, each rendered from its engine's or client's source format and
beside its near miss. The catalogued statements themselves are rendered by test_catalogue behind every prefix; these
are the ones that live in parser code (a load line's reader, a fact's pattern, a stream's detection, a record's
file, a JSON record's nesting, who waited for a timeout)."""

from __future__ import annotations

from agent.records import CapacityFact, Event, Server, ServerStats
from parsers import detect
from tests.unit.wordings import kinds, records

GIB = 1024**3
SITE = "/usr/local/lib/python3.10/dist-packages"


def _samples(lines: list[str]) -> list[tuple[int | None, int | None, float | None]]:
    return [(r.running, r.waiting, r.kv_usage_ratio) for r in records(lines) if isinstance(r, ServerStats)]


# InternLM/lmdeploy lmdeploy/metrics/loggers.py LoggingStatLogger: the interval line `--enable-metrics` prints. Its
# `[YYYY-MM-DD HH:MM:SS DP0] ` stamp is SGLang's shape too, so the line's own words keep it from SGLang's parser
def test_lmdeploys_metrics_line_is_a_load_sample_with_its_queue() -> None:
    line = ("[2026-02-05 17:05:17 DP0] Avg thr (in/out): 4618.5 / 2756.3 tokens/s, API server (completed/routed/"
            "waiting): 1 / 50 / 50, Engine (running/waiting): 45 / 5, KV cache: 21.6%, ")
    assert detect([line]) is not Server.SGLANG
    assert _samples([line]) == [(45, 5, 21.6 / 100)]
    assert kinds([line]) == ["pending"]  # five requests wait: the queue has formed
    idle = line.replace("45 / 5, KV cache: 21.6%", "0 / 0, KV cache: 0.0%")
    assert _samples([idle]) == [(0, 0, 0.0)] and kinds([idle]) == []


# NVIDIA/TensorRT-LLM's batch manager before the executor API (GptManager's `logIterationData`, Triton's tensorrtllm
# backend): one JSON object an iteration, its keys in words, no queue count
def test_tensorrt_llms_older_iteration_line_is_a_load_sample() -> None:
    line = ('I1120 02:29:01.795279 42888 libtensorrtllm.cc:1009] {"Active Request Count":1,"Iteration Counter":200,'
            '"Timestamp":"11-20-2023 02:29:01"}')
    assert _samples([line]) == [(1, None, None)]
    with_blocks = ('{"Active Request Count":4,"Max KV cache blocks":200,"Used KV cache blocks":50,'
                   '"Iteration Counter":9}')
    assert _samples([with_blocks]) == [(4, None, 0.25)]
    assert _samples(['{"Iteration Counter":200,"Timestamp":"11-20-2023 02:29:01"}']) == []


# sgl-project/sglang cuda_graph_runner.py: the memory free as the graphs' capture begins, after the KV pool: the room
# `Memory pool end` states when a paste kept only this line
def test_sglangs_capture_begin_gives_the_room_after_the_kv_pool() -> None:
    line = ("[2025-10-06 20:05:22 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. avail "
            "mem=3.66 GB")
    assert {r.name: r.value for r in records([line]) if isinstance(r, CapacityFact)} == {
        "free_after_kv_bytes": round(3.66 * GIB)}
    end = ("[2025-10-06 20:05:40 DP0 TP0] Capture cuda graph end. Time elapsed: 18.20 s. mem usage=0.51 GB. avail "
           "mem=3.15 GB.")
    assert not [r for r in records([end]) if isinstance(r, CapacityFact) and r.name == "free_after_kv_bytes"]


# The driver's older notice of a lost GPU (`NVRM: GPU at 0000:01:00.0 has fallen off the bus.`): the same loss as the
# newer multi-line one and Xid 79
def test_an_older_drivers_fallen_off_the_bus_is_a_lost_gpu() -> None:
    events = [r for r in records(["[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus."])
              if isinstance(r, Event)]
    assert [(e.kind.value, e.fields.get("pci_bus")) for e in events] == [("gpu_lost", "0000:01:00.0")]
    assert kinds(["[   49.261465] NVRM: os_pci_init_handle: invalid context!"]) == []


# vllm/engine/multiprocessing/engine.py logs a traceback only where the engine ends (MQLLMEngine.start,
# run_mp_engine): a paste cut into such a record still ends in the exception it raised
def test_a_cut_mq_engine_traceback_that_ends_in_its_exception_is_the_engines_end() -> None:
    frames = [f'ERROR 07-30 18:15:55 engine.py:400]   File "{SITE}/vllm/worker/cache_engine.py", line 103, in '
              "_allocate_kv_cache",
              "ERROR 07-30 18:15:55 engine.py:400]     layer_kv_cache = torch.zeros(alloc_shape,"]
    raised = ["ERROR 07-30 18:15:55 engine.py:400] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
              "786.00 MiB. GPU 0 has a total capacity of 44.35 GiB of which 739.50 MiB is free."]
    assert kinds(frames + raised) == ["engine_dead", "oom"]
    assert kinds(frames) == []  # frames alone, cut before the exception: nothing it says


# A Node logger's error record (LibreChat's winston JSON) keeps the system error as the error's cause, beside the
# record's own message
def test_a_json_error_records_cause_is_read_beside_its_message() -> None:
    line = ('{"cause":{"code":"ETIMEDOUT","errno":"ETIMEDOUT","message":"request to http://ollama:11434/v1/chat/'
            'completions failed, reason: read ETIMEDOUT","type":"system"},"level":"error","message":"[handleAbortError]'
            ' AI response error; aborting request: Connection error."}')
    events = [r for r in records([line]) if isinstance(r, Event)]
    assert [(e.kind.value, e.fields["scope"]) for e in events] == [("deadline_exceeded", "request")]
    no_cause = '{"level":"error","message":"[handleAbortError] AI response error; aborting request: Connection error."}'
    assert kinds([no_cause]) == []


# TGI's router logs through its client crate (`text_generation_client:`), which names the stream whatever wraps it
# (SkyPilot's `(task, pid=N) ` here); a shard gone is its transport error
def test_tgis_client_target_names_the_stream_behind_a_launchers_tag() -> None:
    lines = ["(task, pid=12148) 2023-10-25T12:24:19.123838Z ERROR batch{batch_size=1}:decode:decode{size=1}: "
             "text_generation_client: router/client/src/lib.rs:33: Server error: transport error"]
    assert detect(lines) is Server.TGI
    assert kinds(lines) == ["engine_dead"]


# An application's own `asyncio.wait_for` around its call, with no engine frame in the traceback: the client gave up
def test_an_applications_asyncio_deadline_is_the_clients_timeout() -> None:
    app = ["Traceback (most recent call last):",
           '  File "app/agents/surfer.py", line 101, in _make_model_call',
           "    return await asyncio.wait_for(",
           '  File "/usr/lib/python3.12/asyncio/timeouts.py", line 115, in __aexit__',
           "    raise TimeoutError from exc_val",
           "TimeoutError"]
    engine = [app[0], f'  File "{SITE}/vllm/engine/async_llm_engine.py", line 630, in engine_step', *app[3:]]

    def scopes(lines: list[str]) -> list[object]:
        return [r.fields["scope"] for r in records(lines) if isinstance(r, Event)]

    assert scopes(app) == ["request"]
    assert scopes(engine) == ["engine"]


# vLLM's Gaudi fork (vllm/worker/hpu_model_runner.py) words the weights' size its own way; a wrapper's router mode
# failing to start names llama.cpp's stream on its own
def test_gaudis_weights_line_is_the_weights_and_llama_servers_router_failure_names_it() -> None:
    line = ("(VllmWorkerProcess pid=880) INFO 02-07 14:50:41 hpu_model_runner.py:712] Pre-loading model weights on "
            "hpu:0 took 79.41 GiB of device memory (79.41 GiB/94.62 GiB used) and 4.706 GiB of host memory (98.92 "
            "GiB/1007 GiB used)")
    assert {r.name: r.value for r in records([line]) if isinstance(r, CapacityFact)} == {
        "weights_bytes": round(79.41 * GIB)}
    router = "main: failed to initialize router models: number of models to load on startup (5) exceeds models_max (1)"
    assert detect([router]) is Server.LLAMACPP and kinds([router]) == ["engine_dead"]
