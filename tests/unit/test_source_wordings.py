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

