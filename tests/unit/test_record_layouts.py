"""The layouts that records built by position, and patterns read by position, depend on.

The hot paths build `ServerStats` and `LogLine` with `tuple.__new__` and slices, `Frame` by filling its
`__dict__`, and unpack the vLLM stats pattern's groups positionally. These checks were import-time
`assert`s, which `python -O` removes: here they hold under any interpreter flag. A field added, dropped or
moved fails one of them, naming the builder to update.
"""

from __future__ import annotations

import dataclasses

import pytest

from agent.records import LogLine, Server, ServerStats, log_line
from agent.sources.framing import Frame, plain_frame
from parsers import redact
from parsers.vllm_stats import _PLAIN, _STATS


def test_server_stats_has_the_sixteen_fields_its_builders_place_by_position() -> None:
    # parsers/vllm_stats.py builds all 16 in order; agent/daemon/streams.py (`_locate`) keeps the first 12 and
    # rebuilds the last four; agent/sources/saved.py replaces the last one, `line`.
    assert ServerStats._fields == (
        "ts", "source", "server", "running", "waiting", "swapped", "kv_usage_ratio", "prompt_tps", "gen_tps",
        "prefix_hit_ratio", "preemptions", "kv_used_tokens", "path", "offset", "file_key", "line")


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


def test_the_stats_patterns_groups_sit_where_the_stats_reader_unpacks_them() -> None:
    assert tuple(_STATS.groupindex) == (
        "engine", "pt", "gt", "running", "swapped", "pending", "waiting", "preempt", "kv", "hit")
    assert _STATS.groups == len(_STATS.groupindex) == 10
    assert _PLAIN.groups == _STATS.groups  # the fast shape, tried first, puts each value in the same group


def test_a_stats_line_is_read_into_the_fields_it_names() -> None:
    """The positional build, end to end: each number of a V1 stats line lands in its own field."""
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
    # opens_request_text counts on a quoted string being emptied up to _QUOTED_MAX characters
    assert f"{{0,{redact._QUOTED_MAX}}}" in redact._QUOTED.pattern
    # every request marker contains one of the words tested first, or a line holding it would be passed over
    assert all(any(w in m for w in redact._REQUEST_WORDS) for m in redact._REQUEST_MARKERS)
