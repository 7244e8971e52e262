"""Properties every parser keeps on any input: it never raises, it never keeps a prompt, and no line can
make its patterns backtrack catastrophically.

Line shapes for planting are the places user data appears in real logs: vLLM's `Received request`
(prompt and sampling params at INFO), SGLang's `Receive: obj=…` with `--log-requests`, llama.cpp's
verbose request bodies, Ollama's debug prompt, access-log query strings, TGI spans with stop
sequences, and exception messages that quote their argument.
"""

from __future__ import annotations

import json
import re
import urllib.parse

import regex
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from agent.records import Record, Server, as_dict
from parsers import (
    REGISTRY,
    base,
    families,
    generic,
    gpu,
    http_access,
    kernel,
    llamacpp,
    make_parser,
    prefix,
    sglang,
    signature,
    tgi,
    vllm,
    vllm_facts,
)
from parsers import redact as redact_module
from parsers.redact import REDACTED, redact

from .conftest import REF_TIME, run

PARSERS = [*REGISTRY, Server.AUTO]
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Real lines that produce records, to surround planted lines with (and to truncate at random points).
TRIGGERS = [
    "(EngineCore_DP0 pid=990) ERROR 09-14 03:15:31 [core.py:710] EngineCore encountered a fatal error.",
    "(EngineCore_DP0 pid=990) ERROR 09-14 03:15:31 [core.py:710] Traceback (most recent call last):",
    '(EngineCore_DP0 pid=990) ERROR 09-14 03:15:31 [core.py:710]   File "/x/core.py", line 701, in run',
    "(EngineCore_DP0 pid=990) ERROR 09-14 03:15:31 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free.",
    "INFO 04-28 03:37:10 metrics.py:229] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 944.9 "
    "tokens/s, Running: 256 reqs, Swapped: 0 reqs, Pending: 31 reqs, GPU KV cache usage: 99.2%, CPU KV cache usage: "
    "0.0%",
    "[2025-02-27 04:47:40 TP0] Decode batch. #running-req: 1010, #token: 385006, token usage: 0.97, gen throughput "
    "(token/s): 1397.13, #queue-req: 122",
    "2025-05-01T01:35:01.000001Z ERROR text_generation_launcher: Shard 0 crashed",
    "srv  log_server_r: request: POST /v1/chat/completions 10.2.0.133 503",
    "Dec 11 09:58:58 gpu01 kernel: [ 1234.567890] NVRM: Xid (PCI:0000:5e:00): 79, pid=1234, name=python3, GPU has "
    "fallen off the bus.",
]


def _shapes(p: str) -> list[str]:
    q = urllib.parse.quote(p)
    return [
        f"INFO 05-08 14:46:12 [logger.py:39] Received request cmpl-1: prompt: {p!r}, params: SamplingParams(n=1, "
        f"stop=[{p!r}]), prompt_token_ids: [1, 2], lora_request: None.",
        f"(APIServer pid=1) INFO 05-08 14:46:12 [logger.py:39] Received request chatcmpl-9: prompt: {p!r}, "
        f"params: SamplingParams(n=1), prompt_token_ids: None, prompt_embeds shape: None, lora_request: None.",
        f"(APIServer pid=1) INFO 05-08 14:46:13 [logger.py:71] Generated response chatcmpl-9: output: {p!r}, "
        "output_token_ids: [1, 2], finish_reason: stop",
        f"[2026-04-05 20:02:59] Receive: obj=GenerateReqInput(text={p!r}, sampling_params={{'max_new_tokens': 9}})",
        f"srv  log_server_r: request:  {json.dumps({'prompt': p, 'n_predict': 8})}",
        "time=2026-01-01T10:00:00.000Z level=DEBUG source=server.go:1 msg=\"completion request\" "
        f"prompt={json.dumps(p)}",
        f'(APIServer pid=7) INFO:     10.1.2.3:40000 - "POST /v1/completions?prompt={q} HTTP/1.1" 503 Service '
        "Unavailable",
        f"2025-05-01T01:33:00.000001Z ERROR generate{{parameters=GenerateParameters {{ stop: [{json.dumps(p)}] }}}}: "
        "text_generation_router::infer: router/src/infer/mod.rs:66: Model is overloaded",
        f"(EngineCore_DP0 pid=990) ERROR 09-14 03:15:31 [core.py:710] ValueError: invalid prompt {p!r}",
        f"ERROR 09-14 03:15:31 [serving.py:1] RuntimeError: CUDA error: an illegal memory access was encountered "
        f"while handling {json.dumps({'messages': [{'role': 'user', 'content': p}]})}",
        f"10.0.0.3 - - [29/Nov/2026:09:00:01 +0000] \"POST /v1/completions?q={q} HTTP/1.1\" 429 197 \"-\" \"x\"",
    ]


