"""Wordings read in the source of engines, clients and proxies the catalogue had not read yet, each beside its
near miss (the same words, no incident). The catalogued statements themselves are rendered by test_catalogue
behind every prefix of their source; these are the lines as a user pastes them."""

from __future__ import annotations

from agent.records import Event
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
    assert [t for t in _timeouts([body]) if t[0] == "deadline_exceeded"] == [("deadline_exceeded", "engine", "connect")]
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
