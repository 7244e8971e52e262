"""The one place that decides what of a log line may be kept in a record.

Engines log user data: vLLM prints every prompt and its sampling parameters at INFO
(`Received request … prompt: '…', params: SamplingParams(…)`) unless `--disable-log-requests`;
SGLang prints whole request objects with `--log-requests`; llama.cpp's verbose mode prints request and
response bodies; access lines carry query strings; exceptions quote their arguments. Records go to
SQLite, Prometheus and reports that more people can read than the inference logs, so the rule is
strict: request-log lines produce no record at all, and what is kept of any other line has every
quoted string, bracketed body, query string, credential and client address replaced before it leaves
the parser.

Patterns here are linear (no nested quantifiers) so a hostile line cannot make them backtrack.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace

from agent.records import CapacityFact, Event, FieldValue, Record, event_with

MAX_MESSAGE_CHARS = 400
MAX_INPUT_CHARS = MAX_MESSAGE_CHARS * 4  # redaction works on this much of a message, never more
REDACTED = "<redacted>"

# Lines that exist to log a request's content: dropped whole, before classification, so a prompt that
# happens to say "CUDA out of memory" cannot become an event either.
_REQUEST_MARKERS = (
    "Received request ", "Added request ", "Generated response ", "prompt: ", "prompt_token_ids",
    "output_token_ids", "SamplingParams", "Receive: obj=",
    "Finish: obj=", "ReqInput(", "CompletionRequest(", "log_server_r: request:  {", "request: {\"",
    "response: {\"", "request:  {\"", "response:  {\"", '"prompt":', '"messages":', '"inputs":', 'prompt="',
    'msg="completion request"', 'msg="chat request"',
)

# Credentials, in the shapes detect-secrets' plugins know (a library the parsers may not import: they use the
# standard library only), each replaced whole. Every pattern is linear: bounded or possessive-free runs that
# cannot overlap, so a hostile line cannot make one backtrack.
# The minimum lengths are below the real ones (a field a parser cut may hold the start of a key only).
# Each shape comes with the literal it starts with: a pattern runs only on a text that holds its literal (a
# substring test), which keeps the cost of a message without credentials near that of the literal tests.
_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((literal, re.compile(pattern)) for literal, pattern in (
    ("-----BEGIN", r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----.*"),  # PEM: the rest of the line is the key
    ("eyJ", r"\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*"),  # a JWT (its header is base64 `{"`)
    ("gh", r"\bgh[pousr]_[A-Za-z0-9]{8,}"), ("github_pat_", r"\bgithub_pat_[A-Za-z0-9_]{8,}"),
    ("glpat-", r"\bglpat-[A-Za-z0-9_-]{8,}"), ("xox", r"\bxox[abposr]-[A-Za-z0-9-]{6,}"),
    ("A", r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{8,16}\b"), ("AIza", r"\bAIza[A-Za-z0-9_-]{8,}"),
    ("k_", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{8,}"), ("npm_", r"\bnpm_[A-Za-z0-9]{8,}"),
    ("sk-", r"\bsk-[A-Za-z0-9_-]{8,}"), ("hf_", r"\bhf_[A-Za-z0-9]{8,}"),
))
# The same with a word kept before the credential (the literal is looked for in the lower-cased text): a
# Cookie header (every value in it), an Authorization scheme (Bearer and Basic always; Token and Digest
# when what follows has a digit, so prose stays).
_HEADED: tuple[tuple[str, re.Pattern[str]], ...] = tuple((literal, re.compile(pattern)) for literal, pattern in (
    ("cookie", r"(?i)(\b(?:set-)?cookie[ \t]*:[ \t]*)[^\r\n]*"),
    ("bearer", r"(?i)(\bbearer[ \t]+)[A-Za-z0-9._~+/=-]+"), ("basic", r"(?i)(\bbasic[ \t]+)[A-Za-z0-9._~+/=-]+"),
    ("token", r"(?i)(\btoken[ \t]+)(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,}"),
    ("digest", r"(?i)(\bdigest[ \t]+)(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,}"),
))
# user:password@ (or a token alone before @) in a URL of any scheme, and e-mail addresses
_URL_USER = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,15}://)[^\s/@\"'<>]{1,256}@")
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*")  # user@host too
# NAME=value, NAME: value, "NAME": "value", NAME='value' — the value replaced when the name says it is a
# credential (`_secret_name`); an `Authorization: Token …` keeps its scheme word out of the value.
# The match is the name alone (the rest is looked ahead at), so a name that is not a credential's consumes
# nothing after it: in `failed: api_key=…` and `https://…/token=…` the later name is still seen.
_ASSIGN = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]{0,63})(?=([\"']?[ \t]*[:=][ \t]*[\"']?)"
                     r"((?i:bearer|basic|token|digest)[ \t]+)?([^\s,;'\"}&)\]<>]+))")
_NAME_WORDS = ("passw", "passphrase", "pwd", "secret", "token", "credential", "cookie", "auth", "jwt", "session",
               "signature")
_NAME_NOT = ("tokens", "token_ids", "tokenizer", "max_token", "num_token")
# Quoted strings (with escapes), bodies in braces, and URL query strings. Each alternative consumes
# characters it alone can consume, so matching is linear in the line length.
QUOTED_MAX = 1600  # the longest quoted string emptied (a longer one is cut where it opens)
_QUOTED = re.compile(r"(?<![\w`])'(?:[^'\\\n]|\\.){0,1600}'|\"(?:[^\"\\\n]|\\.){0,1600}\"")
# opens_request_text counts on the bound being QUOTED_MAX (tests/unit/test_record_layouts.py checks it).
_BODY = re.compile(r"\{[^{}]{0,1600}\}")
_QUERY = re.compile(r"\?[^\s\"]+")
# A client's address where an access line starts with it (uvicorn's `10.1.2.3:40000 - "POST …"`, nginx's
# `10.1.2.3 - - […]`): who called is not the agent's to keep. Server addresses elsewhere in a message
# (an NCCL peer, a proxy's upstream) stay: they say where the fault is.
_CLIENT = re.compile(r"(?:(?<=\s)|^)(?:\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]{2,39}\])(?::\d{1,5})? - ")
CLIENT = "<client>"
# An opening quote left unmatched (its string ran past the cut): everything after it is dropped.
_OPEN_QUOTE = re.compile(r"(?:^|(?<=[\s=(\[:,{]))['\"]")
_HOLE = "\x00"
# Every credential `_SECRET` finds contains one of these, in any case: an ASCII line without any of them is
# passed over without the scan (a case-insensitive pattern tried at every position; non-ASCII text always
# takes the scan, since case folding there reaches beyond `str.lower`).
_SECRET_WORDS = ("key", "token", "pass", "secret", "auth", "@", "bearer", "basic", "sk-", "hf", "pwd", "cookie",
                 "session", "credential", "eyj", "gh", "glpat", "xox", "akia", "asia", "a3t", "abia", "acca",
                 "aiza", "k_", "npm_", "-----", "jwt", "sig", "digest")
# A word such as a method, a route or a model name: nothing in it that `redact` would change, when it has
# no credential word either (so most field values skip the passes).
_PLAIN_WORD = re.compile(r"[\w./:-]{1,120}")


# Every marker contains one of these words: a few `in` tests (each a fast substring search) settle most lines
# before any scan, which tries every marker at every position (~4× dearer on an access line).
REQUEST_WORDS = ("request", "Request", "prompt", "response", "_token_ids", "SamplingParams", "obj=", "ReqInput(",
                  '"messages":', '"inputs":')
# (tests/unit/test_record_layouts.py checks that every marker holds one of them.)
# Each word with the markers that contain it, as one alternation of literals (a leading \b would make it ~20×
# slower): a line with "Requests" in it ("429 Too Many Requests") is searched for "CompletionRequest(" alone.
# One exception to plain literals: "failed to parse response: {…}" reports an error (the body is the server's
# error, such as TGI's "Model is overloaded"), it does not log a request's content.
_MARKERS_OF_WORD = tuple(
    (word, re.compile("|".join(("(?<!parse )" if m.startswith("response:") else "") + re.escape(m)
                               for m in _REQUEST_MARKERS if word in m)))
    for word in REQUEST_WORDS)


def is_request_log(text: str) -> bool:
    """True for lines whose purpose is to log a request's content; they must produce no record."""
    for word, markers in _MARKERS_OF_WORD:  # noqa: SIM110 - a loop beats any() on this path
        if word in text and markers.search(text) is not None:
            return True
    return False


