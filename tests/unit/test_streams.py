"""`LogStream.feed`: a batch's lines are parsed in runs of one file (`Parser.feed_batch`), each by its own
engine's parser, and give exactly what feeding the lines one at a time gives."""

from __future__ import annotations

from typing import Any

from agent.config import SourceSection
from agent.daemon.streams import LogStream
from agent.records import Event, LogLine, Server, ServerStats, log_line

REF = 1_764_400_000.0


def _stats(second: int, waiting: int) -> str:
    return (f"(APIServer pid=1) INFO 11-29 09:00:{second:02d} [loggers.py:116] Engine 000: Avg prompt throughput: "
            f"10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: {waiting} reqs, "
            "GPU KV cache usage: 42.0%, Prefix cache hit rate: 0.0%")


REFUSAL = '(APIServer pid=1) INFO:     10.0.0.9:1 - "POST /v1/completions HTTP/1.1" 503 Service Unavailable'


def _stream() -> LogStream:
    section = SourceSection(path="/logs/*.log", server=Server.VLLM, name="vllm")
    return LogStream(section, None, Server.VLLM, REF)  # type: ignore[arg-type]  # feed never reads


def _lines() -> list[LogLine]:
    """Two files of one glob interleaved in one batch (two engines), a line with an envelope time between."""
    spec: list[tuple[str, str, str, float | None]] = [
        ("/logs/a.log", "1:1:x", _stats(1, 0), None),
        ("/logs/a.log", "1:1:x", REFUSAL, None),
        ("/logs/b.log", "1:2:y", _stats(2, 3), None),  # b's queue forms: its own engine's `pending`
        ("/logs/b.log", "1:2:y", _stats(3, 3), None),
        ("/logs/a.log", "1:1:x", _stats(4, 2), None),  # then a's
        ("/logs/a.log", "1:1:x", REFUSAL, REF + 5),  # an envelope time: fed on its own
        ("/logs/a.log", "1:1:x", _stats(5, 2), None),
        ("/logs/a.log", "1:3:z", _stats(6, 0), None),  # a rotated: another incarnation of the same path
        ("/logs/a.log", "1:3:z", _stats(7, 1), None),
        ("/logs/a.log.1", "1:3:z", REFUSAL, None),  # and that one renamed: its key now read under a new name
    ]
    return [log_line("vllm", path, 100 * n, text, ts, None, False, key)
            for n, (path, key, text, ts) in enumerate(spec)]


def test_a_batch_of_two_files_is_read_as_each_line_on_its_own() -> None:
    lines = _lines()
    one_by_one, batched = _stream(), _stream()
    expected: list[Any] = [r for line in lines for r in one_by_one.feed([line])]
    got = batched.feed(lines)
    assert got == expected
    assert [(r.source, r.kind.value, r.file_key, r.offset, r.path) for r in got if isinstance(r, Event)] == [
        ("vllm/a", "http_503", "1:1:x", 100, "/logs/a.log"), ("vllm/b", "pending", "1:2:y", 200, "/logs/b.log"),
        ("vllm/a", "pending", "1:1:x", 400, "/logs/a.log"), ("vllm/a", "http_503", "1:1:x", 500, "/logs/a.log"),
        ("vllm/a", "pending", "1:3:z", 800, "/logs/a.log"), ("vllm/a", "http_503", "1:3:z", 900, "/logs/a.log.1")]
    assert [(r.source, r.file_key, r.offset) for r in got if isinstance(r, ServerStats)] == [
        ("vllm/a", "1:1:x", 0), ("vllm/b", "1:2:y", 200), ("vllm/b", "1:2:y", 300), ("vllm/a", "1:1:x", 400),
        ("vllm/a", "1:1:x", 600), ("vllm/a", "1:3:z", 700), ("vllm/a", "1:3:z", 800)]
    assert batched.paths == one_by_one.paths == {"1:1:x": "/logs/a.log", "1:2:y": "/logs/b.log",
                                                 "1:3:z": "/logs/a.log.1"}
