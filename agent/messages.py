"""Messages folded for grouping: the same error with another number, id or address is the same error.

"Top error messages" would otherwise list 46 identical refusals as 46 rows that differ only in a
request id or a port. The folded form is only a grouping key; what a reader sees is a real message of
the group (its most frequent), with the group's count. Pure and linear: no nested quantifiers.
"""

from __future__ import annotations

import re

_FOLDS = (
    # addresses first (their digits are not numbers of the message): IPv4 with a port, bracketed IPv6
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b|\[[0-9a-fA-F:]{2,39}\](?::\d{1,5})?"), "<addr>"),
    # ids: UUIDs, long hex runs with a digit (container ids, hashes, pointers), engines' request ids
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<id>"),
    (re.compile(r"\b(?:0x)?(?=[0-9a-fA-F]{0,63}\d)[0-9a-fA-F]{8,64}\b"), "<id>"),
    (re.compile(r"\b((?:chat)?cmpl|req|request|seq|batch)[-_][A-Za-z0-9]{1,64}\b"), r"\1-<id>"),
    # every other number (sizes, counts, times), but not an access line's status (`"…" 503`): a 500 and a
    # 404 are different failures
    (re.compile(r"(?<![\w.])(?<!\" )\d+(?:[.,]\d+)*"), "<n>"),
)


def fold(message: str) -> str:
    """The message with addresses, ids and numbers replaced by placeholders (`<addr>`, `<id>`, `<n>`)."""
    for pattern, placeholder in _FOLDS:
        message = pattern.sub(placeholder, message)
    return message
