"""Nothing a user typed reaches a record: every field of every record passes parsers/redact.py.

Regression cases found by a black-box review (a CUDA error's `fields.error` kept a bearer token and a
quoted prompt; a raw NUL after an opening quote passed for the redactor's own marker; a prompt logged
over several lines became an event), and a property test over every event kind's real line."""

from __future__ import annotations

import json
from dataclasses import asdict, is_dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.records import CapacityFact, Event, EventKind, Record, Server
from parsers import make_parser
from parsers.redact import redact

from . import secret_shapes
from .conftest import REF_TIME, run
from .test_kinds import CASES


def _text(records: list[Record]) -> str:
    return json.dumps([asdict(r) if is_dataclass(r) else list(r) for r in records], default=str)  # type: ignore[arg-type]


def test_a_cuda_errors_fields_are_redacted() -> None:
    line = ("(EngineCore_DP0 pid=9) ERROR 11-29 09:00:01 [core.py:710] RuntimeError: CUDA error: invalid argument "
            "Bearer zqtokenzqtoken 'zqsecret prompt'")
    records = run(make_parser(Server.VLLM, "t", REF_TIME), [line])
    events = [r for r in records if isinstance(r, Event)]
    assert [e.kind for e in events] == [EventKind.CUDA_ERROR]
    text = _text(records)
    assert "zqtoken" not in text and "zqsecret" not in text


def test_a_raw_nul_after_an_opening_quote_is_no_marker() -> None:
    assert "zqsecret" not in redact("failed with value '\x00zqsecret prompt that runs on")
    assert "zqsecret" not in redact('x "\x00\x00zqsecret')


def test_a_prompt_logged_over_several_lines_is_no_event() -> None:
    lines = ["(APIServer pid=7) INFO 11-29 09:00:01 [logger.py:43] Received request cmpl-1: prompt: 'tell me",
             "RuntimeError: CUDA out of memory. zqsecret",
             "Traceback (most recent call last):",
             "more of the prompt', params: SamplingParams(n=1), prompt_token_ids: None",
             "(APIServer pid=7) ERROR 11-29 09:00:02 [core.py:1] RuntimeError: CUDA error: an illegal memory access"]
    records = run(make_parser(Server.VLLM, "t", REF_TIME), lines)
    kinds = [r.kind for r in records if isinstance(r, Event)]
    assert kinds == [EventKind.CUDA_ERROR], "the prompt's lines made no event; the next real line did"
    assert "zqsecret" not in _text(records)


SECRET = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz"), min_size=6, max_size=20).map(lambda s: "zq" + s)
SHAPES = ("{line} '{s} and more'", '{line} "{s}', "{line} '\x00{s}", "{line} Bearer {s}", "{line} api_key={s}",
          "{line} {{\"prompt\": \"{s}\"}}", "{line} ?q={s}", "{line} token: '{s}'", "{line} (\x00'{s} x')")


@settings(max_examples=300)
@given(case=st.sampled_from(CASES), shape=st.sampled_from(SHAPES), secret=SECRET)
def test_no_planted_secret_reaches_any_field_of_any_event_kind(case: tuple[Server, str, EventKind, object],
                                                             shape: str, secret: str) -> None:
    server, line, _, _ = case
    planted = shape.format(line=line, s=secret)
    records = run(make_parser(server, "t", REF_TIME), [planted])
    assert secret not in _text(records)


# A prompt with raw newlines whose lines read like incidents; none of it may become an event or be kept.
PROMPT_BODY = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB zqprompt",
               "RuntimeError: CUDA error: an illegal memory access was encountered zqprompt",
               "Xid 79: GPU has fallen off the bus zqprompt",
               "EngineDeadError: the engine died zqprompt",
               "Traceback (most recent call last):"]
OPENERS = {  # what each engine writes when it logs a request (the first line of the prompt)
    Server.VLLM: "(APIServer pid=7) INFO 11-29 09:00:03 [logger.py:43] Received request cmpl-9: prompt: 'zqprompt",
    Server.SGLANG: "[2026-04-05 20:02:59] Receive: obj=GenerateReqInput(text='zqprompt",
}
CLOSERS = {Server.VLLM: "end zqprompt', params: SamplingParams(n=1), prompt_token_ids: None",
           Server.SGLANG: "end zqprompt', sampling_params={'max_new_tokens': 128})"}
BEFORE = {  # what the engine logged just before: an ERROR leaves a block open; a traceback is one
    Server.VLLM: {"nothing": [], "error": ["(APIServer pid=7) ERROR 11-29 09:00:02 [serving.py:1] request failed"],
                  "traceback": ["(APIServer pid=7) ERROR 11-29 09:00:02 [serving.py:1] Error in handler",
                                "Traceback (most recent call last):", '  File "x.py", line 1, in <module>']},
    Server.SGLANG: {"nothing": [], "error": ["[2026-04-05 20:02:58] ERROR: request failed"],
                    "traceback": ["[2026-04-05 20:02:58] ERROR: Error in handler",
                                  "Traceback (most recent call last):", '  File "x.py", line 1, in <module>']},
}


