"""The signatures' derived needles never hide a match: every line a pattern matches holds one of its needles."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parsers import REGISTRY
from parsers.generic import GenericParser
from parsers.needles import required_literals
from parsers.signature import index_of

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
