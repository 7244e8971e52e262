"""Signatures read from the catalogue: an entry with a `pattern` is a signature of its engine's parser.

A wording the hand-written modules do not know (a newer release's, a client's, a proxy's) is then a data
change: the entry says the kind, phase and constant fields; the pattern's named groups give the numbers the
line carries (digits become numbers). The signatures come after the engine module's own and before the
engine-agnostic families, so a precise hand-written signature still wins; they are built once, at import,
and go through the same needle index as every other signature, so the hot path pays nothing per entry.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping

from agent.records import EventKind, FieldValue, Phase, Severity
from parsers.catalogue import Statement, load
from parsers.signature import Signature, signature

_SEVERITY = {
    EventKind.ENGINE_DEAD: Severity.CRITICAL, EventKind.GPU_LOST: Severity.CRITICAL, EventKind.OOM: Severity.ERROR,
    EventKind.CUDA_ERROR: Severity.ERROR, EventKind.NCCL_TIMEOUT: Severity.ERROR,
}
INCIDENTS = frozenset({EventKind.OOM, EventKind.ENGINE_DEAD, EventKind.CUDA_ERROR, EventKind.NCCL_TIMEOUT,
                       EventKind.GPU_LOST})
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _number(text: str) -> FieldValue:
    if _NUMBER.fullmatch(text) is None:
        return text
    return float(text) if "." in text else int(text)


def _field(name: str, text: str) -> tuple[str, FieldValue]:
    """A named group's field: digits become a number; `x_ms` becomes `x_s` in seconds and `x_s` is a float
    (the shared unit of `timeout_s` and `duration_s`, whatever unit the line counts in)."""
    value = _number(text)
    if name.endswith("_ms") and isinstance(value, (int, float)):
        return name[:-3] + "_s", value / 1000
    if name.endswith("_s") and isinstance(value, int):
        return name, float(value)
    return name, value


def _extract(fields: Mapping[str, FieldValue]) -> Callable[[re.Match[str]], dict[str, FieldValue]]:
    """The entry's constant fields (those its pattern's groups do not give), then what the groups read. The
    groups are known from the first match's pattern: compiling each pattern at start to learn them cost every
    start what its first matching line now pays."""
    constants: Mapping[str, FieldValue] | None = None

    def extract(m: re.Match[str]) -> dict[str, FieldValue]:
        nonlocal constants
        if constants is None:
            groups = {_field(g, "0")[0] for g in m.re.groupindex}
            constants = {k: v for k, v in fields.items() if k not in groups}
        found = dict(_field(k, v) for k, v in m.groupdict().items() if v is not None)
        return {**constants, **found}
    return extract


def _signature(s: Statement) -> Signature | None:
    try:
        kind = EventKind(s.signals)
    except ValueError:
        return None  # a kind this build does not have (request_failed lands with the engine work)
    assert s.pattern is not None
    severity = _SEVERITY.get(kind, Severity.WARNING)
    if kind is EventKind.OOM and s.phase == Phase.STARTUP.value:
        severity = Severity.CRITICAL
    return signature(kind, s.pattern, severity, Phase(s.phase) if s.phase else None, _extract(s.fields),
                     incident=kind in INCIDENTS)


@functools.cache
def signatures(parser: str) -> tuple[Signature, ...]:
    """The catalogue's signatures for one parser (`vllm`, …; `auto` for clients and proxies, which every
    parser reads). Built once per parser: every engine's parser takes `auto`'s, and each pattern's compiling
    and literal derivation was most of the parsers' import time when done again for each."""
    out = []
    for source in load():
        if source.parser.value != parser:
            continue
        for s in source.statements:
            if s.pattern is not None and (sig := _signature(s)) is not None:
                out.append(sig)
    return tuple(out)


@functools.cache
def hot_words(parser: str) -> tuple[str, ...]:
    """Literals one of which every catalogued line of the parser holds (for its pre-filter), each without
    the spaces and punctuation it may start with: the pre-filter is searched at every position of every
    line it sees, and a literal starting with a space is tried at every space (` UT ` made it 30 % slower
    on an ordinary line); `UT ` is as necessary as ` UT `."""
    words: list[str] = []
    for sig in signatures(parser):
        literals = sig.needles  # the pattern's required literals, derived once, when its signature was built
        if literals is None:
            raise ValueError(f"a catalogued pattern without a literal cannot be pre-filtered: {sig.source}")
        words.extend(w.lstrip(_LEADING) or w for w in literals)
    return tuple(words)


_LEADING = " \t:;,.()[]{}\"'=-"
