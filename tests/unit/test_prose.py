"""Hard negatives: a thread's prose names a refusal, a timeout or an OOM without one happening.

Each line is paired with the log line it talks about, which must still classify (the guard is the prose's
shape, advice or an explanation, not the words the engine prints)."""

from __future__ import annotations

import pytest

from agent.records import Event, Server
from parsers import make_parser


def _kinds(line: str) -> list[str]:
    parser = make_parser(Server.AUTO)
    records = parser.feed(line) + parser.flush()
    return sorted(r.kind.value for r in records if isinstance(r, Event))


@pytest.mark.parametrize(("prose", "log", "kind"), [
    ("If you get a 429 Too Many Requests error, lower the concurrency.",
     "requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: http://10.0.0.5:8000/v1",
     "http_429"),
    ("When the server is busy it answers 503 Service Unavailable.",
     "openai.InternalServerError: Error code: 503 - {'error': {'message': 'busy', 'code': 503}}", "http_503"),
    ("The `Model is overloaded` error from TGI means --max-concurrent-requests was hit.",
     "2024-05-01T10:00:00.123456Z ERROR text_generation_router::infer: router/src/infer/mod.rs:118: "
     "Model is overloaded", "queue_full"),
    ("If you see CUDA out of memory, lower --gpu-memory-utilization.",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "oom"),
    ("Use httpx.Timeout(10.0, read=None) so long streams never raise httpx.ReadTimeout in the middle",
     "httpx.ReadTimeout: timed out", "deadline_exceeded"),
    ("Raise the route timeout to avoid upstream request timeout errors on long generations",
     "openai.APIStatusError: Error code: 504 - upstream request timeout", "deadline_exceeded"),
])
def test_prose_is_silent_and_the_log_line_is_not(prose: str, log: str, kind: str) -> None:
    assert _kinds(prose) == []
    assert _kinds(log) == [kind]
