"""Shapes the fresh9 batch showed the parsers missing, each rendered from its engine's or client's source format and
beside its near miss (the same words, no incident). The catalogued statements themselves are rendered by
test_catalogue behind every prefix of their source."""

from __future__ import annotations

from agent.records import CapacityFact, Event
from tests.unit.wordings import kinds, records


# ggerganov/llama.cpp@b1500:ggml-cuda.cu:CUDA_CHECK, fprintf(stderr, "CUDA error %d at %s:%d: %s\n", …); exit(1)
def test_ggml_cuda_check_ends_the_process() -> None:
    assert kinds(["CUDA error 2 at vendor/llama.cpp/ggml-cuda.cu:7949: out of memory"]) == ["engine_dead", "oom"]
    assert kinds(["CUDA error 700 at ggml-cuda.cu:6243: an illegal memory access was encountered"]) == [
        "cuda_error", "engine_dead"]
    # a sentence about such an error is none
    assert kinds(["I used to get CUDA error 2 at startup with the old build, not any more."]) == []


# huggingface/text-generation-inference@v3.3.7:server/text_generation_server/server.py:serve_inner,
# logger.exception("Error when initializing model"); raise
def test_a_tgi_shard_that_failed_to_initialise_is_dead() -> None:
    line = ("2023-07-09T15:32:00.971897Z ERROR shard-manager: text_generation_launcher: Error when initializing model"
            " rank=0")
    assert kinds(["2023-07-09T15:31:51.271200Z  INFO text_generation_launcher: Starting shard 0", line]) == [
        "engine_dead"]


# ollama/ollama@v0.6.0:cmd/start.go:waitForServer, errors.New("timed out waiting for server to start") after 5 s
def test_the_ollama_cli_giving_up_on_its_server_is_a_client_timeout() -> None:
    got = [r for r in records(["Error: ollama server not responding - timed out waiting for server to start"])
           if isinstance(r, Event)]
    assert [(e.kind.value, e.fields["timeout_by"], e.fields["timeout_on"]) for e in got] == [
        ("deadline_exceeded", "client", "connect")]


# ray-project/ray:python/ray/serve/_private/deployment_state.py:ActorReplicaWrapper.check_health
def test_ray_serve_marking_a_replica_unhealthy_is_a_timeout_in_front_of_the_engine() -> None:
    line = ("1758 -- Didn't receive health check response for replica Replica(id='rut1591v', "
            "deployment='vLLM:Qwen--Qwen3-32B', app='RayServeApp') after 10.0s, marking it unhealthy.")
    got = [r for r in records([line]) if isinstance(r, Event)]
    assert [(e.kind.value, e.fields["timeout_by"], e.fields["timeout_s"]) for e in got] == [
        ("deadline_exceeded", "proxy", 10.0)]
    assert kinds(["Health check for replica Replica(id='rut1591v') failed: the replica's own check raised"]) == []


# NVIDIA/TensorRT-LLM@v0.8.0:cpp/tensorrt_llm/batch_manager: "Using %d tokens in paged KV cache." and
# trtGptModel.h's "TRTGptModel maxNumSequences: %d" / "TRTGptModel maxSequenceLen: %d"
def test_tensorrt_llm_model_limits_and_kv_tokens_are_facts() -> None:
    got = records(["[TensorRT-LLM][INFO] Using 10718 tokens in paged KV cache.",
                   "[TensorRT-LLM][INFO] TRTGptModel maxNumSequences: 8",
                   "[TensorRT-LLM][INFO] TRTGptModel maxBatchSize: 8",
                   "[TensorRT-LLM][INFO] TRTGptModel maxSequenceLen: 1048576"])
    assert {(r.name, r.value) for r in got if isinstance(r, CapacityFact)} == {
        ("kv_cache_tokens", 10718.0), ("max_num_seqs", 8.0), ("max_model_len", 1048576.0)}


# openai/openai-node@v5.2.0:src/core/error.ts:APIError.makeMessage, `${status} status code (no body)`, as an
# application relays it inside its own words
def test_a_relayed_no_body_status_is_the_status() -> None:
    assert kinds(['the API fails with error "API Request Failed: 429 status code (no body)"']) == ["http_429"]
    assert kinds(["API Request Failed: 503 status code (no body)"]) == ["http_503"]
    assert kinds(["API Request Failed: 404 status code (no body)"]) == []


# lostisland/faraday@v2.9.0:lib/faraday/error.rb, "the server responded with status #{exc[:status]}"
def test_faraday_status_errors() -> None:
    assert kinds(["   Error: the server responded with status 429"]) == ["http_429"]
    assert kinds(["Faraday::ServerError: the server responded with status 503 for POST https://x/v1/chat"]) == [
        "http_503"]
    assert kinds(["Faraday::ResourceNotFound: the server responded with status 404"]) == []


# triton-inference-server/core@r24.01:src/dynamic_batch_scheduler.cc, Status(UNAVAILABLE, "Request timeout expired")
def test_a_request_rejected_from_tritons_queue_is_a_queue_timeout() -> None:
    got = [r for r in records(["tritonclient.utils.InferenceServerException: [StatusCode.UNAVAILABLE] Request "
                               "timeout expired"]) if isinstance(r, Event)]
    assert [(e.kind.value, e.fields["timeout_by"], e.fields["timeout_on"]) for e in got] == [
        ("deadline_exceeded", "engine", "queue")]
