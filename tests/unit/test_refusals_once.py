"""Each refusal counted once across its witnesses: the engine's refusal message and its access line in one
stream (the message wins: it names the limit), a client's line that carries both, and a proxy's log in front
(another source: judged on its own, never added to the engine's counts). The expected counts are the
refusals written into the logs, counted by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from agent.cli import app
from agent.records import Event, Server, occurrences
from parsers import make_parser
from parsers.refusals import PAIR_LINES

T0 = 1_764_406_800.0  # 2025-11-29 09:00 UTC, the day of the lines below
SGLANG_FULL = "[2025-11-29 09:00:{s:02d}] The request queue is full."
UVICORN_503 = 'INFO:     10.0.0.9:40000 - "POST /generate HTTP/1.1" 503 Service Unavailable'


def counted(server: Server, lines: list[str]) -> dict[str, int]:
    parser = make_parser(server, "e", ref_time=T0)
    out = [r for i, line in enumerate(lines) for r in parser.feed(line, None, "/logs/e.log", i * 100)]
    totals: dict[str, int] = {}
    for r in out + parser.flush():
        if isinstance(r, Event):
            totals[r.kind.value] = totals.get(r.kind.value, 0) + occurrences(r)
    return totals


def test_the_engine_s_message_and_its_status_line_are_one_refusal() -> None:
    # 3 refusals, each as SGLang's message then uvicorn's 503: 3 queue-full, the 503s counted as theirs
    lines = [x for s in (1, 2, 3) for x in (SGLANG_FULL.format(s=s), UVICORN_503)]
    assert counted(Server.SGLANG, lines) == {"queue_full": 3, "http_503": 0}


def test_a_status_line_without_its_message_still_counts() -> None:
    # 1 message + 2 status lines: the second 503 answers no message (a refusal of another kind): 2 refusals
    assert counted(Server.SGLANG, [SGLANG_FULL.format(s=1), UVICORN_503, UVICORN_503]) == {
        "queue_full": 1, "http_503": 1}
    # a message, then a 503 more than PAIR_LINES lines later: not its answer — 2
    filler = ["[2025-11-29 09:00:01] Prefill batch. #new-seq: 1, #new-token: 10"] * (PAIR_LINES + 1)
    assert counted(Server.SGLANG, [SGLANG_FULL.format(s=1), *filler, UVICORN_503]) == {
        "queue_full": 1, "http_503": 1}


def test_a_client_line_relaying_the_refusal_is_one() -> None:
    line = ("2025-11-29 09:00:05 ERROR openai.APIStatusError: Error code: 503 - {'error': 'server busy, please "
            "try again.  maximum pending requests exceeded'}")
    assert counted(Server.AUTO, [line]) == {"queue_full": 1, "http_503": 0}


VLLM_STATS = ("INFO 11-29 09:00:{s:02d} [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg "
              "generation throughput: 20.0 tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 40.0%, "
              "Prefix cache hit rate: 0.0%")


def test_an_engine_log_and_a_proxy_log_of_the_same_refusals(tmp_path: Path) -> None:
    """6 refusals (at 10, 15, …, 35 s) seen three times: vLLM's "Request queue full" message, its uvicorn 503,
    and nginx's 503 in front. The engine's finding counts 6 (not 12, not 18), all at KV 40 %; the proxy's log
    has no KV figure and gives no finding of its own; the report's headline says 6, with no 503 beside it."""
    engine, proxy, config = tmp_path / "vllm.log", tmp_path / "nginx.log", tmp_path / "agent.yaml"
    lines, front = [], []
    for s in range(0, 60, 5):
        lines.append(VLLM_STATS.format(s=s))
        if 10 <= s < 40:
            lines += [f"INFO 11-29 09:00:{s:02d} [async_llm.py:1] Request queue full - rejecting request cmpl-{s}",
                      'INFO:     10.0.0.9:40000 - "POST /v1/completions HTTP/1.1" 503 Service Unavailable']
            front.append(f'10.0.0.1 - - [29/Nov/2025:09:00:{s:02d} +0000] "POST /v1/completions HTTP/1.1" 503 190 '
                         '"-" "python-requests/2.31" rt=0.004 urt="0.003"')
    engine.write_text("\n".join(lines) + "\n")
    proxy.write_text("\n".join(front) + "\n")
    os.utime(engine, (T0 + 3600, T0 + 3600))  # vLLM's stamps have no year: the file's time gives 2025
    config.write_text("server: {max_num_seqs: 8, max_queue_size: 16}\n")
    logs = ["--log", str(engine), "--log", str(proxy), "--config", str(config)]
    advised = json.loads(CliRunner().invoke(app, ["advise", *logs, "--json"]).stdout)
    (found,) = [f for f in advised["findings"] if f["rule"].startswith("rejections")]
    assert found["engine"] == str(engine) and found["rule"] == "rejections_with_kv_headroom"
    ev = found["evidence"]
    assert (ev["room_refused_count"], ev["queue_full_count"], ev["http_503_count"]) == (6, 6, 0)
    assert found["to"] == 32  # max_queue_size 16 × 2
    reported = json.loads(CliRunner().invoke(app, ["report", *logs, "--format", "json"]).stdout)
    head = reported["verdict"]["headline"]
    assert "6 queue-full rejections" in head and "503" not in head, head
