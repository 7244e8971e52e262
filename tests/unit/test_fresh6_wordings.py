"""Shapes the fresh6 batch showed the parsers missing: engine deaths pasted as traceback tails, where only a
main-loop frame or the record's own file (the logger prefix on every line) tells the engine died, and a
patched scheduler's preemption line; each beside its near miss (the same words, no incident). The statements
themselves are catalogued and rendered by test_catalogue."""

from __future__ import annotations

from agent.records import Event, Server
from parsers import make_parser


def _events(lines: list[str]) -> list[Event]:
    parser = make_parser(Server.AUTO)
    out: list[object] = []
    for line in lines:
        out += parser.feed(line)
    return [r for r in out + parser.flush() if isinstance(r, Event)]


def _kinds(lines: list[str]) -> list[str]:
    return sorted({e.kind.value for e in _events(lines)})


_V06 = "ERROR 10-11 12:27:29 engine.py:157] "
_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 72.00 MiB. GPU 0 has a total capacity of "
        "31.33 GiB")


def test_v0_mq_engine_loop_frames_are_the_engine_ending() -> None:
    # MQLLMEngine.start logs whatever ended run_engine_loop; engine_step re-raises what step raised
    frames = [f'{_V06}  File "/opt/vllm/vllm/engine/multiprocessing/engine.py", line 155, in start',
              f"{_V06}    self.run_engine_loop()",
              f'{_V06}  File "/opt/vllm/vllm/engine/multiprocessing/engine.py", line 218, in run_engine_loop',
              f"{_V06}    request_outputs = self.engine_step()"]
    assert _kinds(frames) == ["engine_dead"]
    assert _kinds([f'{_V06}  File "/opt/vllm/vllm/engine/multiprocessing/engine.py", line 241, in engine_step',
                   f"{_V06}    raise e from None"]) == ["engine_dead"]


def test_v0_mq_engine_frames_outside_the_loop_are_no_death() -> None:
    # the client side's frames and a request's add_request are no loop of the engine
    assert _kinds([f'{_V06}  File "/opt/vllm/vllm/engine/multiprocessing/client.py", line 218, in '
                   "run_output_handler_loop",
                   f"{_V06}    request_outputs = self.engine_step()"]) == []
    assert _kinds([f'{_V06}  File "/opt/vllm/vllm/engine/multiprocessing/engine.py", line 290, in '
                   "_handle_process_request", f"{_V06}    self.engine.add_request("]) == []


_V07 = "vllm  | ERROR 02-11 08:25:49 async_llm_engine.py:68] "


def test_v0_background_task_record_frames_without_their_header_are_a_death() -> None:
    lines = [f'{_V07}  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line 1747, in '
             "_call_impl",
             f"{_V07}    return forward_call(*args, **kwargs)",
             f'{_V07}  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/llama.py", line 287, '
             "in forward",
             f"{_V07}    hidden_states = self.mlp(hidden_states)"]
    assert _kinds(lines) == ["engine_dead"]


def test_async_llm_engine_records_without_a_frame_are_no_death() -> None:
    # the same file's other records: an INFO line, and an ERROR that carries no traceback
    assert _kinds(["INFO 02-11 08:25:49 async_llm_engine.py:173] Added request chatcmpl-1."]) == []
    assert _kinds([f"{_V07}Got an unexpected value while aborting request chatcmpl-1"]) == []
    # a frame under another file's record is a request's own traceback
    assert _kinds(['vllm  | ERROR 02-11 08:25:49 serving_chat.py:190]   File "/usr/local/lib/python3.12/'
                   'dist-packages/vllm/model_executor/models/llama.py", line 287, in forward']) == []


_CORE = "(EngineCore pid=229) ERROR 04-19 12:21:04 [core.py:1134] "


def test_v1_engine_core_record_through_the_model_is_a_death() -> None:
    # only run_engine_core logs a core.py traceback that ran the model ("EngineCore encountered a fatal error.")
    lines = [f"{_CORE}    out = self._continuation_prefill(",
             f'{_CORE}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/attention/backends/flash_attn.py", '
             "line 727, in forward",
             f"{_CORE}    v_full = torch.cat([v_cached, val_chunk], dim=0)",
             f"{_CORE}{_OOM}"]
    assert _kinds(lines) == ["engine_dead", "oom"]


def test_v1_engine_core_busy_loop_frame_is_a_death() -> None:
    assert _kinds([f'{_CORE}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 853, '
                   "in run_busy_loop", f"{_CORE}    self._process_engine_step()"]) == ["engine_dead"]


def test_v1_engine_core_tracebacks_that_never_ran_the_model_are_no_death() -> None:
    # a failed utility call (logged by _handle_client_request) and a request's pre-processing stay what they are
    utility = [f"{_CORE}Invocation of reset_prefix_cache method failed",
               f'{_CORE}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 960, in '
               "_handle_client_request",
               f'{_CORE}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 310, in '
               "reset_prefix_cache",
               f"{_CORE}RuntimeError: cannot reset while requests are running"]
    assert _kinds(utility) == []
    assert _kinds([f'{_CORE}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1001, '
                   "in preprocess_add_request", f"{_CORE}ValueError: bad request"]) == []


_SGL = "[2025-03-10 10:46:09 TP0] "


def test_sglang_tp_worker_client_exception_is_a_death() -> None:
    lines = [f"{_SGL}TpModelWorkerClient hit an exception: Traceback (most recent call last):",
             '  File "/opt/sglang/srt/managers/tp_worker_overlap_thread.py", line 109, in forward_thread_func',
             "    self.forward_thread_func_()"]
    assert _kinds(lines) == ["engine_dead"]
    # the client's own lines that say nothing went wrong
    assert _kinds([f"{_SGL}TpModelWorkerClient started the forward thread"]) == []


_SCHED = "(EngineCore_0 pid=3945189) INFO 08-21 07:17:09 [scheduler.py:495] "


def test_a_preempted_request_resumed_is_one_preemption() -> None:
    events = _events([f"{_SCHED}Preempted request cmpl-e595-0 has been resumed!",
                      f"{_SCHED}Preempted request cmpl-d6ea-0 has been resumed!"])
    assert [(e.kind.value, e.fields.get("count")) for e in events] == [("preemption", 1), ("preemption", 1)]


def test_resumed_and_counter_lines_are_no_preemption() -> None:
    assert _kinds([f"{_SCHED}Resumed request cmpl-e595-0 has 8704 computed tokens"]) == []
    assert _kinds([f"{_SCHED}Preempted requests: 0"]) == []