# SGLang's request log (`--log-requests`, managers/tokenizer_manager.py: `Finish: obj=…, out=…`) ends with the
# request's meta_info, whose finish reason an abort fills with the scheduler's own words and the status the client
# got (FINISH_ABORT.to_json: `{'type': 'abort', 'message': 'Request running timeout reached.', 'status_code': 503,
# …}`). That message is the engine's, never the request's content.
_ABORTED = re.compile(r"'finish_reason': \{'type': 'abort', 'message': '(?P<msg>[^'\\\n]{1,300})'")


def request_outcome(text: str) -> str | None:
    """The engine's words on how a logged request ended (SGLang's abort message), which its signatures may read
    though the line logs a request's content: nothing else of the line is read."""
    if "'abort'" not in text:
        return None
    m = _ABORTED.search(text)
    return None if m is None else m.group("msg")


def redact(text: str) -> str:
    """What may be kept of a message: credentials, quoted strings, bodies and query strings removed.

    Two passes, as the parsers' events always had (the second catches what the first exposes: a credential
    word left before an inserted `<redacted>`, a string the length cut left open); the second runs only
    where it can change something — a credential word, non-ASCII text or a cut — which
    tests/unit/test_properties.py holds to two full passes. The answer depends on the text alone: the last
    `REDACT_CACHE` are kept, since a storm repeats one message (a refusal's access line) thousands of times
    and its redaction was a third of that line's cost."""
    hit = _REDACTED.get(text)
    if hit is not None:
        return hit
    if _PLAIN_WORD.fullmatch(text) is not None and not _may_hold_secret(text):
        out = text  # nothing any pass would change
    else:
        out = _redact_once(text)
        if len(out) == MAX_MESSAGE_CHARS or _may_hold_secret(out):
            out = _redact_once(out)
    if len(text) <= MAX_INPUT_CHARS:
        if len(_REDACTED) >= REDACT_CACHE:
            _REDACTED.clear()
        _REDACTED[text] = out
    return out


