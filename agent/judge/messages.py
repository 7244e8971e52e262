"""A finding's message from its rule's template: numbers from the evidence only, optional parts dropped.

A template names evidence keys, references and a few words (`{flag}`, `{governs}` …). A `[…]` part is
dropped when a value it names is unknown, so a message never prints "?" for what the window did not
show; what is left is exactly the numbers the evidence lists (tests/unit/test_judge_properties.py).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")


def placeholders(template: str) -> list[str]:
    """The names a message template quotes, in order."""
    return [name.split(":")[0] for _, name, _, _ in string.Formatter().parse(template) if name]


def fill(template: str, values: Mapping[str, float | None], words: Mapping[str, str | None]) -> str:
    """The message with its numbers: a `[…]` part is dropped when a value it quotes is unknown, so a
    message never prints "?" for what the window did not show; a required value that is unknown reads
    "unknown"."""
    def optional(m: re.Match[str]) -> str:
        inner = m.group(1)
        known = all(words.get(n) is not None or values.get(n) is not None for n in placeholders(inner))
        return inner if known else ""

    text = re.sub(r"\s+(?=[,.;:)])", "", _OPTIONAL.sub(optional, template))
    text = re.sub(r"\(\s*\)|\s{2,}", lambda m: "" if m.group(0).startswith("(") else " ", text)
    names: dict[str, str] = {k: show(v) for k, v in values.items()}
    names.update({k: w if w is not None else "unknown" for k, w in words.items()})
    try:
        return text.format(**names)
    except (KeyError, ValueError, IndexError) as exc:  # validated at load; a format spec may still misfit
        return f"{text} (message not filled: {exc})"


def show(x: object) -> str:
    """A number as a message prints it: whole or ≥ 100 with thousands separators, else two decimals."""
    if x is None:
        return "unknown"
    if isinstance(x, float):
        return f"{x:,.0f}" if x.is_integer() or abs(x) >= 100 else f"{x:.2f}"
    return str(x)
