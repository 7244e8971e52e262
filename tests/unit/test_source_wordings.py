"""Wordings read from the source of clients, proxies and engine plugins (not from an excerpt), each beside its
near miss: the line as a person pastes it, with the server unknown. The catalogued statements themselves are
rendered behind every prefix and envelope by test_catalogue; these hold the shapes around them (a body of
another kind, a status in another place) to the class the source gives them."""

from __future__ import annotations

from agent.records import Event
from tests.unit.wordings import kinds, records

DASHSCOPE = "https://dashscope.aliyuncs.com/api/v1/services/aigc/text-generation/generation"


# dashscope/dashscope-sdk-python@v1.26.2:dashscope/api_entities/aiohttp_request.py:AioHttpRequest._handle_response,
# logger.error("Request: %s failed, status: %s, message: %s", self.url, response.status, error["message"])
def test_the_dashscope_sdks_failed_request_is_its_status() -> None:
    got = [r for r in records([f"Request: {DASHSCOPE} failed, status: 429, message: Requests rate limit exceeded, "
                               "please try again later."]) if isinstance(r, Event)]
    assert [(e.kind.value, e.fields["status"]) for e in got] == [("http_429", 429)]
    assert kinds([f"Request: {DASHSCOPE} failed, status: 503, message: Service Unavailable"]) == ["http_503"]
    assert kinds([f"Request: {DASHSCOPE} failed, status: 429"]) == ["http_429"]  # a body without a message
    # 1.17.0's synchronous call (http_request.py:HttpRequest._handle_response) under an application's own logger
    assert kinds([f"2024-12-27 02:26:50,448.448 ERROR [Thread-1123] [http_request.py:181] - Request: {DASHSCOPE} "
                  "failed, status: 429, message: Requests rate limit exceeded, please try again later."]) == [
        "http_429"]
    # a malformed request, a refused key, a status that only starts with 429's digits: none is a refusal for load
    assert kinds([f"Request: {DASHSCOPE} failed, status: 400, message: Range of input length should be "
                  "[1, 30720]"]) == []
    assert kinds([f"Request: {DASHSCOPE} failed, status: 401, message: Invalid API-key provided."]) == []
    assert kinds([f"Request: {DASHSCOPE} failed, status: 4290, message: none"]) == []


# triton-inference-server/client@r26.04:src/python/library/tritonclient/http/_client.py:InferenceServerClient._post,
# `if self._verbose: print(response)`, geventhttpclient's HTTPResponse.__repr__
# "<{klass} status={status} headers={headers}>"
def test_a_verbose_triton_clients_response_is_its_status() -> None:
    def response(status: int) -> list[str]:
        return [f"<HTTPSocketPoolResponse status={status} headers={{'content-type': 'application/json', "
                "'content-length': '41'}>"]
    assert kinds(response(429)) == ["http_429"]
    assert kinds(response(503)) == ["http_503"]
    (gateway,) = [r for r in records(response(504)) if isinstance(r, Event)]
    assert (gateway.kind.value, gateway.fields["timeout_by"]) == ("deadline_exceeded", "proxy")
    assert kinds(response(200)) == kinds(response(400)) == kinds(response(500)) == []
    # the request the verbose client prints first carries no status
    assert kinds(["POST /v2/models/ensemble/infer, headers {'Inference-Header-Content-Length': 173}"]) == []


