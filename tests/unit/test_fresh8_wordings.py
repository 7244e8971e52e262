"""Shapes the fresh8 batch showed the parsers missing (or reading as an incident that was not one), each rendered
from its engine's or client's source format and beside its near miss (the same words, no incident). The
catalogued statements themselves are rendered by test_catalogue behind every prefix of their source."""

from __future__ import annotations

from agent.records import Event, Record, Server
from parsers import make_parser


def _records(lines: list[str]) -> list[Record]:
    parser = make_parser(Server.AUTO)
    out: list[Record] = []
    for line in lines:
        out += parser.feed(line)
    return out + parser.flush()


def _kinds(lines: list[str]) -> list[str]:
    return sorted({r.kind.value for r in _records(lines) if isinstance(r, Event)})


def test_a_proposal_of_what_the_server_should_answer_is_no_refusal() -> None:
    # a feature request asks what the server would return; nothing was returned
    assert _kinds(["  Would the preferred design be to return an OpenAI-compatible error body with HTTP 503 and "
                   "code `server_overloaded` when request admission is rejected?"]) == []
    assert _kinds(["The router should respond with HTTP 429 once the queue is full."]) == []
    assert _kinds(["I'd prefer to return HTTP 503 here instead of hanging."]) == []


def test_the_answer_as_a_client_logs_it_stays_a_refusal() -> None:
    # openai-python's APIStatusError text, "Error code: {status} - {body}" (_client.py _make_status_error)
    assert _kinds(["openai.InternalServerError: Error code: 503 - {'error': 'model should be loaded first'}"]) \
        == ["http_503"]
    assert _kinds(["openai.RateLimitError: Error code: 429 - {'error': {'message': 'you should retry later', "
                   "'code': 429}}"]) == ["http_429"]
