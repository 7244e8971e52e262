"""Shapes the fresh8 batch showed the parsers missing (or reading as an incident that was not one), each rendered
from its engine's or client's source format and beside its near miss (the same words, no incident). The
catalogued statements themselves are rendered by test_catalogue behind every prefix of their source."""

from __future__ import annotations

from agent.records import CapacityFact, Event, Server, ServerStats
from parsers import make_parser
from tests.unit.wordings import kinds, records


def test_a_proposal_of_what_the_server_should_answer_is_no_refusal() -> None:
    # a feature request asks what the server would return; nothing was returned
    assert kinds(["  Would the preferred design be to return an OpenAI-compatible error body with HTTP 503 and "
                   "code `server_overloaded` when request admission is rejected?"]) == []
    assert kinds(["The router should respond with HTTP 429 once the queue is full."]) == []
    assert kinds(["I'd prefer to return HTTP 503 here instead of hanging."]) == []


def test_the_answer_as_a_client_logs_it_stays_a_refusal() -> None:
    # openai-python's APIStatusError text, "Error code: {status} - {body}" (_client.py _make_status_error)
    assert kinds(["openai.InternalServerError: Error code: 503 - {'error': 'model should be loaded first'}"]) \
        == ["http_503"]
    assert kinds(["openai.RateLimitError: Error code: 429 - {'error': {'message': 'you should retry later', "
                   "'code': 429}}"]) == ["http_429"]


# psf/requests@v2.32.3:requests/models.py:Response.__repr__, f"<Response [{self.status_code}]>"
def _repr(status: int) -> str:
    return f"<Response [{status}]>"


def test_a_printed_requests_response_is_its_status() -> None:
    assert kinds(["It always return " + _repr(503) + " and fall in the infinite loop."]) == ["http_503"]
    assert kinds([_repr(429)]) == ["http_429"]
    assert kinds([_repr(200), _repr(404)]) == []


# envoyproxy/envoy@v1.31.0:source/extensions/access_loggers/file/config.cc:FileAccessLogFactory::
# createAccessLogInstance: the legacy json_format keeps no types, every operator a string (Istio's JSON log)
def _untyped(code: str, flags: str) -> str:
    return (f'{{"duration":"0","response_code":"{code}","user_agent":"python-requests/2.24.0",'
            f'"response_flags":"{flags}","bytes_sent":"503","method":"GET"}}')


def test_envoy_untyped_json_access_line_is_its_status() -> None:
    assert kinds([_untyped("503", "NR")]) == ["http_503"]
    assert kinds([_untyped("429", "RL")]) == ["http_429"]
    # an answered request whose byte count reads 503
    assert kinds([_untyped("200", "-")]) == []


# ollama/ollama@v0.6.0:llm/server.go:llmServer.WaitUntilRunning: on `<-ctx.Done()` it warns, then returns
# fmt.Errorf("timed out waiting for llama runner to start: %w", ctx.Err()), which server/sched.go logs
_SLOG = 'time=2025-03-17T23:43:49.979Z level={level} source={src} msg="{msg}"'


def _slog(level: str, src: str, msg: str, error: str | None = None) -> str:
    line = _SLOG.format(level=level, src=src, msg=msg)
    return line if error is None else f'{line} error="{error}"'


def test_a_load_the_client_abandoned_is_one_client_timeout_and_no_death() -> None:
    warn = _slog("WARN", "server.go:592", "client connection closed before server finished loading, aborting load")
    for error in ("timed out waiting for llama runner to start: context canceled",
                  "timed out waiting for llama-server to start: context canceled"):
        for msg, level, src in (("error loading llama server", "ERROR", "sched.go:456"),  # to 0.29
                                ("Load failed", "INFO", "sched.go:641")):  # 0.11.5 on, with model=…
            got = [r for r in records([warn, _slog(level, src, msg, error)]) if isinstance(r, Event)]
            assert [(e.kind.value, e.fields.get("timeout_by")) for e in got] == [("deadline_exceeded", "client")]


def test_the_engine_giving_up_on_its_runner_stays_a_timeout_and_a_death() -> None:
    # the stall timer (OLLAMA_LOAD_TIMEOUT): "timed out waiting for llama runner to start - progress %0.2f - %s"
    line = _slog("ERROR", "sched.go:456", "error loading llama server",
                 "timed out waiting for llama runner to start - progress 0.43 - ")
    assert kinds([line]) == ["deadline_exceeded", "engine_dead"]
    assert kinds([_slog("ERROR", "sched.go:456", "error loading llama server",
                        "llama runner process has terminated: exit status 2")]) == ["engine_dead"]


