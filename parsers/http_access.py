"""HTTP status lines → `http_429` / `http_503` / `request_failed`: uvicorn (vLLM, SGLang), nginx-style, Ollama's
GIN, llama.cpp.

Only the status, method and route (query string dropped) are kept. Any other error status is a
`request_failed`: a 500 (after an engine death the parser marks it `reason: engine_dead`), a 400 or a 404 — each
line one request, so the counts match the engine's `http_requests_total{status="4xx"|"5xx"}`. 408 and 499 are
left to the timeout signatures (a request timed out or its client gave up). uvicorn logs when the response
*starts*, so a stream that fails later shows 200; 429/503 here are refusals before any token — the
the budget method's "rejection at admission". A 504 from a proxy is a `deadline_exceeded` (TIMEOUT_SIGNATURES).
Formats: uvicorn's, nginx's and Go's access logs (parsers/catalogue/nginx.yaml, go-net-http.yaml); GIN: `[GIN]
2024/12/11 - 09:58:58 | 503 |  1.2ms |  10.0.0.1 | POST     "/api/chat"`.
"""

from __future__ import annotations

import re

from agent.records import EventKind, FieldValue, Phase, Record, RequestSample, Server, Severity
from parsers.redact import route
from parsers.signature import ADVICE, Signature, signature

_STATUS = r"(?P<status>429|503)"


def _fields(m: re.Match[str]) -> dict[str, FieldValue]:
    return {"status": int(m.group("status")), "method": m.group("method"), "route": route(m.group("path"))}


_PATTERNS = (
    # uvicorn and nginx/combined: "METHOD /path HTTP/1.1" STATUS
    r"\"(?P<method>[A-Z]{3,7}) (?P<path>\S{1,2000}) HTTP/[\d.]{1,3}\" " + _STATUS + r"\b",
    # Ollama / gin
    r"\[GIN\] [\d/]{10} - [\d:]{8} \| " + _STATUS
    + r" \|[^|]{0,40}\|[^|]{0,80}\| (?P<method>[A-Z]{3,7}) +\"(?P<path>[^\"]{0,2000})\"",
    # llama.cpp server, late 2024 on: "request: POST /v1/completions 10.0.0.1 503"
    r"log_server_r: (?:done )?request: (?P<method>[A-Z]{3,7}) (?P<path>\S{1,2000}) \S{1,200} " + _STATUS + r"\b",
    # llama.cpp server, mid-2024 text form: "request | … status=503 method=\"POST\" path=\"/completion\""
    r"\brequest \|[^|]{0,400}\bstatus=" + _STATUS
    + r" method=\"(?P<method>[A-Z]{3,7})\" path=\"(?P<path>[^\"]{0,2000})\"",
)


# Every error status that is neither a refusal (429, 503) nor a timeout (408, 499, 504)
_FAILED = r"(?P<status>4(?!08|29|99)\d\d|5(?!03|04)\d\d)"
_REASONS = {400: "bad_request", 404: "not_found", 413: "bad_request", 422: "bad_request"}


def failure_reason(status: int) -> str:
    """What an error status says of the request: the client's mistake or the server's failure."""
    return _REASONS.get(status, "server_error" if status >= 500 else "client_error")


def _failed(m: re.Match[str]) -> dict[str, FieldValue]:
    status = int(m.group("status"))
    return {**_fields(m), "reason": failure_reason(status)}


def _failed_severity(fields: dict[str, FieldValue]) -> Severity:
    status = fields.get("status")
    return Severity.ERROR if isinstance(status, int) and status >= 500 else Severity.INFO


def _request_scope(m: re.Match[str]) -> dict[str, FieldValue]:
    # a 504 is a gateway's answer (no engine sends one): the proxy gave up, on what the line does not say; a 408
    # says the answering server gave up on the request, whichever one wrote the line
    fields = _fields(m)
    by: dict[str, FieldValue] = {"timeout_by": "proxy"} if fields["status"] == 504 else {}
    return {**fields, "scope": "request", **by, "timeout_on": "unknown"}


