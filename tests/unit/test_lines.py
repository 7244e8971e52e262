"""Line assembly as a property: any bytes, cut into any chunks, give the same lines at the same offsets."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from agent.sources.framing import Frame
from agent.sources.lines import LineAssembler

content = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12)


def expected_lines(lines: list[bytes], limit: int) -> list[tuple[str | None, int, bool]]:
    out: list[tuple[str | None, int, bool]] = []
    offset = 0
    for raw in lines:
        cut = len(raw) > limit
        kept = raw[:limit] if cut else raw.removesuffix(b"\r")
        text = kept.decode("utf-8", "replace") if not cut else None
        out.append((text, offset, cut))
        offset += len(raw) + 1
    return out


@given(content, st.lists(st.integers(1, 30), min_size=1, max_size=10), st.integers(8, 64))
def test_chunking_never_changes_lines_or_offsets(lines: list[bytes], cuts: list[int], limit: int) -> None:
    data = b"".join(raw + b"\n" for raw in lines)
    got: list[tuple[Frame, int]] = []
    assembler = LineAssembler("plain", limit, Counter())
    pos, i = 0, 0
    while pos < len(data):
        chunk = data[pos:pos + cuts[i % len(cuts)]]
        i += 1
        assert assembler.feed(chunk, pos, lambda frame, offset: got.append((frame, offset)), lambda: False) == \
            len(chunk)
        pos += len(chunk)
        assert assembler.committed(pos) <= pos
    assert not assembler.holding() and assembler.committed(len(data)) == len(data)
    want = expected_lines(lines, limit)
    assert [(o, f.truncated) for f, o in got] == [(o, cut) for _, o, cut in want]
    for (frame, _), (text, _, cut) in zip(got, want, strict=True):
        assert len(frame.text) <= limit  # at most one character per byte kept
        if not cut:
            assert frame.text == text


@given(content, st.integers(1, 5))
def test_a_line_budget_stops_after_whole_lines_and_resumes_exactly(lines: list[bytes], budget: int) -> None:
    data = b"".join(raw + b"\n" for raw in lines)
    got: list[int] = []
    assembler = LineAssembler("plain", 1 << 20, Counter())
    pos = 0
    while pos < len(data):
        stop_at = len(got) + budget

        def stop(stop_at: int = stop_at) -> bool:
            return len(got) >= stop_at

        used = assembler.feed(data[pos:], pos, lambda _frame, offset: got.append(offset), stop)
        assert used > 0
        pos += used
    assert got == [o for _, o, _ in expected_lines(lines, 1 << 20)]
