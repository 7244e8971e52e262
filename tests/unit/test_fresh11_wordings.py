"""Shapes the fresh11 batch showed the parsers missing, each rendered from its engine's or client's source format and
beside its near miss. The catalogued statements themselves are rendered by test_catalogue behind every prefix; these
are the ones that live in parser code (a record's file, a fact's pattern) and the cases a wrapper or paste makes."""

from __future__ import annotations

from agent.records import CapacityFact, Event
from tests.unit.wordings import kinds, records

SITE = "/usr/local/lib/python3.12/dist-packages"


# vllm-project/vllm vllm/v1/engine/core.py: run_busy_loop -> _process_engine_step -> step_fn (step or
# step_with_batch_queue) -> the executor's execute_model; what raises there reaches run_engine_core's
# `logger.exception("EngineCore encountered a fatal error.")`, a traceback logged under core.py's record
def test_a_v1_core_traceback_through_the_busy_loops_step_is_the_engines_death() -> None:
    tail = "(EngineCore pid=374) ERROR 08-28 06:16:23 [core.py:1348] "
    lines = [tail + f'  File "{SITE}/vllm/v1/engine/core.py", line 654, in step_with_batch_queue',
             tail + "    exec_future = self.model_executor.execute_model(",
             tail + f'  File "{SITE}/vllm/v1/executor/uniproc_executor.py", line 131, in execute_model',
             tail + "    output.result()"]
    assert kinds(lines) == ["engine_dead"]
    # a failed utility call out of the same file is the client's, not the loop's: it keeps running
    utility = [tail + f'  File "{SITE}/vllm/v1/engine/core.py", line 700, in _handle_client_request',
               tail + f'  File "{SITE}/vllm/v1/executor/uniproc_executor.py", line 60, in collective_rpc',
               tail + "    answer = run_method(self.driver_worker, method, args, kwargs)"]
    assert kinds(utility) == []


# vllm-project/vllm vllm/engine/multiprocessing/engine.py (0.6–0.10): MQLLMEngine.start wraps the startup and engine
# loops in `except Exception as e: logger.exception(repr(e))`, then `cleanup()`: the engine process ends
def test_v0s_multiprocessing_engine_logging_its_loops_exception_is_its_death() -> None:
    lines = ["INFO 07-29 14:42:58 [engine.py:333] Aborted request chatcmpl-2fdd3564.",
             "ERROR 07-29 14:42:58 [engine.py:163] KeyError('chatcmpl-2fdd3564')",
             "ERROR 07-29 14:42:58 [engine.py:163] Traceback (most recent call last):"]
    assert kinds(lines) == ["engine_dead"]
    # the file's records below ERROR, and llm_engine.py's, are not its end (run_mp_engine's own `logger.exception(e)`,
    # the file's only other error record, is: tests/unit/test_fresh12_wordings.py)
    assert kinds(["WARNING 07-29 14:42:58 [engine.py:163] Something went wrong while aborting"]) == []
    assert kinds(["ERROR 07-29 14:42:58 [llm_engine.py:163] KeyError('x')"]) == []


# ggml-org/llama.cpp tools/server/server.cpp format_infill: SRV_DBG("extra: n_ctx = %d, n_extra_take = %d, ...") is
# a request's context, printed per infill request; the start-up `n_ctx` of llama_context is the whole cache
def test_the_infill_debug_lines_n_ctx_is_no_start_up_fact() -> None:
    infill = "12.15.825.417 D srv  format_promp: extra: n_ctx = 4096, n_extra_take = 852, n_extra = 852"
    assert [r for r in records([infill]) if isinstance(r, CapacityFact)] == []
    start = "llama_new_context_with_model: n_ctx      = 4096"
    assert {(r.name, r.value) for r in records([start]) if isinstance(r, CapacityFact)} == {
        ("kv_cache_tokens", 4096.0)}


