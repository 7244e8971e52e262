"""What a line must look like to mean an event: `Signature` (a compiled pattern, the event kind, how loud,
which phase, how to read its numbers) and the helpers the engine modules build them with.

Each signature carries the literals every match must contain (derived from the pattern by
parsers/needles.py), so a line without them is passed over before the regular expression runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.records import EventKind, FieldValue, Phase, Severity
from parsers.needles import required_literals

_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4,
          "KB": 1024, "MB": 1024**2, "GB": 1024**3}

Extract = Callable[["re.Match[str]"], dict[str, FieldValue]]


def size_bytes(number: str, unit: str) -> int:
    """`1.50` + `GiB` → bytes. PyTorch, vLLM and SGLang print binary units (SGLang's "GB" is 2**30)."""
    return round(float(number.replace(",", "")) * _UNITS.get(unit, 1))


@dataclass(frozen=True)
class Signature:
    """A line pattern that means one event kind; `phase` None means "ask the parser's state"."""

    kind: EventKind
    pattern: re.Pattern[str]
    severity: Severity
    phase: Phase | None = None
    extract: Extract | None = None
    incident: bool = False  # one occurrence may be reported many times (ranks, re-raise): de-duplicate
    severity_of: Callable[[dict[str, FieldValue]], Severity] | None = None  # when the numbers decide
    unless: re.Pattern[str] | None = None  # the same words in a line that means something else
    needles: tuple[str, ...] | None = None  # every match contains one of these (None: always search)

    def could_match(self, text: str) -> bool:
        """False when the line lacks every required literal, so the regex need not run."""
        if self.needles is None:
            return True
        for needle in self.needles:  # noqa: SIM110 - a loop beats any() on this path
            if needle in text:
                return True
        return False


def json_object(text: str) -> dict[str, Any] | None:
    """The object of a JSON-formatted log line (TGI `--json-output`, vLLM's JSON formatter, llama.cpp
    `--log-format json`), or None when the line is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def hot(*literals: str) -> re.Pattern[str]:
    """The pre-filter: a line must contain one of the literals to be looked at.

    The literals are folded into a trie-shaped pattern (`C(?:UDA|UBLAS|…)`) rather than a flat
    alternation: `re` tries every branch at every position, and sixty flat branches cost twice as much
    as the trie on a boring line. A literal that extends a shorter one is dropped (the shorter suffices).
    """
    trie: dict[str, Any] = {}
    for literal in literals:
        node = trie
        for ch in literal:
            node = node.setdefault(ch, {})
        node[""] = {}
    return re.compile(_trie_pattern(trie) if trie else "(?!)")


def _trie_pattern(node: dict[str, Any]) -> str:
    if "" in node:
        return ""  # a literal ends here: the prefix matched so far is enough
    branches = [re.escape(ch) + _trie_pattern(child) for ch, child in sorted(node.items())]
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


def signature(kind: EventKind, pattern: str, severity: Severity, phase: Phase | None = None,
              extract: Extract | None = None, incident: bool = False,
              severity_of: Callable[[dict[str, FieldValue]], Severity] | None = None,
              unless: str | None = None) -> Signature:
    """A Signature from a pattern string (compiled once, at import)."""
    compiled = re.compile(pattern)
    return Signature(kind, compiled, severity, phase, extract, incident, severity_of,
                re.compile(unless) if unless else None, required_literals(compiled))
