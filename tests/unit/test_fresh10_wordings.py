"""Shapes the fresh10 batch showed the parsers missing, each rendered from its client's source format and beside
its near miss. The catalogued statements themselves are rendered by test_catalogue behind every prefix."""

from __future__ import annotations

from agent.records import Event
from tests.unit.wordings import kinds, records


# transitive-bullshit/chatgpt-api@v5.1.2:src/chatgpt-api.ts:ChatGPTAPI.sendMessage,
# pTimeout(responseP, {milliseconds: timeoutMs, message: 'OpenAI timed out waiting for response'})
def test_the_chatgpt_client_giving_up_is_a_client_timeout() -> None:
    got = [r for r in records(["2023-04-12 16:46:53 TimeoutError: OpenAI timed out waiting for response",
                               "2023-04-12 16:46:53     at new Promise (<anonymous>)"]) if isinstance(r, Event)]
    assert [(e.kind.value, e.fields["timeout_by"]) for e in got] == [("deadline_exceeded", "client")]
    # a sentence about the setting names no timeout that fired
    assert kinds(["Set timeoutMs so that OpenAI can take its time on long answers."]) == []


# the same file: `OpenAI error ${res.status || res.statusText}: ${reason}` for any non-2xx answer
def test_the_chatgpt_clients_relayed_status_is_its_class() -> None:
    assert kinds(['ChatGPTError: OpenAI error 429: {"error":{"message":"Rate limit reached for requests"}}']) == [
        "http_429"]
    assert kinds(['ChatGPTError: OpenAI error 503: {"error":{"message":"The server is overloaded"}}']) == [
        "http_503"]
    assert kinds(['ChatGPTError: OpenAI error 401: {"error":{"message":"Incorrect API key provided"}}']) == []


# simonw/llm@0.32:llm/cli.py:prompt, `raise click.ClickException(str(ex))`, which Click shows as "Error: {message}";
# openai/openai-python@v3.3.1:src/openai/_exceptions.py:APITimeoutError, message="Request timed out."
def test_the_llm_clis_bare_request_timed_out_is_a_client_timeout() -> None:
    got = [r for r in records(["cat prompt | llm -t gpt-pro-max > out.pro", "Error: Request timed out."])
           if isinstance(r, Event)]
    assert [(e.kind.value, e.fields["timeout_by"], e.fields["scope"]) for e in got] == [
        ("deadline_exceeded", "client", "request")]
    # another of llm's errors through the same path is none
    assert kinds(["Error: No key found - add one using 'llm keys set openai' or set the OPENAI_API_KEY environment "
                  "variable"]) == []


# BerriAI/litellm@03b392624a:litellm/timeout.py:timeout, raise exception_to_raise(f"A timeout error occurred. The
# function call took longer than {local_timeout_duration} second(s).", …): the call's own named limit
def test_litellms_timeout_decorator_names_its_limit() -> None:
    (event,) = [r for r in records(["{'detail': ['OpenAI API error: A timeout error occurred. The function call took "
                                    "longer than 60 second(s).. If you have a team budget,note that your team budget "
                                    "has NOT been consumed.']}"]) if isinstance(r, Event)]
    assert (event.kind.value, event.fields["scope"], event.fields["timeout_by"], event.fields["timeout_s"]) == (
        "deadline_exceeded", "request", "client", 60.0)
    got = [r for r in records(["litellm.exceptions.Timeout: litellm.Timeout: A timeout error occurred. The function "
                               "call took longer than 600.0 second(s)."]) if isinstance(r, Event)]
    assert [e.fields["timeout_s"] for e in got] == [600.0]
    # the decorator's own documentation of the limit is no timeout
    assert kinds([":param float timeout_duration: Timeout duration in seconds. If none callable won't time out."]) == []


# The OpenAI API's documented error names (its Help Center's "Error Code 429 - Rate limit reached for requests",
# "Error Code 429 - You exceeded your current quota, …"), which front-ends show for a refused call
def test_openais_documented_429_names_are_a_refusal() -> None:
    assert kinds(["Error Code 429 - Rate limit reached for requests"]) == ["http_429"]
    assert kinds(["Error Code 429 - You exceeded your current quota, please check your plan and billing details."]) == [
        "http_429"]
    assert kinds(["Error Code 429 - The engine is currently overloaded. Please try again later."]) == ["http_429"]
    # another status under the same naming, and links to the articles, are none
    assert kinds(["Error Code 401 - Invalid Authentication"]) == []
    assert kinds(["- [Error Code 429 - Rate limit reached for requests](https://help.openai.com/en/articles/6891829-"
                  "error-code-429-rate-limit-reached-for-requests)"]) == []
    assert kinds(["Error Code 429 - Rate limit reached for requests | OpenAI Help Center"]) == []
