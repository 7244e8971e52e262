"""Saved logs → parsers → a store: the same records the daemon would store, one engine per file."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import AgentError
from agent.offline.load import load_logs
from agent.sinks.queries import Queries
from agent.sinks.store import Store

STATS = ("INFO 11-29 09:00:02 [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
         "throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: 2 reqs, GPU KV cache usage: 42.0%, Prefix cache "
         "hit rate: 0.0%")
KV = "INFO 11-29 08:59:00 [kv_cache_utils.py:1087] GPU KV cache size: 98,304 tokens"


def test_each_file_is_its_own_engine_and_its_records_are_queryable(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(f"{KV}\n{STATS}\n")
    b.write_text(f"{STATS}\n")
    with Store.open(":memory:") as store:
        scans = load_logs([a, b], store)
        assert [s.server.value for s in scans] == ["vllm", "vllm"]
        q = Queries(store)
        assert sorted(q.latest_stats()) == [str(a), str(b)]
        assert q.latest_facts() == {str(a): {"kv_cache_tokens": 98304.0}}
        assert q.event_counts(0.0) == {(str(a), "vllm", "pending"): 1, (str(b), "vllm", "pending"): 1}


def test_an_unreadable_file_is_one_clear_error(tmp_path: Path) -> None:
    with Store.open(":memory:") as store, pytest.raises(AgentError, match=r"missing\.log: cannot read"):
        load_logs([tmp_path / "missing.log"], store)
