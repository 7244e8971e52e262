"""Request durations from the lines that print them (access lines, TGI's span, llama.cpp's timings) become
`RequestSample`s, are stored once, and feed the timeout rules without a scrape. Each expected duration is
the line's own number, converted by hand (ms ÷ 1000, a Go duration's parts added up)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.records import Event, RequestSample, Server
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from parsers import make_parser

NGINX = ('10.0.0.7 - - [02/Dec/2025:10:00:{s:02d} +0000] "POST /v1/chat/completions?key=abc HTTP/1.1" {status} 512 '
         '"-" "python-requests/2.31" rt={rt} urt="{urt}"')

LINES = [
    # nginx `log_format … rt=$request_time urt="$upstream_response_time"`: the request's own time wins
    (Server.AUTO, NGINX.format(s=1, status=200, rt="3.512", urt="3.498"), 3.512, 200),
    # only the upstream's time, a retried upstream listing two: the first
    (Server.AUTO, '10.0.0.7 - - [02/Dec/2025:10:00:02 +0000] "POST /v1/completions HTTP/1.1" 200 99 "-" "curl" '
                  'upstream_response_time=0.120, 0.300', 0.120, 200),
    # a proxy's 504 at its 60 s deadline ran 60 s: it counts (it is not a refusal)
    (Server.AUTO, NGINX.format(s=3, status=504, rt="60.001", urt="60.000"), 60.001, 504),
    # Envoy's default format: flags, bytes received, bytes sent, duration 226 ms, upstream 100 ms
    (Server.AUTO, '[2025-12-02T10:00:04.310Z] "POST /v1/completions HTTP/1.1" 200 - 154 0 226 100 "10.0.35.28" '
                  '"python-requests/2.31" "cc21d9b0" "vllm" "tcp://10.0.2.1:8000"', 0.226, 200),
    # Ollama's GIN line: Go durations, 1 minute 2.5 s and 812.3 µs
    (Server.AUTO, '[GIN] 2025/12/02 - 10:00:05 | 200 |  1m2.5s |  10.0.0.1 | POST     "/api/chat"', 62.5, 200),
    (Server.AUTO, '[GIN] 2025/12/02 - 10:00:05 | 200 |    812.3µs |  10.0.0.1 | GET      "/api/tags"', 0.0008123, 200),
    # TGI's per-request span (the router's "Success" line): total_time 1.194364886 s
    (Server.TGI, '2025-12-02T10:00:06.123456Z  INFO generate{parameters=GenerateParameters { do_sample: false, '
                 'max_new_tokens: Some(20) } total_time="1.194364886s" validation_time="1.031919ms" '
                 'queue_time="87.24µs" inference_time="1.193245851s" time_per_token="59.662292ms"}: '
                 'text_generation_router::server: router/src/server.rs:322: Success', 1.194364886, None),
    # llama.cpp's print_timings: total time 1,970.89 ms
    (Server.LLAMACPP, "      total time =    1970.89 ms /   141 tokens", 1.97089, None),
]


def samples(server: Server, lines: list[str]) -> list[RequestSample]:
    parser = make_parser(server, "proxy")
    out = [r for i, line in enumerate(lines) for r in parser.feed(line, None, "/logs/proxy.log", i * 200)]
    out += parser.flush()
    return [r for r in out if isinstance(r, RequestSample)]


@pytest.mark.parametrize(("server", "line", "seconds", "status"), LINES, ids=[f"line{i}" for i in range(len(LINES))])
def test_a_timed_line_gives_its_duration(server: Server, line: str, seconds: float, status: int | None) -> None:
    (sample,) = samples(server, [line])
    assert sample.duration_s == pytest.approx(seconds, rel=1e-9) and sample.status == status
    assert "abc" not in repr(sample)  # the number and the status only: no route, query, client or body


def test_refusals_untimed_lines_and_quoted_text_give_no_duration() -> None:
    lines = [NGINX.format(s=1, status=503, rt="0.002", urt="0.001"),  # a refusal: counted as one, not timed
             '[GIN] 2025/12/02 - 10:00:05 | 429 |     2.1ms |  10.0.0.1 | POST     "/api/chat"',
             'INFO:     10.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK',  # uvicorn prints no duration
             "llama_perf_context_print:        total time =    1970.89 ms /   141 tokens",  # the CLI's, not a request
             "INFO 12-02 10:00:07 [logger.py:43] Received request cmpl-1: prompt: 'what does rt=99 mean?', "
             "params: SamplingParams(n=1), prompt_token_ids: None."]
    parser = make_parser(Server.AUTO, "proxy")
    out = [r for i, line in enumerate(lines) for r in parser.feed(line, None, "/logs/proxy.log", i)] + parser.flush()
    assert not [r for r in out if isinstance(r, RequestSample)]
    assert sorted(r.kind.value for r in out if isinstance(r, Event)) == ["http_429", "http_503"]


def test_the_batch_lane_gives_what_feed_gives() -> None:
    """The batch entry point (`feed_batch`) settles plain access lines without `feed`; a timed one must not be."""
    lines = [NGINX.format(s=s, status=200, rt=f"{s}.5", urt=f"{s}.4") for s in range(1, 6)]
    lines.insert(2, 'INFO:     10.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK')
    one_by_one = make_parser(Server.VLLM, "e")
    fed = [r for i, line in enumerate(lines) for r in one_by_one.feed(line, None, "p", i * 300)]
    batched = make_parser(Server.VLLM, "e").feed_batch(lines, [i * 300 for i in range(len(lines))], "p")
    assert batched == fed and [r.duration_s for r in fed if isinstance(r, RequestSample)] == [1.5, 2.5, 3.5, 4.5, 5.5]


def test_durations_are_stored_once_and_read_per_engine() -> None:
    store = Store.open(":memory:")
    batch = [RequestSample(1000.0 + i, "nginx", Server.AUTO, d, 200, "/logs/a.log", i * 100, "key-a")
             for i, d in enumerate((1.0, 2.0, 3.0))]
    store.commit([*batch, RequestSample(1001.0, "other", Server.AUTO, 9.0, 200, "/logs/b.log", 0, "key-b")], now=2000.0)
    store.commit(batch, now=2001.0)  # a replay of the same bytes stores nothing twice
    queries = Queries(store)
    assert queries.window_durations(0.0, 5000.0, "nginx") == [1.0, 2.0, 3.0]
    assert queries.window_durations(1001.0, 1002.0, "nginx") == [2.0]  # since <= at < until
    assert "nginx" in queries.engines()


def test_a_proxy_log_alone_finds_the_tight_deadline(tmp_path: Path) -> None:
    """40 requests in a proxy's log, 36 of 10 s and 4 of 29 s, under a 30 s request timeout: p99 at rank
    0.99 × 39 = 38.61, between two 29 s, is 29 s ≥ 0.9 × 30 = 27 s. No engine stats: no throughput to size the
    output cap from, so 29 s × 1.2 = 34,800 ms."""
    log, config = tmp_path / "proxy.log", tmp_path / "agent.yaml"
    lines = [NGINX.format(s=s, status=200, rt="29.000" if s % 10 == 9 else "10.000", urt="9.9") for s in range(40)]
    log.write_text("\n".join(lines) + "\n")
    config.write_text("limits: {request_timeout_ms: 30000}\n")
    advised = json.loads(CliRunner().invoke(app, ["advise", "--log", str(log), "--config", str(config),
                                                  "--json"]).stdout)
    (rec,) = [r for r in advised["recommendations"] if r["knob"] == "request_timeout_ms"]
    assert (rec["direction"], rec["from"], rec["to"], rec["governed_by"]) == (
        "raise", 30000, 34800, "request_timeout_tight")
    (found,) = [f for f in advised["findings"] if f["rule"] == "request_timeout_tight"]
    assert found["evidence"]["request_duration_seconds_p99"] == 29.0
    assert found["evidence"]["request_duration_seconds_count"] == 40.0


def test_a_0005_store_gains_the_request_table(tmp_path: Path) -> None:
    """Migrations only append: a store the previous release left opens, keeps its rows and takes durations."""
    from sqlite_utils import Database

    from agent.sinks.store import KNOWN_MIGRATIONS, MIGRATIONS

    assert KNOWN_MIGRATIONS[5] == "0006_request_samples"
    db = tmp_path / "agent.db"
    old = Database(db)
    MIGRATIONS.apply(old, stop_before="0006_request_samples")
    old.execute("INSERT INTO events (at, ts, source, server, kind, severity, phase, message, fields) "
                "VALUES (1, 1, 'vllm', 'vllm', 'oom', 'critical', 'runtime', 'm', '{}')")
    old.conn.commit()
    old.close()
    with Store.open(db) as store:
        assert store.query("SELECT count(*) FROM events") == [(1,)]
        store.commit([RequestSample(5.0, "vllm", Server.VLLM, 2.5, 200, "/logs/v.log", 0, "k")], now=6.0)
        assert Queries(store).window_durations(0.0, 10.0, "vllm") == [2.5]


def test_every_timed_word_marks_a_line_that_may_carry_a_duration() -> None:
    """`carries_duration` spells TIMED_WORDS out (the compiled lane reads the tuple): the two must agree."""
    from parsers.http_access import TIMED_WORDS, carries_duration

    for word in TIMED_WORDS:
        assert carries_duration(f"plain words {word} more words"), word
    assert not carries_duration("plain words, none of them timed")
