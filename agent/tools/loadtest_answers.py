"""What a load-test answer is: its error class, the tokens a completion reports, and what a line of a
stream says. Pure: bytes and statuses in, words and numbers out (tests/unit/test_loadtest.py,
tests/unit/test_loadtest_hostile.py)."""

from __future__ import annotations

import json


def error_class(status: int) -> str | None:
    """None for a success; else the LoadStep error class of an HTTP status."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return "http_429"
    if status == 503:
        return "http_503"
    if status >= 500:
        return "http_5xx"
    return "other"


def completion_tokens(body: bytes) -> int | None:
    """The completion tokens an OpenAI answer reports (0 when it does not say); None when the body is not
    a completion at all: not JSON, not an object with a `choices` list, or nested too deep to read."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
        return None
    usage = answer.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else 0


def stream_chunk_kind(line: bytes) -> str | None:
    """What one server-sent-events line of an OpenAI stream is: `text` (a chunk carrying output),
    `chunk` (a completion chunk without text: the role, a finish reason), `error` (the server failed after
    its 200), or None (keep-alive, [DONE], anything that is not a completion chunk)."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if not data or data == b"[DONE]":
        return None
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict):
        return None
    if "error" in event:
        return "error"
    choices = event.get("choices")
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict):
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if text:
                return "text"
    return "chunk"  # a completion chunk without text (the role, a finish reason)
