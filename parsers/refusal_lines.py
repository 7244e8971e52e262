"""A storm's access line read once: the error-status access line of uvicorn (vLLM, SGLang) kept by its text
without the client, replayed on the parser's state for every line that repeats it.

In a 503/429 storm every line is the same access line but for the client's port
(`(APIServer pid=3646) INFO:     10.0.0.9:40312 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable`).
Its reading — the prefix split, the pre-filters, the signature matches with the fields they read, the
redaction of the message and of those fields — depends on the text alone, and not on the client: the client
is redacted out of the message (`<client> - `, parsers/redact.py) and no signature reads it
(tests/unit/test_refusal_lines.py holds every parser's signatures to that, ports such as `:503` included). What
depends on the parser's state — the line counted, the time taken from the line before, a death seen (a 500 is
then `engine_dead`), the phase, the de-duplication window, the pairing with a refusal message — is applied on
every line by the same code `_feed` uses (`StreamParser._settle`, `OneRefusal.once`), so a line read through
here gives what the plain path gives, record for record and state for state (the same test, shortcut on and
off).

Only lines whose reading leaves no other mark are kept: no time of their own (the time is the line before's or
the envelope's), no block opened, no capacity fact, no duration, no phase change, no request text, no stats
word, nothing a parser's own `events_for` adds to; any other line (and every line while a block or a
request's text is open) takes the plain path.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from agent.records import Event, FieldValue
from parsers.signature import Signature

ACCESS_MARK = ' - "'  # uvicorn's `CLIENT - "METHOD PATH HTTP/1.1" STATUS`: the client ends where this starts
MAX_CHARS = 2000  # a longer line takes the plain path (far below every cut: MAX_LINE_CHARS, redaction's input)
MEMO_SIZE = 256  # lines kept per parser class (each under MAX_CHARS: under ~0.5 M characters)
# The client as `_CLIENT` in parsers/redact.py replaces it whole: an IPv4 address with an optional port. (An
# IPv6 client's hex digits can spell a credential's literal, `acca`, and take the plain path.)
IPV4_CLIENT = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?")
# another client, of another length than any with a port (the second for a line whose client is the first): the
# reading must not tell it from the line's own
PROBE, PROBE_2 = "0.0.0.0", "0.0.0.1"


class Reading(NamedTuple):
    """What an access line's text says, without its client: each signature it matches with the fields it read (as
    read, for the state rules), and the event it stands for with the message and those fields redacted (its time,
    place, severity and phase are the line's and the state's, set on every line)."""

    head: int  # the length of the text before the client (a key is the text without it: this splits it again)
    matched: tuple[tuple[Signature, dict[str, FieldValue], Event], ...]


def key_of(text: str) -> tuple[str, int] | None:
    """The memo key of a line that may be an access line with an IPv4 client (the text without the client, and
    where the client was), or None when it cannot be one."""
    i = text.find(ACCESS_MARK)
    if i <= 0 or len(text) > MAX_CHARS:
        return None
    k = text.rfind(" ", 0, i) + 1
    if k == 0 or IPV4_CLIENT.fullmatch(text, k, i) is None:
        return None  # no head before the client (a bare line may be a paste's: parsers/paste.py), or no IPv4
    return text[:k] + text[i:], k