# vllm/core/scheduler.py Scheduler._preempt (0.4–0.10) ends its warning with `total_num_cumulative_preemption=%d`;
# a formatter that wraps the warning leaves that tail on a line of its own
def test_a_wrapped_preemption_warnings_counter_line_is_the_preemption() -> None:
    wrapped = ["WARNING 01-21 05:05:14 engine.py:205] Sequence group",
               "cmpl-d5a0bb82-0 is preempted by",
               "PreemptionMode.RECOMPUTE mode because there is not enough KV cache",
               "space.",
               "gpu_memory_utilization or tensor_parallel_size to provide more KV",
               "cache memory. total_num_cumulative_preemption=101"]
    assert "preemption" in kinds(wrapped)
    # the whole warning on one line is one preemption, not two
    whole = ("WARNING 01-21 05:05:14 scheduler.py:1089] Sequence group 0 is preempted by PreemptionMode.RECOMPUTE "
             "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
             "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
             "total_num_cumulative_preemption=1")
    assert [r.kind.value for r in records([whole]) if isinstance(r, Event)] == ["preemption"]


# Kong/kong kong/runloop/balancer/init.lua execute: `return nil, "failure to get a peer from the ring-balancer", 503`,
# quoted by an nginx-style error line of a plugin that called through Kong
def test_kongs_no_peer_body_quoted_in_an_error_line_is_a_503() -> None:
    line = ("2021/09/07 23:07:18 [error] 65#0: *932744 [lua] openidc.lua:497: openidc_discover(): could not decode "
            'JSON from Discovery data: response indicates failure, status=503, body={"message":"failure to get a '
            'peer from the ring-balancer"}, client: 10.0.0.1, server: kong, request: "GET /metrics HTTP/2.0"')
    assert kinds([line]) == ["http_503"]
    assert kinds(['{"message":"no Route matched with those values"}']) == []


# anthropics/anthropic-sdk-typescript src/core/error.ts APIError.makeMessage: `${status} ${JSON.stringify(body)}`,
# here inside the JSON string of an application's own error log (its quotes escaped)
def test_anthropics_rate_limit_error_inside_an_escaped_json_string_is_a_429() -> None:
    line = ('[{"error":"Error: 429 {\\"type\\":\\"error\\",\\"error\\":{\\"type\\":\\"rate_limit_error\\",'
            '\\"message\\":\\"Rate limited\\"}}\\n    at generate (cli.js:11:50937)"}]')
    assert kinds([line]) == ["http_429"]
    assert kinds(['Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too '
                  'long"}}']) == []


# Envoy's %RESPONSE_CODE_DETAILS% (`upstream_response_timeout`) and %RESPONSE_FLAGS% (`UT`) in a custom format whose
# keys the operator named; the timeout holds whatever status the format printed beside it
def test_envoys_upstream_timeout_in_a_custom_access_format_is_a_proxy_timeout() -> None:
    line = ("[05/12/2019T16:14:53+0000 1575562493] method=POST authority=localhost:443 request=/svc/get alpn=HTTP/2 "
            "response_flag=UT status=200 status_details=upstream_response_timeout request_size=84 response_size=0")
    got = [r for r in records([line]) if isinstance(r, Event)]
    assert [(e.kind.value, e.fields["timeout_by"]) for e in got] == [("deadline_exceeded", "proxy")]
    assert kinds(["method=POST request=/svc/get response_flag=- status=200 status_details=via_upstream"]) == []


# predibase/lorax router/client (TGI's fork): `#[instrument] async fn warmup(&mut self, max_input_length,
# max_prefill_tokens, max_total_tokens, …)`: tracing prints the span's fields on every record logged inside it, so a
# failed warmup's line carries the configured limits. (TGI's own `text_generation_client` target is cut off with the
# span before the message is read, so there the span gives no fact: not done.)
def test_the_warmup_span_carries_the_configured_limits_as_facts() -> None:
    line = ("2024-03-20T07:57:45.050465Z ERROR warmup{max_input_length=1024 max_prefill_tokens=1024 "
            "max_total_tokens=2048}:warmup: lorax_client: router/client/src/lib.rs:34: Server error: Not "
            "enough memory to handle 1024 prefill tokens. You need to decrease `--max-batch-prefill-tokens`")
    got = records([line])
    assert {(r.name, r.value) for r in got if isinstance(r, CapacityFact)} >= {
        ("max_model_len", 2048.0), ("max_batch_prefill_tokens", 1024.0)}
    assert "oom" in kinds([line])
    # a record outside the span names no limit
    assert [r for r in records(["2024-03-20T07:57:45.117934Z  INFO text_generation_launcher: Shutting down "
                                "shards"]) if isinstance(r, CapacityFact)] == []
