"""Top error messages are grouped by a folded message, counted in occurrences, without info-level events,
and client addresses never reach the store."""

from __future__ import annotations

from pathlib import Path

from agent.messages import fold
from agent.records import Event, EventKind, Phase, Server, Severity
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from parsers import make_parser

T0 = 1_790_000_000.0


def test_numbers_ids_and_addresses_fold_and_statuses_stay() -> None:
    assert fold("Request chatcmpl-9f8e7d failed: deadline exceeded after completion_tokens=512") == \
        "Request chatcmpl-<id> failed: deadline exceeded after completion_tokens=<n>"
    assert fold("NCCL watchdog: 10.0.0.5:29500 timed out after 600000 ms") == \
        "NCCL watchdog: <addr> timed out after <n> ms"
    assert fold("container 3f2a9c1b7d4e exited, uuid 6f4c2d1e-0000-1111-2222-333344445555") == \
        "container <id> exited, uuid <id>"
    assert fold('<client> - "<redacted>" 503 Service Unavailable') != fold('<client> - "<redacted>" 500 Error')


def test_a_storm_of_refusals_is_one_row_with_its_count_and_no_client_address(tmp_path: Path) -> None:
    """46 refusals from 46 client ports, logged by vLLM's API server (uvicorn), one scraped queue_full event
    standing for 46, and an info-level event: two rows (46 and 46), no info row, no address stored."""
    parser = make_parser(Server.VLLM, "vllm", T0)
    lines = [f'(APIServer pid=7) INFO:     10.1.2.3:{40000 + i} - "POST /v1/chat/completions HTTP/1.1" 503 '
             "Service Unavailable" for i in range(46)]
    records = [r for i, line in enumerate(lines) for r in parser.feed(line, T0 + i, "/v.log", i * 100)]
    records.append(Event(T0, "vllm", Server.VLLM, EventKind.QUEUE_FULL, Severity.WARNING, Phase.ADMISSION,
                         "admission rejections rose by 46", {"count": 46, "reason": "max_num_queued_reqs"}))
    records.append(Event(T0, "vllm", Server.VLLM, EventKind.PENDING, Severity.INFO, Phase.QUEUE,
                         "queue became non-empty: 3 waiting, 13 running", {}))
    with Store.open(tmp_path / "a.db") as store:
        store.commit(records, now=T0)
        top = Queries(store).top_messages(0, T0 + 60, total=48)
        stored = [row[0] for row in store.query("SELECT message FROM events", ())]
    assert [(kind, count) for kind, _, count in top.rows] == [("http_503", 46), ("queue_full", 46)]
    assert not any("10.1.2.3" in message for message in stored)
    assert all(kind != "pending" for kind, _, _ in top.rows)
