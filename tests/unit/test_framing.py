"""Framing is pure: property tests that envelopes round-trip, splits re-join, and nothing raises."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from agent.sources.framing import Frame, PartialJoiner, parse_rfc3339, unwrap

line_text = st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=300)
streams = st.sampled_from(["stdout", "stderr"])


def docker_pieces(text: str, stream: str, size: int) -> list[str]:
    """Docker json-file entries for one line, split every `size` characters as the daemon does at 16 KiB."""
    chunks = [text[i:i + size] for i in range(0, len(text), size)] or [""]
    chunks[-1] += "\n"
    return [json.dumps({"log": c, "stream": stream, "time": "2025-05-01T10:00:00.5Z"}) for c in chunks]


@given(line_text, streams, st.integers(1, 64))
def test_docker_split_lines_rejoin_to_the_original(text: str, stream: str, size: int) -> None:
    joiner = PartialJoiner()
    out = []
    for offset, raw in enumerate(docker_pieces(text, stream, size)):
        frame = unwrap(raw, "docker")
        assert frame is not None
        joined = joiner.feed(frame, offset)
        if joined is not None:
            out.append(joined)
    assert [(f.text, f.stream, f.ts, o) for f, o in out] == [(text.removesuffix("\r"), stream, 1746093600.5, 0)]
    assert joiner.held_offset() is None


@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), max_size=40),
                min_size=1, max_size=6), streams)
def test_cri_partials_rejoin_and_interleaved_streams_stay_apart(pieces: list[str], stream: str) -> None:
    other = "stderr" if stream == "stdout" else "stdout"
    joiner = PartialJoiner()
    out = []
    for i, piece in enumerate(pieces):
        tag = "F" if i == len(pieces) - 1 else "P"
        frame = unwrap(f"2025-05-01T10:00:00.000000001Z {stream} {tag} {piece}", "cri")
        assert frame is not None
        if (joined := joiner.feed(frame, 10 * i)) is not None:
            out.append(joined)
        interleaved = unwrap(f"2025-05-01T10:00:00Z {other} F between {i}", "cri")
        assert interleaved is not None
        between = joiner.feed(interleaved, 10 * i + 5)
        assert between is not None and between[0].text == f"between {i}"
        if tag == "P":
            assert joiner.held_offset() == 0  # the cursor may not pass the unfinished line's start
    assert [(f.text, o) for f, o in out] == [("".join(pieces), 0)]


@given(st.lists(st.text(max_size=50), max_size=20), st.integers(1, 100))
def test_joined_lines_never_exceed_the_maximum(pieces: list[str], limit: int) -> None:
    joiner = PartialJoiner(max_chars=limit)
    for piece in pieces:
        joined = joiner.feed(Frame(piece, "stdout", partial=True))
        assert joined is None
    flushed = joiner.flush()
    for frame, _ in flushed:
        assert len(frame.text) <= limit
        assert frame.truncated == (len("".join(pieces)) > limit)


@given(st.text(max_size=200), st.sampled_from(["plain", "docker", "cri"]))
def test_unwrap_never_raises(raw: str, fmt: str) -> None:
    frame = unwrap(raw, fmt)
    assert frame is None or isinstance(frame.text, str)


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)),
       st.integers(0, 999_999_999), st.integers(-14 * 60, 14 * 60))
def test_rfc3339_nanoseconds_and_offsets(moment: datetime, nanos: int, offset_minutes: int) -> None:
    zone = timezone(timedelta(minutes=offset_minutes))
    local = moment.replace(microsecond=0, tzinfo=zone)
    sign = "-" if offset_minutes < 0 else "+"
    text = local.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}{sign}{abs(offset_minutes) // 60:02d}:" \
        f"{abs(offset_minutes) % 60:02d}"
    parsed = parse_rfc3339(text)
    assert parsed is not None
    assert abs(parsed - (local.timestamp() + nanos / 1e9)) < 1e-5


@given(st.text(max_size=60))
def test_rfc3339_never_raises(text: str) -> None:
    parse_rfc3339(text)
