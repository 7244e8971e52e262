"""Required literals of a regular expression: strings at least one of which every match contains.

A rule's pattern is only searched when the line contains one of its needles — a few `in` tests
instead of a regex scan of the whole line for each of thirty-odd rules. The needles are derived from
the parsed pattern (the codesearch idea, on literals rather than trigrams), so they cannot drift from
the patterns; a pattern the derivation does not understand gets None and is always searched, which
is slower but never wrong. tests/unit/test_needles.py checks the guarantee on every fixture line.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from parsers import derived

try:  # Python 3.11+ keeps the regex parser here; 3.10 only has the (later deprecated) top-level modules
    _sre_parse: Any = importlib.import_module("re._parser")
    _c: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python 3.10
    _sre_parse = importlib.import_module("sre_parse")
    _c = importlib.import_module("sre_constants")

MIN_NEEDLE = 3  # shorter literals are in too many lines to be worth the test
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}

Needles = frozenset[str]


def required_literals(pattern: str | re.Pattern[str]) -> tuple[str, ...] | None:
    """Strings at least one of which every match of `pattern` contains; None when none can be told.

    A pattern's text is parsed without compiling it, so a signature's literals cost no compile (it is compiled
    when a line first holds them); a text that does not parse raises `re.error`, as compiling it would. What was
    derived once is read from the parsers' disk copy (parsers.derived) by later processes."""
    text, flags = (pattern, 0) if isinstance(pattern, str) else (pattern.pattern, pattern.flags)
    key = f"{flags}:{text}"
    held = derived.table("needles").get(key, False)
    if held is None or (isinstance(held, list) and held and all(isinstance(n, str) for n in held)):
        return None if held is None else tuple(held)
    parsed = _sre_parse.parse(text, flags)
    if parsed.state.flags & re.IGNORECASE:  # the pattern's flags, inline ones (`(?i)`) included
        return derived.keep("needles", key, None)
    found = _sequence(list(parsed))
    return derived.keep("needles", key, tuple(sorted(found)) if found else None)


def _score(needles: Needles) -> tuple[int, int]:
    """Prefer the set whose shortest needle is longest, then the set with fewer needles."""
    return (min(len(n) for n in needles), -len(needles))


def _sequence(items: list[tuple[Any, Any]]) -> Needles | None:
    candidates: list[Needles] = []
    run = ""
    for op, av in items:
        if op is _c.LITERAL:
            run += chr(av)
            continue
        if run:
            candidates.append(frozenset({run}))
            run = ""
        inner = _element(op, av)
        if inner:
            candidates.append(inner)
    if run:
        candidates.append(frozenset({run}))
    useful = [c for c in candidates if min(len(n) for n in c) >= MIN_NEEDLE]
    return max(useful, key=_score) if useful else None


def _element(op: Any, av: Any) -> Needles | None:
    if op is _c.SUBPATTERN:
        add_flags = av[1] if len(av) > 1 else 0
        if add_flags & re.IGNORECASE:
            return None
        return _sequence(list(av[-1]))
    if op is _c.BRANCH:
        branches = [_sequence(list(b)) for b in av[1]]
        if all(branches):
            return frozenset().union(*branches)  # type: ignore[arg-type]
        return None
    if op in _REPEATS and av[0] >= 1:
        return _sequence(list(av[2]))
    return None