REDACT_CACHE = 1024  # texts of at most MAX_INPUT_CHARS whose redaction is kept (under ~1.6 M characters)
_REDACTED: dict[str, str] = {}


def _empty(m: re.Match[str]) -> str:
    return m.group(0)[0] + _HOLE + m.group(0)[0]


def _redact_once(text: str) -> str:
    # NUL is the marker of an emptied string below: one in the input must not pass for one.
    text = text[:MAX_INPUT_CHARS].replace(_HOLE, " ")
    if _may_hold_secret(text):
        text = _secrets(text)
    if "'" in text or '"' in text:
        text = _QUOTED.sub(_empty, text)
        text = _cut_at_unmatched_quote(text)
        text = text.replace(_HOLE, REDACTED)
    text = _BODY.sub("{" + REDACTED + "}", text)
    text = _QUERY.sub("?" + REDACTED, text)
    if " - " in text:
        text = _CLIENT.sub(CLIENT + " - ", text, count=1)
    text = " ".join(text.split())
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


def _may_hold_secret(text: str) -> bool:
    if not text.isascii():
        return True
    return any(map(text.lower().__contains__, _SECRET_WORDS))


def _secret_name(name: str) -> bool:
    """Whether NAME in `NAME=value` names a credential: DB_PASSWORD, OPENAI_API_KEY, client_secret,
    aws_secret_access_key, token, passwd, Authorization, X-Api-Key, session_id … but not max_tokens."""
    n = name.lower().replace("-", "_")
    if any(w in n for w in _NAME_NOT) and not any(w in n for w in ("passw", "secret", "authoriz")):
        return False
    if "author" in n and "authoriz" not in n:
        n = n.replace("author", "")
    return n.endswith("key") or any(w in n for w in _NAME_WORDS)


def _assignments(text: str) -> str:
    """Every `NAME=value` whose name is a credential's with its value replaced (`_ASSIGN`)."""
    out: list[str] = []
    done = 0
    for m in _ASSIGN.finditer(text):
        if m.start() < done:
            continue  # inside a value already replaced
        name, sep, scheme, value = m.group(1), m.group(2), m.group(3) or "", m.group(4)
        if not _secret_name(name) or (not scheme and value.lower() in ("token", "bearer", "basic", "digest")):
            continue
        if "session" in name.lower() and value.isdigit():  # `sessions=3`: a count, not a session id
            continue
        out.append(text[done:m.start()] + name + sep + scheme + REDACTED)
        done = m.end() + len(sep) + len(scheme) + len(value)
    return "".join(out) + text[done:] if out else text


