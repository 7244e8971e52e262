"""What a log line is wrapped in when a person pastes it, or a log shipper forwards it: taken off again.

Excerpts reach `scan` from issue threads and chat, where the lines are quoted (`> `, `>> `, `> - `),
bulleted, numbered by an editor's gutter (`  12 | `, `12: `), or put in table cells (`| … |`); and from log
pipelines, where each line keeps the runtime's CRI prefix (`2025-…Z stderr F `) or is a JSON object carrying
the original text (`{"log": …}` from Docker and Fluent Bit, `{"line": …}` from Loki, `{"msg": …}` from
others), a traceback inside it as one string with its newlines escaped. The engine's own prefix sits behind
the wrapper, so the anchored patterns (a stats line, Ollama's `level=… source=…`, TGI's router) miss the line
unless the wrapper comes off first.

`unpaste` is called for a line only when its first character can start a wrapper (`STARTS`), so an ordinary
line pays one set look-up. The engines' own JSON formats (vLLM's JSON formatter, TGI's `--json-output`,
llama.cpp's `--log-format json`) are left to their parsers: they name the level and the message themselves.
An error body (`{"message": …, "code": 503}`) is read whole; one that quotes a traceback gives the body,
then the traceback's lines.
"""

from __future__ import annotations

import json
import re

# the characters a wrapper can start with; digits and spaces for a gutter (`12 | `, `  12: `)
STARTS = frozenset("{>-*+|│ \t0123456789")
_MAX_UNWRAP = 4  # `> - 12 | …`: a quote, a bullet and a gutter at most, and one spare
# the wrappers in the order they nest (`> - 12 | …`): a quote (`> `, `>> `, `> > `, `>` on its own), a list
# bullet, an editor's or a pager's line numbers (`12 | `, `  12 │ `, `12: `; not a time `03:11:15`, not `2025-…`)
_WRAPPER = re.compile(
    r"(?:[ \t]{0,3}>(?:[ \t]?>){0,5}[ \t]?)?"
    r"(?:[ \t]{0,3}[-*+•] (?=\S))?"
    r"(?:[ \t]{0,8}\d{1,6}(?:[ \t]{0,2}[|│][ \t]?|: (?=\S)))?"
)
_DIGIT_GUTTER = re.compile(r"\d{1,6}(?:[ \t]{0,2}[|│]|: )")  # `12 | `, `12: ` (not `10.0.0.1`, `2025-`, `03:11`)
# an indented line that may wear a wrapper (not `  File`), or a log record indented as a whole (a markdown code
# block of four spaces): its own time, level, process tag or slog head right after the indent
_INDENTED_WRAPPER = re.compile(
    r"[ \t]{0,8}(?:(?P<record>(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) |time=\d|\[?\d{4}-\d\d-\d\d[T ]\d\d:"
    r"|\(\w+(?: rank=\d+)? pid=\d|\{\")|[>\-*+•|│\d])")
# a CRI log line copied out of /var/log/pods: its time, stream and piece flag before the text
_CRI = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)) (?:stdout|stderr) [FP] ")
_CELL = re.compile(r"\|[ \t]?(.*?)[ \t]?\|[ \t]*")
# keys whose string value is the original line, in a shipper's envelope
_TEXT_KEYS = ("log", "line", "msg", "message")
# `msg` / `message` carry a log line only in a log record: one with a time, a level or a stream beside it
_RECORD_ONLY = frozenset({"msg", "message"})
_RECORD_KEYS = frozenset({"time", "timestamp", "ts", "@timestamp", "level", "severity", "stream"})
# keys that mark an engine's own JSON format, which its parser reads (level, message, request fields), and a
# proxy's JSON access record, whose status is a field beside its message (Traefik's `DownstreamStatus`, Caddy's
# `resp_headers` beside `"msg":"handled request"`): such a record is read whole
_ENGINE_KEYS = frozenset({"levelname", "fields", "function", "tid", "target", "asctime",
                          "DownstreamStatus", "resp_headers"})


_TRACEBACK = "Traceback (most recent call last):\n"
ESCAPED_TRACEBACK = "most recent call last):\\n"  # a traceback inside a quoted string, its newlines escaped


def unpaste(text: str) -> tuple[list[str], str | None] | None:
    """The line(s) inside a paste or shipper wrapper, and the envelope's time (RFC 3339) when it has one; None
    when the line wears no wrapper. A JSON string with newlines gives its lines (a traceback in one field)."""
    first = text[:1]
    if first == "{":
        return _envelope(text)
    if first.isdigit():
        # a digit starts a CRI prefix or a line number, and far more often a time or an address: those are
        # settled by slices and one short match
        if text[10:11] == "T" and " std" in text[19:42] and (m := _CRI.match(text)) is not None:
            return [text[m.end():]], m.group(1)
        if _DIGIT_GUTTER.match(text) is None:
            return None
    elif first in " \t":
        if (m := _INDENTED_WRAPPER.match(text)) is None:
            return None  # a traceback's frame, a continuation: the commonest indented lines, settled by one match
        if m.group("record") is not None:
            return [text.lstrip(" \t")], None
    out = text
    for _ in range(_MAX_UNWRAP):
        before = out
        if end := _WRAPPER.match(out).end():  # type: ignore[union-attr]  # every part is optional
            out = out[end:]
        if out[:1] == "|" and (m := _CELL.fullmatch(out)) is not None:
            out = m.group(1).replace("\\|", "|")
        if out == before:
            break
    if out == text:
        return None
    if out[:1] == "{" and (inner := _envelope(out)) is not None:
        return inner
    return [out], None