def _values(node: object) -> object:
    """Only the values of a record: a prompt that happens to spell a field name is not a leak."""
    if isinstance(node, dict):
        return [_values(v) for v in node.values()]
    if isinstance(node, list | tuple):
        return [_values(v) for v in node]
    return node


def _text(records: list[Record]) -> str:
    return json.dumps([_values(as_dict(r)) for r in records], default=str, ensure_ascii=False)


PROMPT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=12, max_size=200)


@SLOW
@given(prompt=PROMPT, server=st.sampled_from(PARSERS))
def test_planted_prompt_reaches_no_record(prompt: str, server: Server) -> None:
    shapes = _shapes(prompt)
    skeleton = "\n".join(TRIGGERS + _shapes("\x00"))
    assume(prompt.strip() and prompt not in skeleton and urllib.parse.quote(prompt) not in skeleton)
    assume(json.dumps(prompt)[1:-1] not in skeleton and repr(prompt)[1:-1] not in skeleton)
    lines = [line for shape in shapes for line in (shape, TRIGGERS[len(shape) % len(TRIGGERS)])]
    records = run(make_parser(server, "t", REF_TIME), TRIGGERS + lines)
    text = _text(records)
    for form in {prompt, json.dumps(prompt)[1:-1], repr(prompt)[1:-1], urllib.parse.quote(prompt)}:
        assert form not in text


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=4000), server=st.sampled_from(PARSERS))
def test_arbitrary_bytes_never_raise(data: bytes, server: Server) -> None:
    parser = make_parser(server, "t", REF_TIME)
    text = data.decode("utf-8", errors="replace")
    run(parser, text.split("\n"))


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=200), server=st.sampled_from(PARSERS))
def test_fact_and_stats_line_shapes_with_arbitrary_values_never_raise(text: str, server: Server) -> None:
    shapes = [
        f"INFO 09-14 03:10:01 [utils.py:326] non-default args: {{'model': {text!r}, 'max_num_seqs': {text}}}",
        f"INFO 01-13 11:35:10 api_server.py:529] args: Namespace(model='{text}', block_size={text}, "
        f"kv_cache_dtype=\"{text}\")",
        f"[2026-04-05 20:00:00] server_args=ServerArgs(model_path='{text}', tp_size={text}, page_size={text})",
        f"2025-05-01T01:30:00.123456Z  INFO text_generation_launcher: Args {{ model_id: \"{text}\", "
        f"max_batch_size: Some({text}) }}",
        f"llama_context: n_ctx = {text}",
        f"(APIServer pid=1) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: {text} tokens/s",
        f"[2025-02-27 04:46:39 TP0] Decode batch. #running-req: {text}, token usage: {text}, #queue-req: {text}",
        f"NVRM: Xid (PCI:0000:3b:00): {text}, pid=1",
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {text} GiB. GPU {text} has a total capacity",
    ]
    run(make_parser(server, "t", REF_TIME), shapes)


@SLOW
@given(cut=st.integers(min_value=0, max_value=2000), server=st.sampled_from(PARSERS),
       junk=st.text(max_size=300))
def test_truncated_tracebacks_and_cut_lines_never_raise(cut: int, server: Server, junk: str) -> None:
    blob = "\n".join(TRIGGERS)
    lines = (blob[:cut] + junk).split("\n")
    records = run(make_parser(server, "t", REF_TIME), lines)
    assert all(r.source == "t" for r in records)


