"""Wordings read in the source of engines, clients and proxies the catalogue had not read yet, each beside its
near miss (the same words, no incident). The catalogued statements themselves are rendered by test_catalogue
behind every prefix of their source; these are the lines as a user pastes them."""

from __future__ import annotations

from agent.records import CapacityFact, Event
from tests.unit.wordings import kinds, records


def _timeouts(lines: list[str]) -> list[tuple[str, object, object]]:
    return [(e.kind.value, e.fields.get("timeout_by"), e.fields.get("timeout_on"))
            for e in records(lines) if isinstance(e, Event)]


# mudler/LocalAI@v2.26.0:pkg/model/initializers.go:grpcModel, fmt.Errorf("could not load model: %w", err)
def test_a_localai_backend_that_died_loading_is_dead() -> None:
    line = ('5:17PM ERR Server error error="could not load model: rpc error: code = Unavailable desc = error reading'
            ' from server: EOF" ip=127.0.0.1 latency=2.914s method=POST status=500 url=/v1/chat/completions')
    assert kinds([line]) == ["engine_dead"]
    assert kinds(["5:17PM ERR failed to load model config: open /models/qwen.yaml: no such file"]) == []


# mudler/LocalAI@v4.9.0:pkg/model/initializers.go:grpcStartupError
def test_a_localai_backend_that_never_answered_its_health_check() -> None:
    body = '{"error":{"code":500,"message":"grpc service not ready","type":""}}'
    assert kinds([body]) == ["engine_dead"]
    assert kinds(["grpc service not ready: backend process exited with code 1: error: failed to open model"]) == [
        "engine_dead"]
    # tower's readiness assertion, a Rust programming error, is none
    assert kinds(["thread 'main' panicked: grpc service not ready. Did you forget to call `poll_ready`?"]) == []


# mudler/LocalAI@v3.0.0:pkg/model/watchdog.go:checkBusy / checkIdle
def test_the_localai_watchdog_killing_a_busy_backend_is_a_timeout() -> None:
    assert _timeouts(["5:17PM WRN [WatchDog] Model qwen2.5-7b is busy for too long, killing it"])[:1] == [
        ("deadline_exceeded", "engine", "generation")]
    assert kinds(["5:17PM WRN [WatchDog] Address 127.0.0.1:37619 is idle for too long, killing it"]) == []


# mudler/LocalAI@v4.9.0:core/backend/global_admission.go:BackendAdmissionError.Error
def test_localai_admission_limit_is_a_full_queue() -> None:
    assert kinds(["backend inference capacity reached (max_concurrent=4); retry after 1s"]) == ["queue_full"]
    assert kinds(["--max-concurrent=4 caps the backend inference capacity"]) == []


def _facts(lines: list[str]) -> dict[str, object]:
    return {r.name: r.value for r in records(lines) if isinstance(r, CapacityFact)}


# xorbitsai/inference@v1.5.0:xinference/model/llm/vllm/core.py:VLLMModel.load, the engine arguments it filled in
def test_xinference_launch_config_gives_the_engine_limits() -> None:
    line = ("2025-06-12 10:41:07,118 xinference.model.llm.vllm.core 41230 INFO     Loading qwen2.5-instruct with "
            "following model config: {'tokenizer_mode': 'auto', 'tensor_parallel_size': 2, 'block_size': 16, "
            "'gpu_memory_utilization': 0.9, 'max_num_seqs': 256, 'quantization': None, 'max_model_len': None}")
    assert _facts([line]) == {"tensor_parallel_size": 2.0, "block_size": 16.0, "gpu_memory_utilization": 0.9,
                              "max_num_seqs": 256.0}
    assert _facts(["Loading qwen with following model config: {'tp_size': 4, 'mem_fraction_static': 0.85}"]) == {
        "tensor_parallel_size": 4.0, "gpu_memory_utilization": 0.85}
    # the generation settings of a request are no engine limits
    assert _facts(["Generate config: {'max_tokens': 1024, 'max_num_seqs': 8}"]) == {}


# xorbitsai/inference@v1.17.1:xinference/core/worker.py:recover_sub_pool and model/llm/vllm/core.py:_check_healthy
def test_xinference_recreating_a_dead_model_actor() -> None:
    assert kinds(["2025-06-12 10:41:07,118 xinference.core.worker 41230 WARNING  Recreating model actor "
                  "qwen2.5-instruct-0, remain 2 times ..."]) == ["engine_dead"]
    assert kinds(["Detecting vLLM is not health, prepare to quit the process"]) == ["engine_dead"]
    assert kinds(["Begin to check health of vLLM", "Stop recreating model actor."]) == []


# mlc-ai/mlc-llm@v0.20.0:cpp/serve/config.cc:InferrableEngineConfig::InferForKVCache
def test_mlc_llm_inferred_engine_config_is_facts() -> None:
    got = _facts(['[03:11:15] /workspace/mlc-llm/cpp/serve/config.cc:769: The actual engine mode is "server". So max '
                  "batch size is 80, max KV cache token capacity is 330000, prefill chunk size is 8192.",
                  "[03:11:15] /workspace/mlc-llm/cpp/serve/config.cc:774: Estimated total single GPU memory usage: "
                  "21003.125 MB (Parameters: 15316.508 MB. KVCache: 4850.324 MB. Temporary buffer: 836.293 MB). The "
                  "actual usage might be slightly larger than the estimated number."])
    assert got == {"max_num_seqs": 80.0, "kv_cache_tokens": 330000.0, "weights_bytes": 15316.508 * 1024**2,
                   "kv_cache_bytes": 4850.324 * 1024**2}
    # an estimate for a mode not chosen is no fact
    assert _facts(['[03:11:15] config.cc:687: Under mode "local", max batch size will be set to 4, max KV cache '
                   "token capacity will be set to 8192, prefill chunk size will be set to 8192."]) == {}


# googleapis/python-api-core@v2.24.0:google/api_core/exceptions.py:GoogleAPICallError.__str__, "{code} {message}"
def test_google_api_core_refusals_are_the_status() -> None:
    assert kinds(["google.api_core.exceptions.ServiceUnavailable: 503 The model is overloaded. Please try again "
                  "later."]) == ["http_503"]
    assert kinds(["google.api_core.exceptions.ResourceExhausted: 429 Resource has been exhausted (e.g. check "
                  "quota)."]) == ["http_429"]
    assert kinds(["retry = Retry(predicate=if_exception_type(ResourceExhausted, ServiceUnavailable))"]) == []