def _envelope(text: str) -> tuple[list[str], str | None] | None:
    if not text.rstrip().endswith("}") or not (any(f'"{k}"' in text for k in _TEXT_KEYS)
                                               or "Traceback (most recent call last):\\n" in text):
        return None
    try:
        record = json.loads(text)
    except ValueError:  # not JSON after all (a brace in a message), or nested too deep
        return None
    if not isinstance(record, dict) or _ENGINE_KEYS & record.keys():
        return None
    quoted = [k for k, v in record.items() if isinstance(v, str) and _TRACEBACK in v]
    if quoted and not isinstance(record.get("log"), str):
        # an error body with a traceback in one field: the body without it (its status, its message), then
        # the traceback line by line
        traceback = record.pop(quoted[0])
        return [json.dumps(record), *traceback.rstrip("\n").split("\n")], None
    for key in _TEXT_KEYS:
        value = record.get(key)
        if key in _RECORD_ONLY and not _RECORD_KEYS & record.keys():
            continue  # `{"message": …, "code": 503}` is an error body, not a log record: read it whole
        if isinstance(value, str):
            stamp = next((v for k in ("time", "timestamp", "ts", "@timestamp")
                          if isinstance(v := record.get(k), str)), None)
            lines = value.rstrip("\n").split("\n")
            # a Node logger's error record keeps the error's cause (`Error.cause`, often the system error that
            # says what failed: `request to … failed, reason: read ETIMEDOUT`) as an object beside the message
            cause = record.get("cause")
            if isinstance(cause, dict) and isinstance(said := cause.get("message"), str):
                lines += said.rstrip("\n").split("\n")
            return lines, stamp
    return None


# ---- lines a terminal or a mail client cut at its width ------------------------------------------------
# A statement copied out of an 80- or 120-column terminal (or a mail wrapped at 80) arrives as pieces of
# exactly that width; the pieces after the first carry no prefix of their own. `StreamParser.feed` holds a
# line of such a length for one line and joins the next to it when that one cannot start a record.
WRAP_WIDTHS = (80, 120)  # a line whose length is a multiple of one is held (twice: a statement cut twice)
_RECORD_START = re.compile(
    r"\s{2}|\s*$|\d{4}[-/]\d\d[-/]\d\d|\d\d-\d\d \d\d:|\d+\.\d\d\.\d{3}\.\d{3} |\{\"|[<>|]"
    r"|\[(?: *\d|pod/|GIN\]|[A-Z]{3,8}\])|\(\w+(?: rank=\d+)? pid=\d"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE)\b|[IWED] |time="
    r"|Traceback|During handling|The above exception|Exception "
    r"|(?P<exc>(?:[a-z_]\w{0,40}\.){0,6}[A-Z]\w{0,60}(?:Error|Exception|Interrupt|Exit|Warning)\b)"
    r"|main: |[a-z][a-z0-9]*_[\w.]{1,60}: |(?:srv|slot|que|res) |[^\W\d_]{2,5}\.? +\d{1,2} \d\d:"
)


_DOTTED_TAIL = re.compile(r"\w\.\w{0,60}$")  # `aiohttp.client_exceptions.Connection|TimeoutError: …`, or cut at a dot


def continues_wrap(text: str, before: str = "") -> bool:
    """Whether the line can be the rest of `before`, a line cut at the width: it starts no record of its own
    (no time, level, logger prefix, traceback line or `name: ` head), or it starts with the rest of a dotted
    exception name that `before` ends in."""
    m = _RECORD_START.match(text)
    return m is None or (m.lastgroup == "exc" and _DOTTED_TAIL.search(before) is not None)


def escaped_lines(text: str) -> list[str] | None:
    """The lines of a traceback quoted inside one line with its newlines escaped (`\\n`), as a log message
    quotes an exception's text or an error body repeats it: the text before it, then each line, unescaped;
    None when the line holds no such traceback."""
    i = text.find(ESCAPED_TRACEBACK)
    if i < 0:
        return None
    start = text.rfind("Traceback", 0, i)
    head, quoted = text[:start], text[start:]
    lines = [part.replace('\\"', '"').replace("\\'", "'").replace("\\\\", "\\")
             for part in quoted.split("\\n")]
    return [head.rstrip(), *lines] if head.strip() else lines
