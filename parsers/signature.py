"""What a line must look like to mean an event: `Signature` (a pattern, compiled on first use; the event kind, how loud,
which phase, how to read its numbers) and the helpers the engine modules build them with.

Each signature carries the literals every match must contain (derived from the pattern by
parsers/needles.py), so a line without them is passed over before the regular expression runs.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agent.records import EventKind, FieldValue, Phase, Severity
from parsers import derived
from parsers.needles import required_literals

_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4,
          "KB": 1024, "MB": 1024**2, "GB": 1024**3}

Extract = Callable[["re.Match[str]"], dict[str, FieldValue]]


def size_bytes(number: str, unit: str) -> int:
    """`1.50` + `GiB` → bytes. PyTorch, vLLM and SGLang print binary units (SGLang's "GB" is 2**30)."""
    return round(float(number.replace(",", "")) * _UNITS.get(unit, 1))


@dataclass(frozen=True)
class Signature:
    """A line pattern that means one event kind; `phase` None means "ask the parser's state".

    The pattern is kept as its text and compiled when a line first holds its literals (`pattern`): most of a
    parser's signatures never run on a given log, so start-up need not compile them (bench/README.md measures
    what that saves: a few per cent; the literals are still parsed from the text up front)."""

    kind: EventKind
    source: str  # the pattern's text
    severity: Severity
    phase: Phase | None = None
    extract: Extract | None = None
    incident: bool = False  # one occurrence may be reported many times (ranks, re-raise): de-duplicate
    severity_of: Callable[[dict[str, FieldValue]], Severity] | None = None  # when the numbers decide
    unless: re.Pattern[str] | None = None  # the same words in a line that means something else
    needles: tuple[str, ...] | None = None  # every match contains one of these (None: always search)

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        """The compiled pattern, on first use (then an ordinary attribute: the instance's own)."""
        return re.compile(self.source)

    def could_match(self, text: str) -> bool:
        """False when the line lacks every required literal, so the regex need not run."""
        if self.needles is None:
            return True
        for needle in self.needles:  # noqa: SIM110 - a loop beats any() on this path
            if needle in text:
                return True
        return False


class SignatureIndex:
    """Which of a parser's signatures a message could match, in their order, from one scan of the message.

    Asking each signature (`could_match`, ~50 of them) cost a Python call per signature per hot line,
    most of a refusal line's cost. Here every needle of every signature is looked for at once: a zero-width
    scan reports, at each position, the longest needle starting there; the needles that are its prefixes
    start there too, so each reported needle stands for the signatures of all its prefixes. The answer is
    exactly the signatures whose `could_match` is true (tests/unit/test_needles.py)."""

    def __init__(self, signatures: tuple[Signature, ...]) -> None:
        self.signatures = signatures
        self._always = frozenset(i for i, r in enumerate(signatures) if r.needles is None)
        owners: dict[str, set[int]] = {}
        for i, r in enumerate(signatures):
            for needle in r.needles or ():
                owners.setdefault(needle, set()).add(i)
        self._owners = {needle: frozenset(i for prefix, them in owners.items() if needle.startswith(prefix)
                                          for i in them) for needle in owners}
        self._scan = re.compile(f"(?=({trie_pattern(owners, longest=True)}))") if owners else None
        self._cache: dict[frozenset[int], tuple[Signature, ...]] = {}
        self._matched: dict[str, tuple[Matched, ...]] = {}

    def candidates(self, text: str) -> tuple[Signature, ...]:
        found = set(self._always)
        if self._scan is not None:
            owners = self._owners
            for needle in set(self._scan.findall(text)):
                found |= owners[needle]
        key = frozenset(found)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= 1024:
                self._cache.clear()
            hit = self._cache[key] = tuple(self.signatures[i] for i in sorted(found))
        return hit


    def matches(self, msg: str) -> tuple[Matched, ...]:
        """The signatures `msg` matches, in order, the first of each kind only, each with the fields it reads:
        the part of `StreamParser.events_for` that depends on the message alone (the candidates, each pattern and
        its `unless`, the prose test, `extract`). The parser's state (what it found on earlier lines of the
        occurrence, a death seen, the de-duplication) is applied by the caller.

        The last `MATCH_CACHE` answers are kept, for messages of at most `MATCH_CACHE_CHARS`: a storm repeats one
        message thousands of times (a refusal's access line), and matching it (a needle scan, a dozen searches,
        the route's redaction) was most of that line's cost. The fields are shared: callers copy them."""
        hit = self._matched.get(msg)
        if hit is not None:
            return hit
        kinds: set[EventKind] = set()
        found: list[Matched] = []
        for r in self.candidates(msg):
            if r.kind in kinds:
                continue
            m = r.pattern.search(msg)
            if m is None or (r.unless is not None and r.unless.search(msg) is not None) or (
                    "`" in msg and quoted_in_prose(msg, m)):
                continue
            kinds.add(r.kind)
            found.append((r, r.extract(m) if r.extract else {}))
        answer = tuple(found)
        if len(msg) <= MATCH_CACHE_CHARS:
            if len(self._matched) >= MATCH_CACHE:
                self._matched.clear()
            self._matched[msg] = answer
        return answer


Matched = tuple[Signature, dict[str, FieldValue]]  # a signature a message matches, and the fields it read
MATCH_CACHE = 256  # messages whose matches an index keeps
MATCH_CACHE_CHARS = 4096  # a longer message is matched every time (the cache stays under ~1 M characters)

_INDEXES: dict[int, SignatureIndex] = {}


def index_of(signatures: tuple[Signature, ...]) -> SignatureIndex:
    """The index of a parser's `SIGNATURES` (built on first use, once per tuple)."""
    index = _INDEXES.get(id(signatures))
    if index is None or index.signatures is not signatures:
        index = _INDEXES[id(signatures)] = SignatureIndex(signatures)
    return index


def json_object(text: str) -> dict[str, Any] | None:
    """The object of a JSON-formatted log line (TGI `--json-output`, vLLM's JSON formatter, llama.cpp
    `--log-format json`), or None when the line is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class Prefilter:
    """The pre-filter: a line must contain one of the literals to be looked at.

    The literals are folded into a trie-shaped pattern (`C(?:UDA|UBLAS|…)`) rather than a flat
    alternation: `re` tries every branch at every position, and sixty flat branches cost twice as much
    as the trie on a boring line. A literal that extends a shorter one is dropped (the shorter suffices).
    The pattern is compiled on the first search, not at import: compiling the parsers' tries was a third of
    `scan`'s start-up, and a process whose lines all pass the compiled lane's literal test (parsers/_lane.c,
    which takes `literals`) or that reads no line never searches.
    """

    def __init__(self, literals: Iterable[str]) -> None:
        words = sorted(set(literals))
        kept: list[str] = []
        for word in words:  # sorted, a literal's shorter prefix is the last one kept before it
            if not (kept and word.startswith(kept[-1])):
                kept.append(word)
        self.literals: frozenset[str] = frozenset(kept)  # every string the pattern matches
        self._words = tuple(literals)
        self.search: Callable[[str], re.Match[str] | None] = self._compile_then_search

    flags = 0  # as a compiled pattern's: the trie has none

    @property
    def pattern(self) -> str:
        """The trie's text, which the first search compiles (`(?!)`, matching nothing, for no literal)."""
        return trie_pattern(self._words) or "(?!)"

    def _compile_then_search(self, text: str) -> re.Match[str] | None:
        self.search = re.compile(self.pattern).search
        return self.search(text)

    def within(self, text: str) -> bool:
        """Whether `text` holds one of the literals, without the pattern (for a test made once, at a class's
        creation)."""
        return any(word in text for word in self.literals)


def hot(*literals: str) -> Prefilter:
    """The pre-filter of `literals` (see `Prefilter`)."""
    return Prefilter(literals)


def trie_pattern(literals: Iterable[str], longest: bool = False) -> str | None:
    """`_trie_pattern` of the literals' trie (None for no literal), read from the parsers' disk copy when an
    earlier process derived it (parsers.derived): folding ~10,000 characters into tries cost every start."""
    words = list(literals)
    if not words:
        return None
    key = f"{int(longest)}:" + "\0".join(words)
    held = derived.table("trie").get(key)
    if isinstance(held, str):
        return held
    return derived.keep("trie", key, _trie_pattern(_trie(words), longest))


def _trie(literals: Iterable[str]) -> dict[str, Any]:
    trie: dict[str, Any] = {}
    for literal in literals:
        node = trie
        for ch in literal:
            node = node.setdefault(ch, {})
        node[""] = {}
    return trie


def _trie_pattern(node: dict[str, Any], longest: bool = False) -> str:
    """The trie as a pattern that matches the shortest literal at a position (enough for a pre-filter), or
    with `longest` the longest (a literal's end is an optional, greedy, rest)."""
    children = {ch: child for ch, child in sorted(node.items()) if ch}
    if "" in node and (not longest or not children):
        return ""  # a literal ends here
    branches = [re.escape(ch) + _trie_pattern(child, longest) for ch, child in children.items()]
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    if "" in node:  # longest: a literal ends here, and longer ones go on
        return (body if len(branches) > 1 else f"(?:{body})") + "?"
    return body


# Prose that names a refusal without one happening: advice ("if you get a 429 …", "when the server returns
# 503 …"), explanations ("the `Model is overloaded` error means …") and proposals of what a server should
# answer ("would the design be to return … HTTP 503", "it should respond with a 429"): a log line reports what
# was answered, never what would or should be. Used as the `unless` of the wordings that are as likely in a
# thread's text as in a log (a status and its phrase, a refusal's message).
ADVICE = (r"(?i:^\s*(?:if|when|whenever)\s|\b(?:if|when) you (?:get|see|hit|receive|are getting)\b"
          r"|\b(?:error|status|response)\b[^\n]{0,40}\bmeans\b"
          r"|\b(?:would|should|could|might|shall)(?:\s+\w+){0,5}?\s+(?:return|respond|reply)\b"
          r"|\b(?:be|want|like|prefer|propose|ought) to (?:return|respond|reply)\b"
          # a change's or a design's description of what the server does ("rejects overflow requests with HTTP
          # 503", "new requests will be rejected immediately with an HTTP 503"): a log line reports what was
          # answered, in the past or as an event, never "rejects … with" or what "will be rejected with"
          r"|\b(?:rejects|returns|responds|(?:will|would|should|must|can) be (?:rejected|refused|answered))\b"
          r"[^\n]{0,80}?\bwith (?:an? )?(?:HTTP |status )?(?:429|503)\b)")


# A log statement quoted in a sentence: an inline code span (`…`) with words around it on the same line, as
# docs and threads explain a message ("if you frequently see warnings like `KV cache pool is full. Retract
# requests.`, you can increase …"). A line pasted as a log has no backticks of its own (a code fence is a line
# of its own, and the lines inside it are bare), so only a match that starts inside a span, on a line whose
# text outside the spans addresses the reader or explains (`you`, `if`, `when`, `like`, `means`, `such as`), is
# prose; so is a match that runs across a span or starts right after one (a sentence that names the call, then
# its error: "a call to `cudaMalloc` failed with an "out of memory" error, … NVIDIA may be able to help you").
# Some clients put backticks in their own messages (Guzzle: "Server error: `POST …` resulted in a `504 Gateway
# Time-out` response"); they speak to no reader, so they stay log lines.
_CODE_SPAN = re.compile(r"`[^`\n]{1,2000}`")
_EXPLAINS = re.compile(r"(?i:\b(?:you|your|if|when|whenever|like|means|such as|e\.g\.)(?![\w.]))")


def quoted_in_prose(msg: str, m: re.Match[str]) -> bool:
    """Whether the match starts inside, runs across or directly follows an inline code span of a sentence (a
    quoted statement, not a log line)."""
    if msg.count("`") < 2:
        return False
    spans = [(c.start(), c.end()) for c in _CODE_SPAN.finditer(msg)]
    if not any(a < m.start() < b or m.start() < a < m.end() or (b <= m.start() and not msg[b:m.start()].strip())
               for a, b in spans):
        return False
    outside = _CODE_SPAN.sub(" ", msg)
    return _EXPLAINS.search(outside) is not None


def signature(kind: EventKind, pattern: str, severity: Severity, phase: Phase | None = None,
              extract: Extract | None = None, incident: bool = False,
              severity_of: Callable[[dict[str, FieldValue]], Severity] | None = None,
              unless: str | None = None) -> Signature:
    """A Signature from a pattern string (compiled on first use; its literals derived now, for the index)."""
    return Signature(kind, pattern, severity, phase, extract, incident, severity_of,
                     re.compile(unless) if unless else None, required_literals(pattern))
