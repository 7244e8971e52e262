"""Deadlines that an access line or a browser's console tells only by its numbers or its status text: Ollama's GIN
line at a client's usual deadline, and DevTools' `<METHOD> <url> <code> (<status text>)` wherever it is pasted."""

from __future__ import annotations

import pytest

from agent.records import Event
from tests.unit.wordings import kinds, records

GIN = "[GIN] 2024/11/11 - 10:17:38 | {status} | {took:>13} |       127.0.0.1 | POST     \"/v1/chat/completions\""


# gin-gonic/gin logger.go: a latency over a minute is truncated to the second, so a client's 60 s deadline reads
# `1m0s`, a 5-minute one `5m0s` or `5m1s` (the handler's own second), an hour `1h0m0s`; Ollama's handler logs 500
# when the request's context is cancelled
@pytest.mark.parametrize("took", ["1m0s", "1m1s", "2m0s", "5m1s", "4m59s", "10m0s", "30m1s", "1h0m0s", "59m59s"])
def test_ollamas_500_at_a_usual_deadline_is_a_timeout(took: str) -> None:
    line = GIN.format(status=500, took=took)
    assert kinds([line]) == ["deadline_exceeded"]
    (event,) = [r for r in records([line]) if isinstance(r, Event)]
    assert event.fields["scope"] == "request"


# the near misses: a 500 that ended at no usual deadline is a failed request, and a 200 at one is a long answer
@pytest.mark.parametrize(("status", "took"), [(500, "1m7s"), (500, "7m0s"), (500, "59.98s"), (500, "12.4ms"),
                                              (500, "2h0m0s"), (200, "5m0s")])
def test_other_gin_lines_are_no_timeout(status: int, took: str) -> None:
    line = GIN.format(status=status, took=took)
    assert "deadline_exceeded" not in kinds([line])
    if status == 500:
        assert kinds([line]) == ["request_failed"]


# front_end/panels/console/ConsoleViewMessage.ts (ChromeDevTools/devtools-frontend): a failed XHR as its user
# pastes it, inside a code fence or after a sentence, the status text in parentheses
@pytest.mark.parametrize(("line", "kind"), [
    ("```POST https://cook.example.org/api/recipes/create/image 504 (Gateway Time-out)", "deadline_exceeded"),
    ("xhr.js:247  POST http://localhost:3000/api/chat 503 (Service Unavailable)", "http_503"),
    ("xhr.js:247  POST http://localhost:3000/api/chat 429 (Too Many Requests)", "http_429"),
])
def test_a_consoles_status_text_in_parentheses_is_read(line: str, kind: str) -> None:
    assert kinds([line]) == [kind]


def test_a_consoles_other_status_is_no_incident() -> None:
    assert kinds(["xhr.js:247  POST http://localhost:3000/api/chat 400 (Bad Request)"]) == []


# a 408: the answering server gave up on the request (nginx's client timeouts, LiteLLM's answer for an upstream that
# timed out), on an access line or as a client tells it; whoever wrote the line, no proxy is named for it
@pytest.mark.parametrize("line", [
    'INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 408 Request Timeout',
    '10.0.0.1 - - [01/Jan/2025:10:00:00 +0000] "POST /v1/chat/completions HTTP/1.1" 408 0 "-" "python-httpx/0.27"',
    "openai.APIStatusError: Error code: 408 - {'error': {'message': 'Request Timeout'}}",
    "HTTP/1.1 408 Request Timeout",
])
def test_a_408_is_a_request_timeout(line: str) -> None:
    (event,) = [r for r in records([line]) if isinstance(r, Event)]
    assert event.kind.value == "deadline_exceeded" and event.fields["scope"] == "request"
    assert "timeout_by" not in event.fields


def test_a_504_access_line_names_the_proxy() -> None:
    line = '10.0.0.1 - - [01/Jan/2025:10:00:00 +0000] "POST /v1/chat/completions HTTP/1.1" 504 0 "-" "curl/8.5"'
    (event,) = [r for r in records([line]) if isinstance(r, Event)]
    assert event.fields["timeout_by"] == "proxy"
