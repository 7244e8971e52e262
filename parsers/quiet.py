"""Which lines a parser passes over unseen: the literals of its pre-filter, for the compiled lane.

A parser looks at a line only when it holds its stats word or a literal of its `HOT` pre-filter
(`StreamParser._hot`). `HOT` is a trie-shaped pattern of plain literals (parsers/signature.py's `hot`), so
the set of strings it matches is finite: `quiet_literals` spells it out, and a line holding none of them
(nor the stats words) cannot pass the pre-filter. parsers/_lane.c searches those literals in a line's bytes
before any Python string is made. A pattern that is not a finite set of literals gives None: the lane
then counts no line as quiet, which is slower and never wrong.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from parsers.base import StreamParser
from parsers.http_access import TIMED_WORDS
from parsers.paste import ESCAPED_TRACEBACK
from parsers.redact import QUOTED_MAX, REQUEST_WORDS
from parsers.signature import Prefilter

MAX_QUIET = QUOTED_MAX  # a longer line may open a request's text whatever it holds (`opens_request_text`)
# Every request log holds one of these (`is_request_log`): a line with a quote, a backslash or over MAX_QUIET
# is quiet only without them.
REQUEST_GUARDS = tuple(word.encode("utf-8") for word in REQUEST_WORDS)

try:  # Python 3.11+ keeps the regex parser here; 3.10 only has the top-level modules
    _sre_parse: Any = importlib.import_module("re._parser")
    _c: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python 3.10
    _sre_parse = importlib.import_module("sre_parse")
    _c = importlib.import_module("sre_constants")

MAX_LITERALS = 4096  # a pattern that matches more strings than this is not treated as literals
NEVER = "(?!)"  # the pre-filter of a parser that has none: it matches nothing


def finite_language(pattern: re.Pattern[str]) -> frozenset[str] | None:
    """Every string `pattern` matches, when that is a small finite set of literals (alternations, groups,
    classes of literals, `?`); None for anything else (a class, a repeat, a flag, an assertion)."""
    if pattern.pattern == NEVER:
        return frozenset()
    if pattern.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    try:
        parsed = _sre_parse.parse(pattern.pattern, pattern.flags)
    except Exception:  # pragma: no cover - it compiled, so this is a parser-version surprise
        return None
    return _sequence(list(parsed))


def _sequence(items: list[tuple[Any, Any]]) -> frozenset[str] | None:
    words: frozenset[str] = frozenset({""})
    for op, av in items:
        part = _element(op, av)
        if part is None:
            return None
        words = frozenset(a + b for a in words for b in part)
        if len(words) > MAX_LITERALS:
            return None
    return words


def _element(op: Any, av: Any) -> frozenset[str] | None:
    if op is _c.LITERAL:
        return frozenset({chr(av)})
    if op is _c.IN and all(item_op is _c.LITERAL for item_op, _ in av):  # `[45]`, as `4|5` is compiled
        return frozenset(chr(code) for _, code in av)
    if op is _c.SUBPATTERN:
        if len(av) > 1 and (av[1] or av[2]):  # flags added or removed inside the group
            return None
        return _sequence(list(av[-1]))
    if op is _c.BRANCH:
        found: set[str] = set()
        for branch in av[1]:
            words = _sequence(list(branch))
            if words is None:
                return None
            found |= words
        return frozenset(found)
    if op is _c.MAX_REPEAT and av[0] == 0 and av[1] == 1:  # `x?`
        inner = _sequence(list(av[2]))
        return None if inner is None else inner | {""}
    return None


_KNOWN: dict[type[StreamParser], tuple[bytes, ...] | None] = {}


def quiet_literals(parser: type[StreamParser]) -> tuple[bytes, ...] | None:
    """The literals (UTF-8) one of which every line `parser` looks at holds: its stats words and the
    strings its `HOT` pre-filter matches (and an escaped traceback's head, and the timed formats' words); None
    when `HOT` is not a finite set of literals. Envoy's timed access line has no such word: parsers/_lane.c
    tells its shape (a status, then a column, then a number) itself."""
    if parser not in _KNOWN:
        hot = parser.HOT.literals if isinstance(parser.HOT, Prefilter) else finite_language(parser.HOT)
        # and a traceback quoted with its newlines escaped, which `feed` reads as its lines (parsers/paste.py), and
        # the words of a line that prints a request's duration, which `feed` reads even off the pre-filter
        words = None if hot is None else {*hot, parser.STATS_WORD, parser.STATS_WORD2, ESCAPED_TRACEBACK,
                                          *TIMED_WORDS}
        _KNOWN[parser] = None if words is None else tuple(sorted(word.encode("utf-8") for word in words))
    return _KNOWN[parser]