def _signatures(kind: EventKind, status: str, phase: Phase) -> tuple[Signature, ...]:
    extract = _request_scope if kind is EventKind.DEADLINE_EXCEEDED else _fields
    return tuple(signature(kind, p.replace(_STATUS, f"(?P<status>{status})"), Severity.WARNING, phase, extract)
                 for p in _PATTERNS)


def _body_503(m: re.Match[str]) -> dict[str, FieldValue]:
    reason = m.group("reason")
    return {"status": 503, **({"reason": reason.lower().replace(" ", "_")} if reason else {})}


# Ollama's 500 at a client's or proxy's usual deadline: the handler logs 500 when its request's context is
# cancelled, and GIN prints a latency over a minute truncated to the second (gin's logger.go), so a deadline of N
# minutes reads `Nm0s`, or `Nm1s` with the handler's own second, or `4m59s` when it fired just before (an hour
# is `1h0m0s`). The minutes are the usual clients' and proxies' deadlines (60 s; 2, 3, 5, 10, 15, 20, 30 and 60
# minutes): a failure of another cause seldom ends on one of them to the second.
_GIN_DEADLINE = (r"\| 500 \| +(?:1h0m[01]|(?:1|2|3|5|10|15|20|30)m[01]|(?:1|2|4|9|14|19|29|59)m59)(?:\.\d{1,9})?s \|")


FAILED_SIGNATURES: tuple[Signature, ...] = tuple(
    signature(EventKind.REQUEST_FAILED, p.replace(_STATUS, _FAILED), Severity.ERROR, Phase.RUNTIME, _failed,
              severity_of=_failed_severity,
              # Ollama's 500 at a round 5 or 30 minutes is a deadline (TIMEOUT_SIGNATURES), not a failure
              unless=_GIN_DEADLINE)
    for p in _PATTERNS)


HTTP_SIGNATURES: tuple[Signature, ...] = (
    _signatures(EventKind.HTTP_429, "429", Phase.ADMISSION) + _signatures(EventKind.HTTP_503, "503", Phase.ADMISSION)
    # the family under the access-line forms: a 503 as a client or a proxy in front reports it (`error 503 from …`,
    # `Error: 503 …`; llama.cpp and
    # its forks answer `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`); an
    # agent's JSON record may name the field `error_code` or `status_code` (`"error_code":429`)
    + (signature(EventKind.HTTP_503, r"[\"'](?:error_|status_)?code\\?[\"']: ?503\b"
                 r"(?:[^\n]{0,40}?[\"']message[\"']: ?[\"']"
                 r"(?P<reason>Loading model|[Ss]erver (?:is )?busy|Service Unavailable))?"
                 r"|\b(?:HTTP(?: code)?|Error code:|[Ss]tatus [Cc]ode:?|[Ee]rror:?) 503\b"
                 r"|\b503 \(?Service (?:Temporarily )?Unavailable\b",
                 Severity.WARNING, Phase.ADMISSION, _body_503, unless=ADVICE),
       # and a 429: Python requests' `429 Client Error: Too Many Requests for url: …`, SDK and proxy wordings
       # (VS Code's `Server error: 429 too many requests`), a client's `… failed with status: 429`
       signature(EventKind.HTTP_429, r"\b429 (?:Client Error: |\()?(?i:too many requests)\b"
                 r"|\b(?:HTTP(?: code)?|Error code:|[Ss]tatus [Cc]ode:?|failed with status:?|[Ee]rror:?) 429\b"
                 r"|[\"'](?:error_|status_)?code\\?[\"']: ?429\b",
                 Severity.WARNING, Phase.ADMISSION, lambda m: {"status": 429}, unless=ADVICE))
    + FAILED_SIGNATURES
)


def _tokens(m: re.Match[str]) -> dict[str, FieldValue]:
    tokens = int(m.group("tokens"))
    return {"scope": "request", "timeout_on": "generation", "tokens": tokens, "tokens_produced": tokens}


_DEADLINE = (r"(?:(?i:deadline exceeded)|DEADLINE_EXCEEDED|DeadlineExceeded)"
             r"[^\n]{0,200}?\b(?:generated_tokens|completion_tokens|output_tokens|n_decoded|tokens_generated)"
             r"[=: ]{1,3}")