def _three_ways(server: Server, lines: list[str]) -> list[list[Record]]:
    """The records of `lines` through feed (one line at a time), and feed_batch as `scan` (lines numbered) and the
    daemon (not numbered) call it."""
    one = run(make_parser(server, "t", REF_TIME), lines)
    raws = [(line + "\n").encode() for line in lines]
    offsets = [sum(len(r) for r in raws[:i]) for i in range(len(raws))]
    scan = make_parser(server, "t", REF_TIME)
    batch = scan.feed_batch(lines, offsets, "test.log", 1) + scan.flush()
    daemon = make_parser(server, "t", REF_TIME)
    texts = daemon.feed_batch(lines, offsets, "test.log") + daemon.flush()
    return [one, batch, texts]


@pytest.mark.parametrize("server", sorted(OPENERS, key=str))
@pytest.mark.parametrize("before", ["nothing", "error", "traceback"])
def test_a_multiline_prompt_is_never_an_event_after_any_line(server: Server, before: str) -> None:
    lines = [*BEFORE[server][before], OPENERS[server], *PROMPT_BODY, CLOSERS[server]]
    for records in _three_ways(server, lines):
        kinds = {r.kind for r in records if isinstance(r, Event)}
        assert not kinds & {EventKind.OOM, EventKind.XID, EventKind.GPU_LOST, EventKind.ENGINE_DEAD,
                            EventKind.CUDA_ERROR}, kinds
        assert "zqprompt" not in _text(records)


@settings(max_examples=600)
@given(case=st.sampled_from(CASES), shape=st.sampled_from(sorted(secret_shapes.SHAPES)),
       form=st.sampled_from(sorted(secret_shapes.FORMS)))
def test_no_credential_shape_in_any_form_reaches_a_record_of_any_kind(case: tuple[Server, str, EventKind, object],
                                                                     shape: str, form: str) -> None:
    server, line, _, _ = case
    records = run(make_parser(server, "t", REF_TIME), [f"{line} {secret_shapes.planted(shape, form)}"])
    assert not secret_shapes.leaks(_text(records)), _text(records)


@pytest.mark.parametrize("shape", sorted(secret_shapes.SHAPES))
@pytest.mark.parametrize("form", sorted(secret_shapes.FORMS))
def test_every_credential_shape_is_redacted_in_every_form(shape: str, form: str) -> None:
    assert not secret_shapes.leaks(redact(f"request failed: {secret_shapes.planted(shape, form)} (retrying)"))


@pytest.mark.parametrize("shape", sorted(secret_shapes.PATH_SAFE))
def test_a_credential_in_a_url_path_is_not_kept_in_the_route(shape: str) -> None:
    line = (f'INFO:     127.0.0.1:5 - "POST /v1/{secret_shapes.SHAPES[shape]}/completions HTTP/1.1" 429 Too Many '
            "Requests")
    [event] = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME), [line]) if isinstance(r, Event)]
    assert event.kind is EventKind.HTTP_429
    assert not secret_shapes.leaks(_text([event])), event.fields


@pytest.mark.parametrize("path", ["/reset/8f14e45fceea167a5a36dedd4bea2543", "/hooks/T0/B0/XyZ1234567890abcdefGHIJ",
                                  "/api/token/abcdef", "/v1/files/key/Zk3Jq9"])
def test_a_random_or_announced_path_segment_is_dropped_from_the_route(path: str) -> None:
    line = f'INFO:     127.0.0.1:5 - "POST {path} HTTP/1.1" 503 Service Unavailable'
    [event] = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME), [line]) if isinstance(r, Event)]
    assert event.fields["route"] == path.rsplit("/", 1)[0] + "/<redacted>"


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/models/Qwen2.5-7B-Instruct",
                                  "/v1/models/meta-llama/Llama-3.1-8B-Instruct", "/generate_stream", "/health"])
def test_ordinary_routes_are_kept(path: str) -> None:
    line = f'INFO:     127.0.0.1:5 - "POST {path} HTTP/1.1" 503 Service Unavailable'
    [event] = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME), [line]) if isinstance(r, Event)]
    assert event.fields["route"] == path


def test_the_model_fact_loses_url_credentials() -> None:
    line = ("(APIServer pid=1) INFO 11-29 09:00:00 [api_server.py:1] █  model   "
            "https://admin:zq7pw@models.internal/qwen2.5-7b")
    facts = [r for r in run(make_parser(Server.VLLM, "t", REF_TIME), [line]) if isinstance(r, CapacityFact)]
    assert [f.name for f in facts] == ["model"]
    assert not secret_shapes.leaks(_text(facts)) and "models.internal/qwen2.5-7b" in str(facts[0].value)