def test_absurd_numbers_are_counted_not_fatal() -> None:
    big = "9" * 5000
    lines = {
        Server.SGLANG: f"[2025-02-27 04:46:39 TP0] Decode batch. #running-req: {big}, #queue-req: 1",
        Server.VLLM: f"INFO 01-01 00:00:00 [x.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: "
                     f"1.0 tokens/s, Running: {big} reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%",
    }
    for server, line in lines.items():
        parser = make_parser(server, "t", REF_TIME)
        assert parser.feed(line) == [] and parser.flush() == []
        assert isinstance(parser, base.StreamParser) and parser.parse_errors == 1
    preempt = ("WARNING 08-20 10:18:39 scheduler.py:1141] Sequence group 1 is preempted by PreemptionMode.SWAP mode "
               f"because there is not enough KV cache space. total_num_cumulative_preemption={big}")
    parser = make_parser(Server.VLLM, "t", REF_TIME)
    assert parser.feed(preempt) == [] and isinstance(parser, base.StreamParser) and parser.parse_errors == 1


def test_giant_lines_are_cut_not_fatal() -> None:
    giant = "ERROR 09-14 03:15:31 [core.py:710] " + "x" * 5_000_000 + " CUDA out of memory"
    for server in PARSERS:
        parser = make_parser(server, "t", REF_TIME)
        run(parser, [giant, "(" * 1_000_000, "{" + '"a":' * 200_000])


ADVERSARIAL = [
    "(" + "a pid=1 " * 20000,                        # process-tag prefix that never closes
    "(x pid=1) " * 5000 + "INFO",                    # many tags
    "INFO 09-14 03:15:31 [" + "a:1" * 20000,         # file:line that never closes
    "'" + "\\'" * 30000,                             # escapes in a quote that never closes
    '"' * 50000,                                     # quotes only
    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 1 reqs"
    + ", KV fetch: a, b, c" * 5000,                  # optional groups repeated
    "Decode batch, " + "#running-req: 1, " * 20000,
    "NVRM: Xid (" + ":" * 50000,
    '[GIN] 2024/08/19 - 14:12:00 | 503 |' + " |" * 30000,
    '[GIN] 2024/08/19 - 14:12:00 | 200 | ' + "9h1.5" * 12000,
    '"POST / HTTP/1.1" 200 - ' + "1 " * 30000,
    "rt=" + "1" * 60000,
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=X" + ", a=1" * 30000,
    "time=" + "x" * 60000,
    "CUDA out of memory. Tried to allocate 1" + "1" * 60000,
    "Sequence group 1 is preempted by PreemptionMode.SWAP mode because there is not enough KV cache space"
    + " " * 60000,
]


def _all_patterns() -> dict[str, re.Pattern[str]]:
    """Every compiled pattern the parsers hold: module constants, class pre-filters and markers, rules."""
    found: dict[str, re.Pattern[str]] = {}
    for module in (base, families, generic, gpu, http_access, kernel, llamacpp, prefix, redact_module, sglang,
                   signature, tgi, vllm, vllm_facts):
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern):
                found[f"{module.__name__}.{name}"] = value
            elif isinstance(value, tuple):
                for i, item in enumerate(value):
                    if isinstance(item, signature.Signature):
                        found[f"{module.__name__}.{name}[{i}]"] = item.pattern
                        if item.unless is not None:
                            found[f"{module.__name__}.{name}[{i}].unless"] = item.unless
                    elif isinstance(item, re.Pattern):
                        found[f"{module.__name__}.{name}[{i}]"] = item
                    elif isinstance(item, tuple):
                        found.update({f"{module.__name__}.{name}[{i}]": x for x in item if isinstance(x, re.Pattern)})
            elif isinstance(value, dict):
                found.update({f"{module.__name__}.{name}[{k}]": v for k, v in value.items()
                              if isinstance(v, re.Pattern)})
    for cls in (*REGISTRY.values(), generic.GenericParser):
        for attr in ("HOT", "STARTING", "READY"):
            found[f"{cls.__name__}.{attr}"] = getattr(cls, attr)
    return found


