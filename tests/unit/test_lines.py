"""Line assembly as a property: any bytes, cut into any chunks, give the same lines at the same offsets."""

from __future__ import annotations

from collections import Counter
from typing import Any

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
        assert assembler.feed(chunk, pos, lambda frame, offset: got.append((frame, offset)), 1 << 30) == len(chunk)
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
        used = assembler.feed(data[pos:], pos, lambda _frame, offset: got.append(offset), budget)
        assert used > 0
        pos += used
    assert got == [o for _, o, _ in expected_lines(lines, 1 << 20)]


def _assembled(data: bytes, cuts: list[int], limit: int, budget: int, runs: bool) -> list[tuple[str, int, bool]]:
    """Every line of `data` fed in chunks of `cuts` with a line budget per call, plain runs taken at once
    (`runs`) or not: (text, offset, truncated)."""
    got: list[tuple[str, int, bool]] = []
    assembler = LineAssembler("plain", limit, Counter())

    def plain(texts: list[str], offsets: list[int]) -> None:
        assert len(texts) == len(offsets) and 0 < len(texts) <= budget
        got.extend((text, offset, False) for text, offset in zip(texts, offsets, strict=True))

    pos, i = 0, 0
    while pos < len(data):
        chunk = data[pos:pos + cuts[i % len(cuts)]]
        i += 1
        used = 0
        while used < len(chunk):
            step = assembler.feed(chunk[used:], pos + used, lambda f, o: got.append((f.text, o, f.truncated)),
                                  budget, plain if runs else None)
            assert step > 0
            used += step
        pos += len(chunk)
    assembler.flush(len(data), lambda f, o: got.append((f.text, o, f.truncated)))
    return got


@given(st.lists(st.sampled_from([b"", b"plain", b"caf\xc3\xa9", b"\xff\xfe bad", b"crlf\r", b"a\rb", b"x" * 70,
                                 b"\xc3", b"\xa9 tail"]), max_size=30),
       st.lists(st.integers(1, 200), min_size=1, max_size=6), st.integers(8, 80), st.integers(1, 9),
       st.booleans())
def test_plain_runs_give_the_lines_one_by_one_gives(lines: list[bytes], cuts: list[int], limit: int, budget: int,
                                                   end_newline: bool) -> None:
    """A plain file's whole lines taken as runs (split and decoded at once) are exactly the lines `_line`
    gives one by one — texts, offsets, over-long lines cut, invalid UTF-8 replaced, a final `\\r` dropped —
    whatever the chunks, the line budget, or a last line without its newline."""
    data = b"\n".join(lines) + (b"\n" if end_newline else b"")
    assert _assembled(data, cuts, limit, budget, True) == _assembled(data, cuts, limit, budget, False)


def test_a_run_with_a_bad_byte_is_read_line_by_line_once() -> None:
    """Invalid UTF-8 in a run sends that run's lines through `_line` (which counts it), and the run is not
    tried again from each of its lines (a chunk would be split over again for every line)."""

    class Counted(LineAssembler):
        tries = 0

        def _plain_run(self, *args: Any) -> tuple[int, int] | None:
            Counted.tries += 1
            return super()._plain_run(*args)

    counts: Counter[str] = Counter()
    assembler = Counted("plain", 1 << 20, counts)
    runs: list[list[str]] = []
    data = b"".join(b"line %d\n" % n for n in range(1000)) + b"bad \xff\n"
    assembler.feed(data, 0, lambda f, o: None, 1 << 30, lambda texts, offsets: runs.append(texts))
    assert counts["invalid_utf8"] == 1 and runs == [] and Counted.tries == 1
    assembler.feed(b"ok\n" * 3, len(data), lambda f, o: None, 1 << 30, lambda texts, offsets: runs.append(texts))
    assert runs == [["ok", "ok", "ok"]]
