"""The signatures' derived needles never hide a match: every line a pattern matches holds one of its needles."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.records import Event, EventKind
from parsers import REGISTRY
from parsers.generic import GenericParser
from parsers.needles import required_literals
from parsers.signature import Signature, index_of, quoted_in_prose
from parsers.vllm import VllmParser

from .conftest import LOGS

SIGNATURES = {(cls.__name__, i): r for cls in (*REGISTRY.values(), GenericParser) for i, r in enumerate(cls.SIGNATURES)}
FIXTURE_LINES = [line for path in sorted(LOGS.rglob("*.log")) for line in path.read_text("utf-8").splitlines()]


def test_most_rules_get_needles() -> None:
    with_needles = sum(1 for r in SIGNATURES.values() if r.needles)
    assert with_needles >= 0.9 * len(SIGNATURES), "the derivation stopped understanding the patterns"


@pytest.mark.parametrize("key", sorted(SIGNATURES), ids=lambda k: f"{k[0]}-{k[1]}")
def test_no_fixture_match_lacks_a_needle(key: tuple[str, int]) -> None:
    rule = SIGNATURES[key]
    for line in FIXTURE_LINES:
        if rule.pattern.search(line):
            assert rule.could_match(line), (rule.pattern.pattern, line)


@pytest.mark.parametrize(
    ("pattern", "needles"),
    [
        (r"abc\d+def", ("abc",)),  # the longest-shortest run wins; ties go to the first
        (r"x(?:foo|barbaz)y", ("barbaz", "foo")),
        (r"(?:foo|b)ar", None),  # one branch has no useful literal, and "ar" is too short
        (r"(?:hello)?world", ("world",)),  # an optional group cannot be required
        (r"(?i)deadline", None),  # case-insensitive: always search
        (r"(?:abc){2,}", ("abc",)),
        (r"a.c", None),
    ],
)
def test_derivation(pattern: str, needles: tuple[str, ...] | None) -> None:
    assert required_literals(re.compile(pattern)) == needles


WORDS = st.sampled_from(["abc", "defg", "hij", "xyz1", "a", "b"])


@st.composite
def patterns(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(
        WORDS.map(re.escape),
        st.lists(WORDS.map(re.escape), min_size=2, max_size=3).map(lambda ws: "(?:" + "|".join(ws) + ")"),
        WORDS.map(lambda w: f"(?:{re.escape(w)})?"),
        st.just(r"\d+"), st.just("."),
    ), min_size=1, max_size=5))
    return "".join(parts)


@given(st.data(), patterns())
def test_needles_hold_for_random_patterns(data: st.DataObject, pattern: str) -> None:
    compiled = re.compile(pattern)
    needles = required_literals(compiled)
    text = data.draw(st.from_regex(compiled))  # a string containing a match
    if needles is not None:
        assert any(n in text for n in needles), (pattern, text, needles)


REAL_LINES = [line for path in sorted((LOGS.parent / "real").glob("*.txt"))
              for line in path.read_text("utf-8").splitlines()]
PARSER_CLASSES = (*REGISTRY.values(), GenericParser)


@pytest.mark.parametrize("cls", PARSER_CLASSES, ids=lambda c: c.__name__)
def test_the_index_names_exactly_the_signatures_that_could_match(cls: type) -> None:
    index = index_of(cls.SIGNATURES)
    for line in [*FIXTURE_LINES, *REAL_LINES]:
        expected = tuple(r for r in cls.SIGNATURES if r.could_match(line))
        assert index.candidates(line) == expected, line


NEEDLE_PIECES = sorted({n for r in SIGNATURES.values() for n in r.needles or ()})


@given(st.lists(st.one_of(st.sampled_from(NEEDLE_PIECES), st.text(max_size=6)), max_size=8).map("".join))
def test_the_index_agrees_on_lines_made_of_needles(line: str) -> None:
    """Needles that overlap, nest or share a start (`CUDA` in `CUDA out of memory`) are all reported."""
    for cls in PARSER_CLASSES:
        assert index_of(cls.SIGNATURES).candidates(line) == tuple(r for r in cls.SIGNATURES if r.could_match(line))


def _matched_one_by_one(cls: type, msg: str) -> list[tuple[Signature, dict[str, object]]]:
    """What `SignatureIndex.matches` answers, read signature by signature: the first match of each kind."""
    kinds: set[object] = set()
    out: list[tuple[Signature, dict[str, object]]] = []
    for r in cls.SIGNATURES:
        m = r.pattern.search(msg)
        if r.kind in kinds or m is None or (r.unless is not None and r.unless.search(msg)) or (
                "`" in msg and quoted_in_prose(msg, m)):
            continue
        kinds.add(r.kind)
        out.append((r, dict(r.extract(m)) if r.extract else {}))
    return out


@pytest.mark.parametrize("cls", PARSER_CLASSES, ids=lambda c: c.__name__)
def test_the_index_matches_as_its_signatures_do_asked_once_or_again(cls: type) -> None:
    """The second answer for a message is the one kept from the first: both are what the signatures say."""
    index = index_of(cls.SIGNATURES)
    for line in [*FIXTURE_LINES, *REAL_LINES]:
        expected = _matched_one_by_one(cls, line)
        assert [(r, dict(f)) for r, f in index.matches(line)] == expected, line
        assert [(r, dict(f)) for r, f in index.matches(line)] == expected, line


def test_a_kept_match_leaves_the_state_to_the_parser() -> None:
    """The same 500 line before and after an engine death: its matches are kept, its reason follows the death
    (the API server answering for a dead engine), and no event's fields are shared with another's."""
    failed = 'INFO:     10.0.0.9:40000 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error'
    death = "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above)."
    parser = VllmParser("e")
    events = [r for line in (failed, failed, death, failed) for r in parser.feed(line) if isinstance(r, Event)]
    assert [(e.kind, e.fields.get("reason")) for e in events] == [
        (EventKind.REQUEST_FAILED, "server_error"), (EventKind.REQUEST_FAILED, "server_error"),
        (EventKind.ENGINE_DEAD, None), (EventKind.REQUEST_FAILED, "engine_dead")]
    assert events[0].fields is not events[1].fields