# the same package, http/_utils.py:_get_error (`status=str(response.status_code)`, since r23.10) and
# utils/__init__.py:InferenceServerException.__str__ (`"[" + self._status + "] " + msg`)
def test_triton_clients_errors_are_their_status() -> None:
    assert kinds(["tritonclient.utils.InferenceServerException: [429] an exception occurred in the client while "
                  "decoding the response: Expecting value: line 1 column 1 (char 0)"]) == ["http_429"]
    assert kinds(["[429] an exception occurred in the client while decoding the response: Expecting value: line 1 "
                  "column 1 (char 0)"]) == ["http_429"]  # the exception printed by the application
    assert kinds(["tritonclient.utils.InferenceServerException: [503] Server not ready"]) == ["http_503"]
    # the server's own full queue, over HTTP and over gRPC: a queue refusal, not a bare 503
    assert kinds(["tritonclient.utils.InferenceServerException: [503] Exceeds maximum queue size"]) == ["queue_full"]
    assert kinds(["tritonclient.utils.InferenceServerException: [StatusCode.UNAVAILABLE] Exceeds maximum queue "
                  "size"]) == ["queue_full"]
    assert kinds(["tritonclient.utils.InferenceServerException: [400] [request id: <id_unknown>] inference request "
                  "batch-size must be <= 8 for 'resnet50'"]) == []
    assert kinds(["tritonclient.utils.InferenceServerException: [StatusCode.NOT_FOUND] Request for unknown model: "
                  "'llama' is not found"]) == []


# the same package, grpc/_utils.py:get_error_grpc (`status=str(rpc_error.code())`); the client's `client_timeout`
# docstring: "The client will abort request and raise InferenceServerExeption with message "Deadline Exceeded""
def test_triton_grpc_deadline_is_the_clients_own_timeout() -> None:
    (event,) = [r for r in records(["tritonclient.utils.InferenceServerException: [StatusCode.DEADLINE_EXCEEDED] "
                                    "Deadline Exceeded"]) if isinstance(r, Event)]
    assert (event.kind.value, event.fields["timeout_by"], event.fields["scope"]) == (
        "deadline_exceeded", "client", "request")
    assert kinds(["client_timeout: the maximum end-to-end time, in seconds, the request is allowed to take"]) == []


# RBLN-SW/vllm-rbln@v0.11.0:vllm_rbln/v1/worker/rbln_worker.py:RBLNWorker.compile_or_warm_up_model, raised when the
# warm-up's compile failed with the runtime's SYS_ENOMEM / SYS_EBUSY: f"Not enough memory for {num_blocks} blocks
# of KV cache. Try reducing the number of blocks by setting --num-gpu-blocks-override."
def test_rbln_kv_blocks_that_do_not_fit_are_a_startup_oom() -> None:
    (event,) = [r for r in records([
        "(EngineCore_DP0 pid=1094) RuntimeError: Not enough memory for 8192 blocks of KV cache. Try reducing the "
        "number of blocks by setting --num-gpu-blocks-override."]) if isinstance(r, Event)]
    assert (event.kind.value, event.phase.value if event.phase else None, event.fields["num_blocks"]) == (
        "oom", "startup", 8192)
    # the runtime's errors the plugin's `is_oom` takes for device memory running out
    assert kinds(["RuntimeError: SYS_EBUSY: Lack of device memory. (code: -16)"]) == ["oom"]
    assert kinds(["RuntimeError: SYS_ENOMEM: Out of memory"]) == ["oom"]
    # the setting named in a note, and a block count logged while serving, are no failure
    assert kinds(["Set --num-gpu-blocks-override to reduce the number of blocks of KV cache on RBLN."]) == []
    assert kinds(["Successfully copied KV cache from block 12 to block 40"]) == []


