"""Lines as people paste them and shippers forward them: the wrapper comes off, the engine's line is read.

tests/unit/test_catalogue.py renders every catalogued statement inside each wrapper (bench/catalogue.py
`pasted`); here are the wrappers themselves, the multi-line cases (a quoted traceback, a traceback inside
one JSON string), and the lines that look like a wrapper but are not one."""

from __future__ import annotations

import json

import pytest

from agent.records import Event, Server
from parsers import make_parser
from parsers.paste import unpaste

LINE = "INFO 09-14 03:11:15 [core.py:340] hello"


@pytest.mark.parametrize(("wrapped", "inner", "stamp"), [
    (f"> {LINE}", LINE, None),
    (f">> {LINE}", LINE, None),
    (f"> > {LINE}", LINE, None),
    (f"> - {LINE}", LINE, None),
    (f"- {LINE}", LINE, None),
    (f"* {LINE}", LINE, None),
    (f"  12 | {LINE}", LINE, None),
    (f"12: {LINE}", LINE, None),
    (f" 7 │ {LINE}", LINE, None),
    (f"| {LINE} |", LINE, None),
    ("| a \\| b |", "a | b", None),
    (">", "", None),
    (">     File \"x.py\", line 3, in f", "    File \"x.py\", line 3, in f", None),  # indentation kept
    (f"2025-12-14T03:11:15.123456789Z stderr F {LINE}", LINE, "2025-12-14T03:11:15.123456789Z"),
    (json.dumps({"log": LINE + "\n", "stream": "stderr", "time": "2025-12-14T03:11:15Z"}), LINE,
     "2025-12-14T03:11:15Z"),
    (json.dumps({"line": LINE, "timestamp": "2025-12-14T03:11:15Z"}), LINE, "2025-12-14T03:11:15Z"),
    (json.dumps({"level": "info", "msg": LINE}), LINE, None),
    ("> " + json.dumps({"log": LINE}), LINE, None),
    (f"    {LINE}", LINE, None),  # a markdown code block of four spaces: a record, indented whole
    ("    time=2025-12-14T03:11:15.123Z level=INFO msg=x", "time=2025-12-14T03:11:15.123Z level=INFO msg=x", None),
    ("    (EngineCore_DP0 pid=1094) ERROR x", "(EngineCore_DP0 pid=1094) ERROR x", None),
])
def test_the_wrapper_comes_off(wrapped: str, inner: str, stamp: str | None) -> None:
    assert unpaste(wrapped) == ([inner], stamp)


@pytest.mark.parametrize("line", [
    LINE,
    "2025-12-14T03:11:15.123Z  INFO text_generation_router: Connected",  # TGI's own time, no CRI stream
    "10.0.0.1 - - [14/Dec/2025:03:11:15 +0000] \"POST /v1/chat HTTP/1.1\" 503 0",  # nginx: an address
    "12月 14 03:11:15 gpu7 vllm[1]: INFO started",  # journald in Chinese: a month, not a gutter
    "0.00.123.456 I srv  update_slots: all slots are idle",  # llama.cpp's time since start
    "  File \"/x/vllm/v1/engine/core.py\", line 701, in run_engine_core",  # a traceback line
    "    engine_core.run_busy_loop()",  # its source line
    "    INFORMATION = 1",  # source that starts like a level
    '{"error": {"message": "Model is overloaded", "code": 503}}',  # an error body is read whole
    '{"message": "The engine is currently busy", "code": 503}',
    '{"levelname": "ERROR", "message": "EngineCore encountered a fatal error."}',  # vLLM's own JSON
    '{"timestamp":"2025-12-14T03:11:15Z","level":"ERROR","fields":{"message":"Shard 0 crashed"}}',  # TGI's
    # a proxy's JSON access record: its status is a field beside the message (Traefik's, Caddy's)
    '{"DownstreamStatus":429,"OriginStatus":0,"RequestPath":"/v1/chat/completions","level":"info","msg":""}',
    '{"level":"info","ts":1765681875.1,"msg":"handled request","duration":0.01,"size":17,"status":429,'
    '"resp_headers":{}}',
    "{not json at all}",
    "-1 requests",
])
def test_a_line_without_a_wrapper_is_left_alone(line: str) -> None:
    assert unpaste(line) is None


TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 701, in run_engine_core',
    "    engine_core.run_busy_loop()",
    '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 728, in run_busy_loop',
    "    self._process_engine_step()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.20 GiB is free.",
]


def _kinds(lines: list[str]) -> list[str]:
    parser = make_parser(Server.AUTO)
    records = [r for line in lines for r in parser.feed(line)] + parser.flush()
    return sorted(r.kind.value for r in records if isinstance(r, Event))


@pytest.mark.parametrize("lines", [
    TRACEBACK,
    ["> " + line for line in TRACEBACK],
    [">" + line if line.startswith(" ") else "> " + line for line in TRACEBACK],  # `>` hard against the text
    [f"{n:4d} | {line}" for n, line in enumerate(TRACEBACK, 40)],
    [json.dumps({"log": "\n".join(TRACEBACK) + "\n", "stream": "stderr", "time": "2025-12-14T03:11:15Z"})],
    [json.dumps({"detail": "\n".join(TRACEBACK), "code": 500})],  # an error body quoting the traceback
    ["ERROR 09-14 03:11:15 [serving_chat.py:1011] Error in chat completion stream generator: "
     + json.dumps("\n".join(TRACEBACK))],  # a log message quoting it, newlines escaped
], ids=["plain", "quoted", "quoted-tight", "gutter", "docker-one-string", "error-body", "escaped-in-message"])
def test_a_wrapped_traceback_out_of_the_engine_core_is_its_death_by_oom(lines: list[str]) -> None:
    """run_engine_core's handler reports the engine dead and re-raises: an OOM that killed the engine core."""
    assert _kinds(lines) == ["engine_dead", "oom"]


@pytest.mark.parametrize("line", [
    "> Try lowering `gpu_memory_utilization` if you see CUDA out of memory errors",
    "- set `--max-num-seqs 64` so the KV cache is not full",
    "| `--timeout` | 600 | how long a request may take |",
    json.dumps({"level": "info", "msg": "Retrying request to /chat/completions in 0.4 seconds"}),
    "  12 | max_model_len: 8192",
])
def test_wrapped_prose_and_settings_stay_silent(line: str) -> None:
    assert _kinds([line]) == []


# ---- lines cut at a terminal's width ---------------------------------------------------------------------
NO_CACHE = ("ERROR 09-14 03:11:15 worker.py:100] ValueError: No available memory for the cache blocks. Try "
            "increasing `gpu_memory_utilization` when initializing the engine.")


def _cut(line: str, width: int) -> list[str]:
    return [line[i:i + width] for i in range(0, len(line), width)]


@pytest.mark.parametrize("width", [80, 120])
def test_a_statement_cut_at_the_width_is_read_whole(width: int) -> None:
    pieces = _cut(NO_CACHE, width)
    assert len(pieces) == 2 and len(pieces[0]) == width
    parser = make_parser(Server.VLLM)
    records = [r for piece in pieces for r in parser.feed(piece)] + parser.flush()
    events = [r for r in records if isinstance(r, Event)]
    assert [(e.kind.value, e.phase.value) for e in events] == [("oom", "startup")]