# a model that timed out loading is a start-up failure, not a request deadline
_LOADING = r"waiting for (?:llama runner|server) to start|load(?:ing)? model"

# A request that ran out of time, in the words gRPC, Go contexts and HTTP clients use. The phase follows what
# the line tells: `generation` when it counts tokens produced (more than none), else `runtime`; who gave up
# and on what (`timeout_by`, `timeout_on`) where the line says it. Client and proxy wordings that say more
# (nginx's stage, Envoy's flags and duration, Go's "awaiting headers" / "reading body", LiteLLM's seconds) are
# catalogued (parsers/catalogue/*.yaml) and come before these in every parser.
TIMEOUT_SIGNATURES: tuple[Signature, ...] = (
    # a gateway's 504, and a 408: the server or the gateway in front gave up on the request (nginx's
    # client_header/body timeouts, Envoy's stream idle timeout, LiteLLM's answer for its upstream's timeout)
    *_signatures(EventKind.DEADLINE_EXCEEDED, "504|408", Phase.RUNTIME),
    signature(EventKind.DEADLINE_EXCEEDED, _DEADLINE + r"(?P<tokens>[1-9]\d{0,9})", Severity.WARNING,
              Phase.GENERATION, _tokens, unless=_LOADING),
    signature(EventKind.DEADLINE_EXCEEDED, r"(?:(?i:deadline exceeded)|DEADLINE_EXCEEDED|DeadlineExceeded)",
              Severity.WARNING, Phase.RUNTIME,
              lambda m: {"scope": "request", "timeout_on": "unknown"}, unless=_LOADING),
    # a proxy's 504 as its client tells it (a browser's console puts the status text in parentheses), and
    # Ollama's own 500 at a client's usual deadline (`_GIN_DEADLINE`)
    signature(EventKind.DEADLINE_EXCEEDED, r"\b504 \(?Gateway Time-?out\b"
              r"|\b(?:HTTP code|Error code:|[Ss]tatus [Cc]ode:?) 504\b"
              # a client that prints the status and the proxy's error page after it (Squid's, nginx's)
              r"|: 504 <(?:!DOCTYPE|html)\b",
              Severity.WARNING, Phase.RUNTIME,
              lambda m: {"scope": "request", "timeout_by": "proxy", "timeout_on": "unknown"}),
    # a 408 as a client tells it (the OpenAI SDKs retry it; LiteLLM answers it for an upstream that timed out)
    signature(EventKind.DEADLINE_EXCEEDED, r"\b408 \(?Request Time-?out\b"
              r"|\b(?:HTTP code|Error code:|[Ss]tatus [Cc]ode:?) 408\b",
              Severity.WARNING, Phase.RUNTIME, lambda m: {"scope": "request", "timeout_on": "unknown"}),
    signature(EventKind.DEADLINE_EXCEEDED, r"\[GIN\] [\d/]{10} - [\d:]{8} " + _GIN_DEADLINE,
              Severity.WARNING, Phase.RUNTIME, lambda m: {"scope": "request", "timeout_on": "unknown"}),
)
HOT_WORDS = ("429", "503", "504", "408", "eadline", "DEADLINE", "upstream timed out", "| 500 |",
             # any other error status on an access line (uvicorn/nginx `HTTP/1.1" 404`, GIN `| 404 |`, llama.cpp)
             '" 4', '" 5', "[GIN]", "log_server_r", "request |")