# haproxy/haproxy@v3.4.0:doc/configuration.txt §8.2.3 (option httplog: `%ci:%cp [%tr] %ft %b/%s
# %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc …`) and §8.5, the termination state's two letters
def test_haproxys_termination_state_says_whose_timeout() -> None:
    def line(timers: str, status: int, state: str) -> list[str]:
        return [f"Dec 14 03:11:15 lb1 haproxy[14389]: 10.0.1.2:33317 [14/Dec/2025:03:11:15.655] llm-in vllm/gpu7 "
                f"{timers} {status} 198 - - {state} 12/12/11/11/0 0/0 \"POST /v1/chat/completions HTTP/1.1\""]
    (server,) = [r for r in records(line("0/0/1/-1/60001", 504, "sH--")) if isinstance(r, Event)]
    assert (server.kind.value, server.fields["timeout_by"], server.fields["knob"], server.fields["duration_s"]) == (
        "deadline_exceeded", "proxy", "timeout server", 60.001)
    (queued,) = [r for r in records(line("0/30000/-1/-1/30001", 503, "sQ--")) if isinstance(r, Event)]
    assert (queued.kind.value, queued.fields["timeout_on"], queued.fields["status"]) == (
        "deadline_exceeded", "queue", 503)
    (connect,) = [r for r in records(line("0/0/-1/-1/20003", 504, "sC--")) if isinstance(r, Event)]
    assert (connect.fields["timeout_on"], connect.fields["status"]) == ("connect", 504)
    (stalled,) = [r for r in records(line("0/0/1/180/60412", 200, "sD--")) if isinstance(r, Event)]
    assert (stalled.kind.value, stalled.fields["timeout_on"]) == ("deadline_exceeded", "generation")
    assert kinds(line("0/-1/-1/-1/0", 429, "PR--")) == ["http_429"]
    assert kinds(line("0/-1/-1/-1/0", 503, "SC--")) == ["http_503"]
    # served, or closed by its client while data flowed: no incident
    assert kinds(line("0/0/1/4210/4211", 200, "----")) == []
    assert kinds(line("0/0/1/310/9120", 200, "CD--")) == []


# traefik/traefik@95d6f0a46a:pkg/middlewares/accesslog/logdata.go: `DownstreamStatus`, the status sent to the client
def test_traefiks_json_access_record_is_its_downstream_status() -> None:
    def record(status: int, origin: int) -> list[str]:
        return [f'{{"ClientAddr":"10.0.0.5:51234","DownstreamContentSize":17,"DownstreamStatus":{status},'
                f'"Duration":120334,"OriginStatus":{origin},"RequestMethod":"POST","RequestPath":"/v1/chat/completions",'
                '"RouterName":"vllm@docker","level":"info","msg":"","time":"2025-12-14T03:11:15Z"}']
    assert kinds(record(429, 0)) == ["http_429"]  # the RateLimit middleware's own
    assert kinds(record(503, 503)) == ["http_503"]  # the engine's, relayed
    (gateway,) = [r for r in records(record(504, 0)) if isinstance(r, Event)]
    assert (gateway.kind.value, gateway.fields["timeout_by"]) == ("deadline_exceeded", "proxy")
    assert kinds(record(200, 200)) == []


# caddyserver/caddy@8c25290237:modules/caddyhttp/server.go:Server.logRequest ("handled request", `duration` in
# seconds, `status`); reverseproxy.go:statusError answers a timed-out upstream with 504
def test_caddys_handled_request_is_its_status() -> None:
    def record(duration: float, status: int) -> list[str]:
        return [f'{{"level":"error","ts":1765681875.123,"logger":"http.log.access.log0","msg":"handled request",'
                '"request":{"remote_ip":"10.0.0.5","method":"POST","uri":"/v1/chat/completions"},"bytes_read":512,'
                f'"user_id":"","duration":{duration},"size":0,"status":{status},"resp_headers":{{"Server":["Caddy"]}}}}']
    (gateway,) = [r for r in records(record(60.001, 504)) if isinstance(r, Event)]
    assert (gateway.kind.value, gateway.fields["timeout_by"], gateway.fields["duration_s"]) == (
        "deadline_exceeded", "proxy", 60.001)
    assert kinds(record(0.002, 429)) == ["http_429"]
    assert kinds(record(0.01, 503)) == ["http_503"]
    assert kinds(record(4.21, 200)) == []
    # Caddy's error logger names no status of a request it handled: its message is read as any record's
    assert kinds(['{"level":"info","ts":1765681875.1,"logger":"http.log","msg":"server running","name":"srv0"}']) == []
