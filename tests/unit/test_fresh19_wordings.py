"""Shapes the fresh19 batch showed the parsers missing that live in parser code (koboldcpp's request summary as a
load sample, a 429 in lower case); the catalogued statements are rendered by test_catalogue behind every prefix."""

from __future__ import annotations

import pytest

from agent.records import Server, ServerStats
from parsers import make_parser
from tests.unit.wordings import kinds, records

# LostRuins/koboldcpp koboldcpp.py: the generate handler's closing summary, before 1.50 and after
SUMMARIES = [
    ("ContextLimit: 614/2048, Processing:0.43s (5.5ms/T), Generation:3.62s (55.8ms/T), Total:4.06s (16.02T/s)",
     614 / 2048),
    ("CtxLimit: 3768/4096, Process:0.44s (442.0ms/T = 2.26T/s), Generate:0.00s (3.0ms/T = 333.33T/s), Total:0.45s "
     "(2.25T/s)", 3768 / 4096),
]


# one request runs at a time, and its context is what the KV cache holds: the summary is a load sample, read alike
# whether the stream is unrecognised or llama.cpp's (koboldcpp prints libllama's lines too)
@pytest.mark.parametrize(("line", "usage"), SUMMARIES)
@pytest.mark.parametrize("server", [Server.AUTO, Server.LLAMACPP])
def test_koboldcpps_request_summary_is_a_load_sample(line: str, usage: float, server: Server) -> None:
    parser = make_parser(server)
    samples = [r for r in parser.feed(line) + parser.flush() if isinstance(r, ServerStats)]
    assert [(s.running, s.waiting, s.kv_usage_ratio) for s in samples] == [(1, None, usage)]


def test_a_context_past_its_limit_is_no_sample() -> None:
    line = "CtxLimit: 5000/4096, Process:0.44s (442.0ms/T = 2.26T/s), Generate:0.00s (3.0ms/T), Total:0.45s (2.25T/s)"
    assert not [r for r in records([line]) if isinstance(r, ServerStats)]


# microsoft/vscode-copilot-chat: `Server error: 429 too many requests`, the status text in lower case
def test_a_429_in_lower_case_is_a_refusal() -> None:
    assert kinds(["2026-01-16 17:24:11.367 [error] Server error: 429 too many requests"]) == ["http_429"]


# oobabooga/text-generation-webui modules/text_generation.py: each generation's summary, its speed alone
@pytest.mark.parametrize("server", [Server.AUTO, Server.LLAMACPP])
def test_text_generation_webuis_summary_is_a_speed_sample(server: Server) -> None:
    parser = make_parser(server)
    line = "Output generated in 9.62 seconds (2.49 tokens/s, 24 tokens, context 1951, seed 1235884226)"
    samples = [r for r in parser.feed(line) + parser.flush() if isinstance(r, ServerStats)]
    assert [(s.gen_tps, s.running, s.kv_usage_ratio) for s in samples] == [(2.49, None, None)]
    assert not [r for r in records(["Output generated in 9.62 seconds"]) if isinstance(r, ServerStats)]


# A status after a client's or proxy's own `error`: earlier batches' misses (fresh11's LLM proxy, fresh12's and
# fresh14's agents), read alike since
@pytest.mark.parametrize(("line", "kind"), [
    ("LLM proxy error 503 from https://llm.example.org/v1/messages key_id=21: Service temporarily unavailable",
     "http_503"),
    ('Error: 429 {"error":{"type":"rate_limit_error","message":"Rate limited"}}', "http_429"),
    ("Aborting because error 503 for http://fortioserver:8080/echo?size=1024", "http_503"),
])
def test_a_status_after_an_error_word_is_a_refusal(line: str, kind: str) -> None:
    assert kinds([line]) == [kind]


def test_an_error_with_another_status_is_no_refusal() -> None:
    assert kinds(["LLM proxy error 502 from https://llm.example.org/v1/messages"]) == []


# ModelTC/LightLLM lightllm/server/router/manager.py (fresh17's miss): the router's batch record at DEBUG, behind a
# logger prefix of vLLM's shape; the ratio with the prompt cache's unreferenced tokens is the pool's use
@pytest.mark.parametrize("server", [Server.AUTO, Server.VLLM])
def test_lightllms_token_ratio_is_a_kv_sample(server: Server) -> None:
    lines = ["DEBUG 01-12 13:52:23 [manager.py:251] dp_i 0 current batch size: 1 ",
             "DEBUG 01-12 13:52:23 [manager.py:251] dp_i 0 token used ratio: 0.0023731948408275256 not contain prompt "
             "cache tree unrefed token",
             "DEBUG 01-12 13:52:23 [manager.py:251] dp_i 0 token used ratio: 0.002472715914797712 contain prompt cache "
             "tree unrefed token"]
    parser = make_parser(server)
    samples = [r for line in lines for r in parser.feed(line) if isinstance(r, ServerStats)]
    samples += [r for r in parser.flush() if isinstance(r, ServerStats)]
    assert [s.kv_usage_ratio for s in samples] == [0.002472715914797712]