def test_no_pattern_backtracks_catastrophically_on_adversarial_lines() -> None:
    """Each pattern, recompiled with `regex`, must finish every adversarial line within `regex`'s
    timeout (generous: linear patterns take microseconds; a catastrophic one takes forever)."""
    patterns = _all_patterns()
    assert len(patterns) > 60
    for name, pattern in patterns.items():
        guarded = regex.compile(pattern.pattern, pattern.flags & ~re.UNICODE)
        # redaction patterns (but the request-log test) only ever see the first MAX_INPUT_CHARS of a message
        cap = redact_module.MAX_INPUT_CHARS if name.startswith("parsers.redact._") and "REQUEST" not in name \
            else base.MAX_LINE_CHARS
        for line in ADVERSARIAL:
            try:
                guarded.search(line[:cap], timeout=5.0)
            except TimeoutError:
                raise AssertionError(f"{name} backtracks on {line[:40]!r}…") from None


def test_parsers_survive_adversarial_lines_end_to_end() -> None:
    for server in PARSERS:
        records = run(make_parser(server, "t", REF_TIME), ADVERSARIAL)
        assert all(r.source == "t" for r in records)
    for line in ADVERSARIAL:
        redact(line)


@given(st.text(max_size=3000))
def test_redact_is_bounded_and_never_raises(text: str) -> None:
    assert len(redact(text)) <= 400



SECRETS_AND_QUOTES = st.lists(st.sampled_from([*"ab '\"\\{}?=: \t\x00…", "password=", "token: ", "Bearer ",
                                                "sk-abcdefgh12", "<redacted>", "prompt: '", "ſecret=", "K",
                                                "x" * 90, "DB_PASSWORD=", "Cookie: ", "Token ", "a1b2c3d4e5",
                                                "https://u:p@", "bob@example.com", "eyJhbGciOi.eyJzdWIi.x",
                                                "ghp_" + "a1" * 12, "AKIAIOSFODNN7EXAMPLE", "-----BEGIN ",
                                                "PRIVATE KEY-----", "xoxb-12345678901", "session_id=",
                                                "max_tokens="]), max_size=300).map("".join)


def redact_every_pass(text: str) -> str:
    """`redact` as it was written before its short cuts: every pass on every text."""
    text = text[:redact_module.MAX_INPUT_CHARS].replace("\x00", " ")
    text = redact_module._secrets(text)
    text = redact_module._QUOTED.sub(lambda m: m.group(0)[0] + "\x00" + m.group(0)[0], text)
    text = redact_module._cut_at_unmatched_quote(text).replace("\x00", REDACTED)
    text = redact_module._BODY.sub("{" + REDACTED + "}", text)
    text = " ".join(redact_module._QUERY.sub("?" + REDACTED, text).split())
    return text[:redact_module.MAX_MESSAGE_CHARS - 1] + "…" if len(text) > redact_module.MAX_MESSAGE_CHARS else text


@given(st.one_of(st.text(max_size=1200), SECRETS_AND_QUOTES))
def test_redact_takes_its_short_cuts_only_where_the_passes_change_nothing(text: str) -> None:
    """The word fast path and the skipped passes (no credential word, no quote, no second pass) give what two
    passes of every step give."""
    assert redact(text) == redact_every_pass(redact_every_pass(text))


QUOTE_TEXT = st.text(alphabet=st.sampled_from(['"', "'", "\\", " ", "=", "(", "[", ":", ",", "{", "a", "`", "\x00",
                                               "\n"]), max_size=60)


@settings(max_examples=3000)
@example('"\\"" "')  # an escaped quote pairs the others differently: even, yet one is left open
@example('x "a\\" b" "c')
@given(st.one_of(QUOTE_TEXT, st.text(max_size=300), QUOTE_TEXT.map(lambda t: t + "x" * 1600 + t),
                 st.integers(1590, 1610).map(lambda n: '"' + "x" * n + '" a "b')))
def test_the_cheap_test_for_an_open_request_text_skips_nothing(text: str) -> None:
    """`opens_request_text` settles most lines with a few substring tests before the request-word search;
    its answer is the full test's on every line (a request word is added to half of them)."""
    for line in (text, "prompt: " + text):
        assert redact_module.opens_request_text(line) == (
            redact_module.is_request_log(line) and redact_module.opens_unclosed_quote(line))