def _headed(m: re.Match[str]) -> str:
    return m.group(1) + REDACTED


def _secrets(text: str) -> str:
    """Every credential in `text` replaced: the shapes, URL user info, e-mail addresses, named values."""
    for literal, pattern in _SHAPES:
        if literal in text:
            text = pattern.sub(REDACTED, text)
    lower = text.lower()
    for literal, pattern in _HEADED:
        if literal in lower:
            text = pattern.sub(_headed, text)
    if "@" in text:
        text = _URL_USER.sub(r"\1" + REDACTED + "@", text)
        text = _EMAIL.sub(REDACTED, text)
    return _assignments(text)


def _cut_at_unmatched_quote(text: str) -> str:
    """Cut before the first opening quote that is not one of the already-emptied strings."""
    i = 0
    while True:
        m = _OPEN_QUOTE.search(text, i)
        if m is None:
            return text
        start = m.start()
        if text.startswith(_HOLE, start + 1):
            i = start + 3
            continue
        return text[:start] + REDACTED


def route(path: str) -> str:
    """An HTTP request path fit for a record and a label: the query string dropped, length bounded, and a
    segment that is a credential replaced — one a credential name announces (`/token/…`, `/api_key/…`), or
    one that looks random (`_random_segment`: a reset link's key, a signed URL's signature)."""
    segments = path.split("?", 1)[0][:120].split("/")
    for i, segment in enumerate(segments):
        if segment and (_random_segment(segment) or (i and _secret_name(segments[i - 1].split("=")[0]))):
            segments[i] = REDACTED
    return "/".join(segments)


_SEGMENT = re.compile(r"[A-Za-z0-9_~+=-]{16,}")


def _random_segment(segment: str) -> bool:
    """A segment of 16 or more letters and digits with the entropy of a key, as detect-secrets judges a
    string: hex above 3 bits a character, any other alphabet above 4 (or 3.5 for one shorter than 24)."""
    if _SEGMENT.fullmatch(segment) is None or not any(c.isdigit() for c in segment):
        return False
    counts = [segment.count(c) for c in set(segment)]
    n = len(segment)
    entropy = -sum(k / n * math.log2(k / n) for k in counts)
    if all(c in "0123456789abcdefABCDEF" for c in segment):
        return entropy > 3.0
    return entropy > (4.0 if n >= 24 else 3.5)


def opens_request_text(text: str) -> bool:
    """A request log whose quoted text (a prompt with newlines) runs on past this line.

    A few substring tests come first, and settle an access line (`"POST /v1/… HTTP/1.1" 200`) without the
    request-word search: with no single quote, backslash or newline, an even number of double quotes and no
    room for a string longer than `_QUOTED` empties, every double quote is one end of a string it empties,
    so no quote is left open (tests/unit/test_properties.py)."""
    if not ("'" in text or "\\" in text or "\n" in text or len(text) > QUOTED_MAX or text.count('"') % 2 == 1):
        return False
    return is_request_log(text) and opens_unclosed_quote(text)


def opens_unclosed_quote(text: str) -> bool:
    """Whether a quoted string opened on this line runs on past its end (a prompt logged over lines)."""
    emptied = _QUOTED.sub(_empty, text.replace(_HOLE, " "))
    return _cut_at_unmatched_quote(emptied) != emptied


def redact_fields(fields: Mapping[str, FieldValue]) -> dict[str, FieldValue]:
    """Every text value of a record's fields through `redact` (numbers and flags pass as they are)."""
    return {key: redact(value) if isinstance(value, str) else value for key, value in fields.items()}


def scrub(record: Record) -> Record:
    """The choke point every record a parser returns passes: an event's message and every text field,
    a capacity fact's text value. (Load samples carry numbers only.)"""
    if isinstance(record, Event):
        return event_with(record, message=redact(record.message), fields=redact_fields(record.fields))
    if isinstance(record, CapacityFact) and isinstance(record.value, str):
        return replace(record, value=redact(record.value))
    return record
