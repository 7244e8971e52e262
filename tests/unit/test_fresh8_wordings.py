"""Shapes the fresh8 batch showed the parsers missing (or reading as an incident that was not one), each rendered
from its engine's or client's source format and beside its near miss (the same words, no incident). The
catalogued statements themselves are rendered by test_catalogue behind every prefix of their source."""

from __future__ import annotations

from tests.unit.wordings import kinds


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