# NVIDIA/nccl@v2.21.5-1:src/init.cc:ncclGetErrorString, raised by vLLM's and SGLang's pynccl wrapper as
# RuntimeError(f"NCCL error: {error_str}") and by PyTorch as "NCCL error in: file:line, <string>, NCCL version v"
def test_only_an_unhandled_cuda_error_of_nccl_is_a_cuda_error() -> None:
    assert kinds(["RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"]) \
        == ["cuda_error"]
    assert kinds(["torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                  "NCCLUtils.hpp:275, unhandled cuda error, NCCL version 2.21.5"]) == ["cuda_error"]
    for string in ("unhandled system error (run with NCCL_DEBUG=INFO for details)", "unhandled system error",
                   "remote process exited or there was a network error", "internal error",
                   "invalid usage (run with NCCL_DEBUG=WARN for details)"):
        assert kinds([f"RuntimeError: NCCL error: {string}"]) == []
        assert kinds([f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                      f"NCCLUtils.hpp:275, {string}, NCCL version 2.18.1"]) == []


# sgl-project/sglang@v0.5.6:python/sglang/srt/disaggregation/prefill.py (and decode.py): the failure reason from
# mooncake/conn.py, f"Request {room} timed out after {elapsed:.1f}s in KVPoll.Bootstrapping" (WaitingForInput)
def test_a_disaggregated_request_that_waited_past_its_limit_is_an_engine_timeout() -> None:
    prefix = "[2025-08-26 01:43:25 TP12] "
    for side, state, knob in (("Prefill bootstrap", "Bootstrapping", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"),
                              ("Decode transfer", "WaitingForInput", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT")):
        line = (f"{prefix}{side} failed for request rank=12 req.rid='5e5fc41a6eb740379f092d975f47d6cd' "
                f"req.bootstrap_room=1609004377667269480 with exception KVTransferError(bootstrap_room="
                f"1609004377667269480): Request 1609004377667269480 timed out after 300.0s in KVPoll.{state}")
        parser = make_parser(Server.SGLANG)
        got = [r for r in parser.feed(line) + parser.flush() if isinstance(r, Event)]
        assert [(e.kind.value, e.fields.get("scope"), e.fields.get("knob"), e.fields.get("duration_s"))
                for e in got] == [("deadline_exceeded", "engine", knob, 300.0)]
    # the transfer that failed for another reason is no timeout
    parser = make_parser(Server.SGLANG)
    assert [r for r in parser.feed(f"{prefix}Prefill transfer failed for request rank=0 req.rid='ab' "
                                   "req.bootstrap_room=12 with exception KVTransferError(bootstrap_room=12): "
                                   "Failed to send kv chunk of 12 to 10.0.0.2:37233") if isinstance(r, Event)
            and r.kind.value == "deadline_exceeded"] == []


# NVIDIA/TensorRT-LLM@v1.0.0:cpp/tensorrt_llm/executor/jsonSerialization.cpp: IterationStats, keys in order
def _iteration(active: int, queued: int, used: int, free: int) -> str:
    return (f'{{"cpuMemUsage":3492,"gpuMemUsage":25330607135,"inflightBatchingStats":{{"numContextRequests":1,'
            f'"numPausedRequests":0}},"iter":0,"kvCacheStats":{{"freeNumBlocks":{free},"maxNumBlocks":{used + free},'
            f'"tokensPerBlock":64,"usedNumBlocks":{used}}},"maxNumActiveRequests":16,"numActiveRequests":{active},'
            f'"numCompletedRequests":0,"numQueuedRequests":{queued},"timestamp":"04-07-2025 20:33:17.747028"}}')


def test_tensorrt_llm_iteration_stats_are_load_samples() -> None:
    got = records(["[" + ",".join((_iteration(1, 0, 100, 300), _iteration(16, 7, 390, 10),
                                   _iteration(16, 9, 400, 0))) + "]"])
    samples = [r for r in got if isinstance(r, ServerStats)]
    assert [(s.running, s.waiting, s.kv_usage_ratio) for s in samples] == [(1, 0, 0.25), (16, 7, 0.975),
                                                                            (16, 9, 1.0)]
    # the queue filled once: one `pending`, at the sample where it did
    assert [(e.kind.value, e.fields["waiting"]) for e in got if isinstance(e, Event)] == [("pending", 7)]
    # a list cut inside its second object gives the first
    cut = "[" + _iteration(2, 3, 10, 30) + "," + _iteration(5, 0, 1, 1)[:60]
    assert [(s.running, s.waiting) for s in records([cut]) if isinstance(s, ServerStats)] == [(2, 3)]


# InternLM/lmdeploy@v0.7.3:lmdeploy/serve/async_engine.py:AsyncEngine.__init__, the engine config's repr
def test_lmdeploy_engine_config_gives_its_limits() -> None:
    line = ("2025-06-12 10:41:07,118 - lmdeploy - INFO - async_engine.py:283 - updated backend_config="
            "TurbomindEngineConfig(dtype='auto', model_format='awq', tp=2, session_len=128000, max_batch_size=64, "
            "cache_max_entry_count=0.8, cache_block_seq_len=64, enable_prefix_caching=False)")
    facts = {r.name: r.value for r in records([line]) if isinstance(r, CapacityFact)}
    assert facts == {"tensor_parallel_size": 2.0, "max_model_len": 128000.0, "max_num_seqs": 64.0,
                     "block_size": 64.0}
    # before the defaults are filled in: `None` is no fact
    early = "input backend=pytorch, backend_config=PytorchEngineConfig(tp=1, session_len=None, max_batch_size=None)"
    assert {r.name: r.value for r in records([early]) if isinstance(r, CapacityFact)} == {
        "tensor_parallel_size": 1.0}