# --- how long a request took -------------------------------------------------------------------------------
# The durations an access line or an engine's per-request line prints, for the requests that finished
# (`RequestSample`): nginx's `$request_time` / `$upstream_response_time` in a `log_format` (`rt=` and `urt=`
# in the common timed formats; upstream lists like `0.120, 0.300` give their first), Envoy's default format
# (`"…" 200 - 154 0 226 100 "…"`: flags, bytes in, bytes out, duration ms, upstream ms), Ollama's GIN line
# (`| 200 |  1.2345s |`, a Go duration), TGI's per-request span (`total_time="2.93s"`) and llama.cpp's
# `print_timings` (`total time = 2345.67 ms / 140 tokens`). uvicorn's access line (vLLM, SGLang) prints no
# duration, nor does either engine log one per request by default: their durations come from the scrape.
_SECONDS = r"(?P<s>\d{1,7}(?:\.\d{1,9})?)"
_GO = r"(?P<go>(?:\d{1,5}h)?(?:\d{1,5}m(?!s))?(?:\d{1,9}(?:\.\d{1,9})?(?:s|ms|µs|us|ns))?)"
_TIMED = (
    re.compile(r"\b(?:rt|request_time)=\"?" + _SECONDS + r"\b"),
    re.compile(r"\b(?:urt|upstream_response_time)=\"?" + _SECONDS + r"\b"),
    re.compile(r"HTTP/[\d.]{1,3}\" (?P<status>\d{3}) (?:[A-Z]{1,4}(?:,[A-Z]{1,4}){0,12}|-) \d{1,15} \d{1,15} "
               r"(?P<ms>\d{1,9}) (?:\d{1,9}|-) \""),
    re.compile(r"\[GIN\] [\d/]{10} - [\d:]{8} \| (?P<status>\d{3}) \| +" + _GO + r" \|"),
    re.compile(r"\btotal_time=\"" + _GO + "\""),
    re.compile(r"^\s{0,40}total time = +(?P<ms>\d{1,9}(?:\.\d{1,6})?) ms / +\d{1,9} tokens"),
)
_STATUS_AT = re.compile(r"HTTP/[\d.]{1,3}\" (?P<status>\d{3})\b")
_GO_PART = re.compile(r"(\d{1,9}(?:\.\d{1,9})?)(h|ms|µs|us|ns|m|s)")
_GO_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
_REFUSED = (429, 503)


TIMED_WORDS = ("rt=", "_time=", "[GIN]", "total time =")  # a timed format's words (Envoy's has none: its shape)


def carries_duration(text: str) -> bool:
    """Whether a line may print a request's duration: a cheap test, run on every access line, before
    `request_duration`. One of the timed formats' words (`rt=`, `urt=`, `…_time=`, GIN's, llama.cpp's), or an
    access line whose status is followed by Envoy's flags and a byte count."""
    # TIMED_WORDS spelled out: a generator over the tuple costs five times these `in`s on every access line
    if "rt=" in text or "_time=" in text or "[GIN]" in text or "total time =" in text:
        return True
    i = text.find(" HTTP/")
    if i < 0 or (j := text.find('" ', i)) < 0 or (k := text.find(" ", j + 6)) < 0 or not text[k + 1:k + 2].isdigit():
        return False  # uvicorn's `" 200 OK` ends there; nginx's `" 200 512 "-"` has no flags column
    return _TIMED[2].match(text, i + 1) is not None


def _go_seconds(text: str) -> float | None:
    parts = _GO_PART.findall(text)
    return sum(float(n) * _GO_UNIT[u] for n, u in parts) if parts else None


def request_duration(text: str) -> tuple[float, int | None] | None:
    """(seconds, status) of the request a line reports as finished, None when it prints no duration — or
    when it is a refusal (429, 503: turned away before any work, not a request that ran; the refusal rules
    count those). A request's own time (`rt=`) wins over the upstream's (`urt=`) on one line."""
    for pattern in _TIMED:
        m = pattern.search(text)
        if m is None:
            continue
        groups = m.groupdict()
        if groups.get("s") is not None:
            seconds: float | None = float(groups["s"])
        elif groups.get("ms") is not None:
            seconds = float(groups["ms"]) / 1000.0
        else:
            seconds = _go_seconds(groups.get("go") or "")
        if seconds is None:
            continue
        status_text = groups.get("status")
        if status_text is None and (sm := _STATUS_AT.search(text)) is not None:
            status_text = sm.group("status")
        status = int(status_text) if status_text else None
        return None if status in _REFUSED else (seconds, status)
    return None


def timed(msg: str, ts: float | None, source: str, server: Server, path: str | None,
          offset: int | None) -> list[Record]:
    """The `RequestSample` of a line that prints a finished request's duration; none for any other line."""
    found = request_duration(msg)
    return [] if found is None else [RequestSample(ts, source, server, found[0], found[1], path, offset)]
