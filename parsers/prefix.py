"""What a log line is before its meaning: the prefixes around the message (syslog, Kubernetes, compose),
whether it continues an open block, whether it is a boring access line, and local time to epoch seconds.

Pure functions and patterns shared by parsers/base.py (the per-stream state machine) and the engine
modules; patterns are bounded (see parsers/base.py on backtracking).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, tzinfo

from parsers.redact import is_request_log

ANSI = re.compile(r"\x1b\[[0-9;]{0,20}[A-Za-z]")
@dataclass
class Split:
    """A line cut into its prefix parts and message. `tag` names the emitting process (traceback lines
    of different processes interleave); `key` is the whole logger prefix (same key = same record)."""

    msg: str
    ts: float | None = None
    level: str | None = None
    tag: str = ""
    key: str | None = None

    @property
    def bare(self) -> bool:
        """No prefix at all: raw stderr (a traceback line) that belongs to whichever block is open."""
        return self.key is None and not self.tag and self.level is None


# An access line is classified when its status is an error (4xx: refusals, client errors, nginx's 499 for a
# client gone; 5xx: refusals, failures, gateway timeouts); a 1xx-3xx line is the commonest boring line of a
# busy log, unless an Envoy response flag after its status says a timeout or a client gone (`" 200 SI 1024 …`;
# a client gone before any answer has status 0: `" 0 DC 1024 …`).
ERROR_STATUS_DIGITS = ("4", "5")
PROXY_FLAGS = ("UT ", "SI ", "DC ")
CLIENT_GONE = "0 DC "


def classified_status(text: str, j: int) -> bool:
    """Whether an access line, its request's closing quote at `j`, says something we classify: an error status,
    or an Envoy timeout flag after the status (uvicorn's `200 OK` has no such flag). No search, and a
    one-character slice (CPython's cached characters: no allocation) before any other, since most access lines
    are neither; base.py spells the same test inline on its hot path."""
    return text[j + 2:j + 3] in ERROR_STATUS_DIGITS or (
        text[j + 8:j + 9] == " " and text[j + 6:j + 9] in PROXY_FLAGS) or (
        text[j + 3:j + 4] == " " and text[j + 2:j + 7] == CLIENT_GONE)

MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
# journalctl writes the month as the locale abbreviates it (strftime %b): the glibc abbreviations of the
# locales GPU nodes run with, lower-cased, without a trailing dot ("déc.", "дек."), and CJK's "12月" / "12월"
_LOCAL_MONTHS = {
    "de": "jan feb mär apr mai jun jul aug sep okt nov dez",
    "fr": "janv févr mars avril mai juin juil août sept oct nov déc",
    "es": "ene feb mar abr may jun jul ago sep oct nov dic",
    "it": "gen feb mar apr mag giu lug ago set ott nov dic",
    "pt": "jan fev mar abr mai jun jul ago set out nov dez",
    "nl": "jan feb mrt apr mei jun jul aug sep okt nov dec",
    "ru": "янв фев мар апр мая июн июл авг сен окт ноя дек",
}
SYSLOG_MONTHS: dict[str, int] = {
    **{name.lower(): n for name, n in MONTHS.items()},
    **{name: n for names in _LOCAL_MONTHS.values() for n, name in enumerate(names.split(), 1)},
    **{f"{n}{suffix}": n for n in range(1, 13) for suffix in ("月", "월")},
}
# syslog / `journalctl -o short`: "Dec 11 09:58:58 host unit[pid]: " (+ the kernel's "[ 1234.5] "), any locale
SYSLOG = re.compile(
    r"(?:[^\W\d_]{2,5}\.?|\d{1,2}[月월]) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.\d{1,9})? \S{1,100} [^\s:]{1,100}: "
    r"(?:\[ *\d+\.\d+\] )?"
)  # `journalctl -o short-precise` adds microseconds to the second


# the first characters a syslog line can start with besides an English month's (`Dez`, `déc.`, `дек`);
# CJK months are told by their second or third character (`1月`, `12月`)
MONTH_STARTS = frozenset(c for name in SYSLOG_MONTHS for c in (name[0], name[0].upper()) if not name[0].isdigit())
CJK_MONTH = ("月", "월")


def syslog_month(text: str) -> int | None:
    """The month a syslog/journald line starts with ("Dec", "Dez", "déc.", "12月"), or None: one `find` and
    one look-up, as cheap as the English-only test it replaced on lines that are not syslog."""
    i = text.find(" ", 2, 7)
    return None if i < 0 else SYSLOG_MONTHS.get(text[:i].rstrip(".").lower())
# `kubectl logs --prefix` / `docker logs --timestamps`: "[pod/name/container] 2025-09-14T03:11:15.5Z "
_UNIT = r"[\w.-]{1,100} [\w./-]{1,100}\[\d{1,10}\]: "  # journald's and rsyslog's `host unit[pid]: `
OUTER = re.compile(
    r"(?:\[pod/[^\]\s]{1,250}\] )?(?:(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d)) "
    # rsyslog's RFC 3339 file format (`RSYSLOG_FileFormat`) and `journalctl -o short-iso[-precise]` (`+0000`,
    # no colon): the host and the `unit[pid]: ` tag after the time
    rf"(?:{_UNIT})?"
    # `journalctl -o short-unix`: seconds since the epoch; `-o short-monotonic`: seconds since boot (no time)
    rf"|(\d{{9,10}}\.\d{{1,9}}) {_UNIT}|\[ {{0,12}}\d{{1,12}}\.\d{{1,9}}\] {_UNIT})?"
)
# `docker compose logs`: "vllm-1  | " (service name, padding, bar) before whatever the container wrote
COMPOSE = re.compile(r"[\w.-]{1,64} +\| ")
RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?")
CONTINUATION = re.compile(
    r"\s|Traceback \(most recent call last\)|The above exception|During handling of the above|\^+$|$"
    r"|[\w.]{1,120}(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b|File \""
    r"|CUDA kernel errors might|For debugging consider|Compile with `TORCH_USE_CUDA_DSA`"
    r"|Exception raised from |frame #\d|\[rank\d+\]:|terminate called|what\(\):|Process \w+[-:]|\.\.\.$"
)
OPENS_BLOCK = re.compile(
    r"Traceback \(most recent call last\)|hit an exception|encountered a fatal error|failed to start"
    r"|output_handler failed|background task failed|encountered an error|:$"
)


def last_segment(text: str) -> str:
    """What a terminal shows of a line with carriage returns (a progress bar redrawn in place, CRLF): the
    last non-empty segment."""
    for part in reversed(text.split("\r")):
        if part.strip():
            return part
    return ""


def quoted_or_request(head: str, msg: str) -> bool:
    """True when a stats-looking message cannot be one: a request log, or the fields sit inside quotes
    (an exception or a prompt quoting a stats line). `head` is what precedes the first field."""
    return '"' in head or "'" in head or is_request_log(msg)


def boring_access(text: str) -> bool:
    """An access line (uvicorn, nginx) whose status is not an error: the commonest boring line in a busy log,
    settled by one `find`."""
    i = text.find(" HTTP/1.")
    if i < 0:
        return False
    j = text.find('" ', i)
    return j >= 0 and not classified_status(text, j)


def source_last(lines: Iterable[str], deferred: list[str]) -> Iterator[str]:
    """The lines of an occurrence, with traceback *source* lines (`raise ValueError("No available memory …"`)
    moved after the rest: they quote the message the exception line states, so the exception line (or the
    logger's own line) should name the event, and supply its numbers, when there is one."""
    for msg in lines:
        head = msg.lstrip()[:6]
        if head.startswith(("raise ", '"', "f\"", "f'")):
            deferred.append(msg)
        else:
            yield msg
    yield from deferred


def local_at(year: int, month: int, day: int, hour: int, minute: int, second: int, tz: tzinfo) -> float | None:
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=tz).timestamp()
    except ValueError:
        return None


def earliest(locations: Iterable[tuple[str | None, int | None]]) -> dict[str, int]:
    """The smallest offset per path among (path, offset) pairs; unknown locations are skipped."""
    out: dict[str, int] = {}
    for path, offset in locations:
        if path is not None and offset is not None and offset < out.get(path, offset + 1):
            out[path] = offset
    return out