def test_a_statement_cut_right_after_a_dot_of_its_exception_name_is_read_whole() -> None:
    """The cut falls between `java.io.` and `InterruptedIOException`: the second piece looks like a record of
    its own (an exception name) but is the rest of the dotted name, so it keeps the first piece's time."""
    line = ("2025-06-17 05:21:48.123 ERROR 1 --- [nio-8080-exec-1] c.e.ChatService : "
            "java.io.InterruptedIOException: timeout")
    pieces = _cut(line, 80)
    assert pieces[0].endswith("java.io.") and pieces[1].startswith("InterruptedIOException")
    parser = make_parser(Server.AUTO)
    records = [r for piece in pieces for r in parser.feed(piece)] + parser.flush()
    events = [r for r in records if isinstance(r, Event)]
    assert [e.kind.value for e in events] == ["deadline_exceeded"]
    assert events[0].ts is not None and "ChatService" in events[0].message


def test_a_line_as_long_as_the_width_is_not_joined_to_the_next_record() -> None:
    first = "INFO 09-14 03:11:15 api_server.py:100] " + "x" * 41  # 80 characters, a whole line
    second = "ERROR 09-14 03:11:16 engine.py:10] Engine background task failed"
    assert len(first) == 80
    parser = make_parser(Server.VLLM)
    records = parser.feed(first) + parser.feed(second) + parser.flush()
    events = [r for r in records if isinstance(r, Event)]
    assert [e.kind.value for e in events] == ["engine_dead"]
    assert events[0].message.startswith("Engine background task failed")


def test_a_held_line_is_given_at_the_end_and_keeps_its_cursor() -> None:
    line = "ERROR 09-14 03:11:15 [core_busyloop.py:66] EngineCore encountered a fatal error."
    assert len(line) == 80
    parser = make_parser(Server.VLLM)
    assert parser.feed(line, None, "a.log", 4096) == []
    assert parser.held_offsets() == {"a.log": 4096}  # a cursor saved now must not pass the held line
    events = [r for r in parser.flush() if isinstance(r, Event)]
    assert [e.kind.value for e in events] == ["engine_dead"]
    assert parser.held_offsets() == {}


def test_a_prompt_quoting_a_traceback_is_never_read_as_one() -> None:
    prompt = "\\n".join(TRACEBACK)  # the user pasted a traceback into the prompt: vLLM logs it escaped
    line = (f"INFO 09-14 03:11:15 [logger.py:39] Received request chatcmpl-8e2a: prompt: 'Why this? {prompt}', "
            "params: SamplingParams(n=1, temperature=0.7, max_tokens=512), prompt_token_ids: None")
    assert _kinds([line]) == []


CHAIN = [
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3/site-packages/torch/cuda/memory.py", line 10, in f',
    "    x = torch.empty(10)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.20 GiB is free.",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3/site-packages/vllm/engine/async_llm_engine.py", line 52, in _log_task_completion',
    "    return_value = task.result()",
    "vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished unexpectedly. This should never happen!",
]


@pytest.mark.parametrize("lines", [CHAIN, ["> " + line for line in CHAIN]], ids=["plain", "quoted"])
def test_an_exception_chain_gives_each_exception(lines: list[str]) -> None:
    assert _kinds(lines) == ["engine_dead", "oom"]


def test_a_chain_of_harmless_exceptions_is_silent() -> None:
    chain = ["Traceback (most recent call last):", '  File "x.py", line 3, in f', "    import flash_attn",
             "ModuleNotFoundError: No module named 'flash_attn'", "",
             "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):", '  File "x.py", line 5, in f',
             "ImportError: flash attention is not installed, falling back"]
    assert _kinds(chain) == []


def test_a_held_line_inside_a_held_wrapper_is_not_lost() -> None:
    inner = "ERROR 09-14 03:11:15 [core_busyloop.py:66] EngineCore encountered a fatal error."
    line = "2025-12-14T03:11:15.123456789Z stderr F " + inner
    assert (len(inner), len(line)) == (80, 120)  # both as long as a terminal: each is held in turn
    parser = make_parser(Server.VLLM)
    assert parser.feed(line) == []
    events = [r for r in parser.flush() if isinstance(r, Event)]
    assert [e.kind.value for e in events] == ["engine_dead"]
