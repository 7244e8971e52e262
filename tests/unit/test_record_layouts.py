"""Records are built and read by field name, so a field added, dropped or moved cannot mis-build them.

`LogLine` (one per tailed line) and `Frame` keep fast builders next to their types; these checks hold them to
what the types' own constructors build, under any interpreter flag (an import-time `assert` would vanish under
`python -O`). A stored row is read from a record by name: each column gets the field it is named after.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from agent.records import LogLine, Server, ServerStats, log_line
from agent.sinks.rows import TABLES
from agent.sources.framing import Frame, plain_frame
from parsers import redact


def test_each_stats_column_holds_the_field_it_is_named_after() -> None:
    # every field a distinct value, so a value in the wrong column cannot go unseen
    stats = ServerStats(ts=1.5, source="e", server=Server.VLLM, running=3, waiting=4, swapped=5, kv_usage_ratio=0.25,
                        prompt_tps=6.5, gen_tps=7.5, prefix_hit_ratio=0.125, preemptions=8, kv_used_tokens=9,
                        path="/var/log/vllm.log", offset=10, file_key="k1", line=11)
    table = TABLES[ServerStats]
    columns = table.insert.split("(", 1)[1].split(")", 1)[0].split(", ")
    row = table.row(stats, 99.0)
    assert columns[:2] == ["at", "ts"] and row[:2] == (1.5, 1.5)
    assert dict(zip(columns[2:], row[2:], strict=True)) == {
        "source": "e", "server": "vllm", "running": 3, "waiting": 4, "swapped": 5, "kv_usage_ratio": 0.25,
        "prompt_tps": 6.5, "gen_tps": 7.5, "prefix_hit_ratio": 0.125, "preemptions": 8, "kv_used_tokens": 9,
        "path": "/var/log/vllm.log", "offset": 10, "file_key": "k1"}


def _calls(name: str) -> list[tuple[str, ast.Call]]:
    root = Path(__file__).resolve().parents[2]
    found = []
    for path in sorted(p for package in ("agent", "parsers") for p in (root / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == name:
                found.append((f"{path.relative_to(root)}:{node.lineno}", node))
    return found


def test_server_stats_is_built_by_name_everywhere() -> None:
    """A defaulted field added to `ServerStats` (before `line`, where a new one goes) shifts every value placed
    by position after it: only the three fields every sample has (ts, source, server) may be given so."""
    calls = _calls("ServerStats")
    assert calls, "no ServerStats built: the walk is looking in the wrong place"
    positional = {where: len(call.args) for where, call in calls if len(call.args) > 3
                  or any(isinstance(arg, ast.Starred) for arg in call.args)}
    assert not positional, f"ServerStats built by position: {positional}"
    # the one fast factory, `log_line`, sits next to its type and is held to it below
    around = [where for where, _ in _calls("tuple.__new__") + _calls("_new_tuple")
              if not where.startswith("agent/records.py:")]
    assert not around, f"a record built around its constructor: {around}"


def test_log_line_builds_what_the_named_tuple_does() -> None:
    assert LogLine._fields == ("source", "path", "offset", "text", "ts", "stream", "truncated", "file_key")
    fast = log_line("vllm", "/var/log/vllm.log", 120, "INFO ready", 1.5, "stdout", True, "k1")
    assert fast == LogLine(source="vllm", path="/var/log/vllm.log", offset=120, text="INFO ready", ts=1.5,
                           stream="stdout", truncated=True, file_key="k1")
    assert type(fast) is LogLine and fast.file_key == "k1" and fast.truncated is True


def test_plain_frame_sets_every_field_of_frame() -> None:
    assert [f.name for f in dataclasses.fields(Frame)] == ["text", "stream", "ts", "partial", "truncated"]
    assert plain_frame("a line") == Frame("a line")
    assert vars(plain_frame("a line")) == {"text": "a line", "stream": None, "ts": None, "partial": False,
                                           "truncated": False}


def test_a_stats_line_is_read_into_the_fields_it_names() -> None:
    """End to end: each number of a V1 stats line lands in its own field."""
    from parsers.vllm import VllmParser

    line = ("(APIServer pid=1) INFO 01-02 03:04:05 [loggers.py:123] Engine 000: Avg prompt throughput: 12.5 "
            "tokens/s, Avg generation throughput: 34.5 tokens/s, Running: 7 reqs, Waiting: 3 reqs, "
            "GPU KV cache usage: 41.5%, Prefix cache hit rate: 20.0%")
    (stats,) = [r for r in VllmParser("e", ref_time=0.0).feed(line) if isinstance(r, ServerStats)]
    assert (stats.source, stats.server, stats.running, stats.waiting, stats.swapped) == ("e", Server.VLLM, 7, 3,
                                                                                          None)
    assert (stats.prompt_tps, stats.gen_tps) == (12.5, 34.5) and stats.kv_usage_ratio == pytest.approx(0.415)
    assert stats.prefix_hit_ratio == 0.2 and stats.preemptions is None


def test_redaction_patterns_keep_the_invariants_their_fast_paths_count_on() -> None:
    # opens_request_text counts on a quoted string being emptied up to QUOTED_MAX characters
    assert f"{{0,{redact.QUOTED_MAX}}}" in redact._QUOTED.pattern
    # every request marker contains one of the words tested first, or a line holding it would be passed over
    assert all(any(w in m for w in redact.REQUEST_WORDS) for m in redact._REQUEST_MARKERS)
