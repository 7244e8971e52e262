"""The daemon's compiled lane (agent/sources/rawlines.py, agent/daemon/lane.py) against its Python path.

Two tailers follow the same files, one handing runs of whole lines on as `RawLines` and one making a
`LogLine` per line (the reference), each feeding its own `LogStream`; after every write, rotation and
truncation both are polled at the same instant and must give the same records, the same cursors to
persist, the same expired cursors and the same self-metrics. Writes are cut at any byte, reads are cut
small (a line over two reads, a quiet run over two reads), lines are over the maximum, hold CR, invalid
UTF-8 and every shape the `scan` lane's tests use. A whole daemon is then run both ways over a storm with
a rotation and a restart in it, and its store must hold the same rows.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config import SourceSection, load_config
from agent.daemon import lane
from agent.daemon.loop import Daemon
from agent.daemon.streams import LogStream
from agent.records import RawLines, Record, Server
from agent.sources import tailer as tailer_module
from agent.sources.identity import READ_CHUNK_BYTES
from agent.sources.lines import LineAssembler
from agent.sources.tailer import FileTailer
from agent.sources.tailstate import TailOptions
from parsers.compiled import ENV, built
from tests.unit.test_lane_differential import ODDITIES, SHAPES

needs_lane = pytest.mark.skipif(not built(), reason="the compiled lane (parsers/_lane.c) is not built here")

NOW = 1_780_000_000.0  # late November 2026, near the shapes' stamps
KEY = re.compile(r"(\d+:\d+):([0-9a-f]{12})")  # a file key's random part differs between the two tailers


@pytest.fixture
def raw_blocks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The lines each `RawLines` the lane parsed held, so a test knows the lane really ran."""
    seen: list[int] = []
    real = lane.feed_raw

    def counted(parser: Any, block: RawLines, where: str) -> list[Record]:
        seen.append(block.lines)
        return real(parser, block, where)
    monkeypatch.setattr("agent.daemon.streams.feed_raw", counted)
    yield seen


def _states(stream: LogStream) -> list[tuple[str, int, object]]:
    """Each engine's parser state: its lines seen (a refusal is told once within so many lines) and what
    decides its future output (`checkpoint`)."""
    out: list[tuple[str, int, object]] = []
    for engine, parser in sorted(stream.parsers.items()):
        target = lane._target(parser)
        if target is not None:
            out.append((engine, target.lines_seen, target.checkpoint()))
    return out


class _Pair:
    """The lane's tailer and the reference, following `pattern` side by side."""

    def __init__(self, pattern: str, server: Server, max_line: int) -> None:
        options = TailOptions(start_at="beginning", max_line_bytes=max_line)
        section = SourceSection(path=pattern, server=server, name="mix")
        self.lane = FileTailer("mix", pattern, options, raw=True)
        self.python = FileTailer("mix", pattern, options)
        assert self.lane.raw and not self.python.raw
        self.streams = [LogStream(section, t, server, NOW) for t in (self.lane, self.python)]
        self.keys: list[dict[str, str]] = [{}, {}]

    def _normal(self, side: int, out: object) -> str:
        """`out` as text, each file key's random part replaced by the order the file was first seen in."""
        keys = self.keys[side]
        return KEY.sub(lambda m: f"{m[1]}:#{keys.setdefault(m[2], str(len(keys)))}", repr(out))

    def poll(self, now: float) -> bool:
        """Poll both and compare; whether more is waiting."""
        got = []
        more = False
        for side, (reader, stream) in enumerate(zip((self.lane, self.python), self.streams, strict=True)):
            assert isinstance(reader, FileTailer)
            batch = reader.poll(now)
            records = stream.feed(batch.lines)
            out = (records, stream.persistable(batch.cursors), batch.expired, batch.more, reader.stats(),
                   stream.held_offsets(), stream.parse_errors, _states(stream))
            got.append(self._normal(side, out))
            more = batch.more
        assert got[0] == got[1]
        return more

    def close(self, now: float) -> None:
        got = []
        for side, (reader, stream) in enumerate(zip((self.lane, self.python), self.streams, strict=True)):
            assert isinstance(reader, FileTailer)
            batch = reader.close(now)
            out = (stream.feed(batch.lines), stream.flush(), stream.persistable(batch.cursors), reader.stats())
            got.append(self._normal(side, out))
        assert got[0] == got[1]


def _line(shape: str, n: int, odd: bytes, tail: bool) -> bytes:
    return shape.format(n).encode() + (odd + b"\n" if tail else b"\n" + odd)


_ACTS = st.one_of(
    # (oddities one line in three: a read with invalid UTF-8 in it goes line by line, as the Python path)
    st.tuples(st.just("write"), st.lists(st.tuples(st.sampled_from(SHAPES), st.integers(0, 59),
                                                   st.sampled_from([b""] * 20 + ODDITIES), st.booleans()),
                                         max_size=60),
              st.integers(0, 1 << 16)),
    st.tuples(st.just("poll"), st.floats(0, 8)),
    st.tuples(st.sampled_from(["rotate", "truncate", "long"]), st.integers(0, 3)),
)


@needs_lane
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(acts=st.lists(_ACTS, min_size=1, max_size=12), chunk=st.sampled_from([7, 300, 1000, 1 << 16]),
       line_budget=st.sampled_from([1, 5, 20_000]), max_line=st.sampled_from([80, 200, 1 << 20]),
       server=st.sampled_from([Server.VLLM, Server.AUTO, Server.SGLANG]))
def test_the_lane_and_the_python_path_give_the_same_records_and_cursors(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, acts: list[tuple[Any, ...]],
        chunk: int, line_budget: int, max_line: int, server: Server) -> None:
    """Each write lands in two parts cut at any byte (a line, or a quiet run, over two reads); a rotation
    renames the file and starts another; a truncation empties it in place; `long` writes a line over the
    maximum. Reads are `chunk` bytes and a poll reads at most `line_budget` lines (each an edge of a run)."""
    monkeypatch.setattr(tailer_module, "READ_CHUNK_BYTES", chunk)
    monkeypatch.setattr(tailer_module, "MAX_LINES_PER_POLL", line_budget)
    monkeypatch.delenv(ENV, raising=False)
    log = tmp_path_factory.mktemp("lane") / "mix.log"
    log.write_bytes(b"")
    pair = _Pair(str(log.parent / "mix.log*"), server, max_line)
    now = NOW
    pair.poll(now)
    for act in acts:
        if act[0] == "write":
            data = b"".join(_line(*line) for line in act[1])
            cut = act[2] % (len(data) + 1)
            for part in (data[:cut], data[cut:]):
                with log.open("ab") as handle:
                    handle.write(part)
                now += 0.1
                pair.poll(now)
        elif act[0] == "poll":
            now += act[1]
            pair.poll(now)
        elif act[0] == "rotate":
            log.rename(log.with_name(f"mix.log.{act[1]}"))
            log.write_bytes(b"")
        elif act[0] == "truncate":
            log.write_bytes(b"")
        else:
            with log.open("ab") as handle:
                handle.write(b"z" * (max_line + act[1]) + b" CUDA out of memory\n" + SHAPES[0].format(1).encode())
    now += 1
    pair.poll(now)
    pair.close(now + 10)


class _Recorder:
    """A parser that only records the texts it is fed: nothing is quiet to it, nothing settled."""

    def __init__(self) -> None:
        self.fed: list[tuple[str, int]] = []

    def feed_batch(self, texts: list[str], offsets: list[int], path: str | None,
                   first_line: int | None = None) -> list[Record]:
        self.fed += zip(texts, offsets, strict=True)
        return []


@needs_lane
@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.tuples(st.sampled_from(SHAPES), st.integers(0, 59), st.sampled_from(ODDITIES),
                                st.booleans()), max_size=40), max_line=st.sampled_from([80, 1 << 20]))
def test_lines_the_parser_reads_reach_it_as_the_assemblers_texts(lines: list[tuple[str, int, bytes, bool]],
                                                                   max_line: int) -> None:
    """Every line `feed_raw` does not pass over reaches the parser as `LineAssembler` gives it: CR dropped,
    at its offset, in order, with the lines the assembler delivers one by one between runs."""
    data = b"".join(_line(*line) for line in lines)
    reference: list[tuple[str, int]] = []
    LineAssembler("plain", max_line, Counter(), 100).feed(
        data, 100, lambda frame, offset: reference.append((frame.text, offset)), 1 << 30,
        lambda texts, offsets: reference.extend(zip(texts, offsets, strict=True)))
    recorder = _Recorder()
    LineAssembler("plain", max_line, Counter(), 100).feed(
        data, 100, lambda frame, offset: recorder.fed.append((frame.text, offset)), 1 << 30,
        emit_raw=lambda raw, offset, count: lane.feed_raw(
            recorder, RawLines("mix", "mix.log", offset, raw, count, "k"), "k"))  # type: ignore[arg-type]
    assert recorder.fed == reference


@needs_lane
@pytest.mark.parametrize("line_budget", [100, 500, 20_000])  # (a chunk is some 300 lines)
def test_a_storm_goes_through_the_lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw_blocks: list[int],
                                       line_budget: int) -> None:
    """Quiet runs and stats lines over many reads and polls (each poll stopped by its line budget in the
    middle of a run): the lane runs (and agrees) on every line but those that span two reads (begun in
    one, they are finished by `LineAssembler`)."""
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(tailer_module, "MAX_LINES_PER_POLL", line_budget)
    log = tmp_path / "mix.log"
    mix = [SHAPES[i % 7].format(i % 60) for i in range(5000)] + ["plain words with nothing in them"] * 500
    log.write_text("\n".join(mix) + "\n", encoding="utf-8")
    pair = _Pair(str(log), Server.VLLM, 1 << 20)
    polls = 1
    while pair.poll(NOW + polls):
        polls += 1
    assert polls >= len(mix) // line_budget
    reads = log.stat().st_size // READ_CHUNK_BYTES + 1
    assert len(mix) - reads <= sum(raw_blocks) <= len(mix)


def _rows(work: Path) -> dict[str, list[tuple[str, ...]]]:
    """Every table's rows, in order, made comparable between two directories: a file's device and inode are
    its name, a file key's random part the order it was first seen in."""
    inodes = {str(p.stat().st_ino): p.name for p in work.glob("vllm.log*")}
    device = str(work.stat().st_dev)
    keys: dict[str, str] = {}

    def normal(value: object) -> str:
        text = str(value).replace(str(work), "WORK")
        if text == device or text in inodes:
            return "DEV" if text == device else inodes[text]
        return KEY.sub(lambda m: f"{inodes.get(m[1].split(':')[1])}:#{keys.setdefault(m[2], str(len(keys)))}",
                       text)
    with sqlite3.connect(work / "agent.db") as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                  if r[0] != "_sqlite_migrations"]  # (when the schema was made)
        rows = {t: [tuple(map(normal, row)) for row in conn.execute(f"SELECT * FROM {t} ORDER BY rowid")]
                for t in tables}
    conn.close()
    return rows


def _daemon_run(tmp_path: Path, name: str, data: bytes, cuts: list[int]) -> tuple[dict[str, Any], dict[Any, float]]:
    """A daemon following `data` written in the parts `cuts` makes, the file rotated after the second part and
    the daemon restarted after the third; its store's rows and its totals."""
    work = tmp_path / name
    work.mkdir()
    log = work / "vllm.log"
    log.write_bytes(b"")
    config = work / "config.yaml"
    config.write_text("sources: [{path: vllm.log*, server: vllm, name: vllm, start_at: beginning}]\n"
                      "nvml: {enabled: false}\nstore: {path: agent.db}\n")
    daemon = Daemon(load_config(config))
    now = NOW
    daemon.start(now)
    edges = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    for part, (start, stop) in enumerate(pairwise(edges)):
        with log.open("ab") as handle:
            handle.write(data[start:stop])
        if part == 1:
            log.rename(work / "vllm.log.1")
            log.write_bytes(b"")
        if part == 2:
            daemon.close(now)
            daemon = Daemon(load_config(config))
            daemon.start(now)
        now += 0.1
        while daemon.run_once(now):
            now += 0.1
    now += 10
    daemon.run_once(now)
    totals = dict(daemon.snapshot().totals)
    daemon.close(now)
    return _rows(work), totals


@needs_lane
def test_a_daemon_stores_the_same_rows_with_the_lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     raw_blocks: list[int]) -> None:
    """Stats, access lines (429 and 503 among them), quiet runs, a traceback, CR and invalid UTF-8, written
    in parts cut mid-line, a rotation and a restart: the same rows in every table, the same totals."""
    shapes = SHAPES  # a 30-digit count among them: stored as NULL, never a failed batch
    # an oddity (CR, invalid UTF-8, NUL) every 97 lines: a read holding invalid UTF-8 goes line by line
    lines = [_line(shapes[(i * 7) % len(shapes)], i % 60, ODDITIES[i // 97 % len(ODDITIES)] if i % 97 == 0 else b"",
                   i % 3 == 0) for i in range(3000)]
    data = b"".join(lines)
    cuts = [len(data) // 5 + 3, len(data) // 2 + 1, (len(data) * 4) // 5 + 7]
    monkeypatch.delenv(ENV, raising=False)
    lane_rows, lane_totals = _daemon_run(tmp_path, "lane", data, cuts)
    assert raw_blocks, "the lane did not run"
    monkeypatch.setenv(ENV, "python")
    raw_blocks.clear()
    python_rows, python_totals = _daemon_run(tmp_path, "python", data, cuts)
    assert not raw_blocks, "DEEPINFER_LANE=python must keep the lane out"
    assert sum(len(rows) for rows in python_rows.values()) > 100
    for table, rows in python_rows.items():
        assert lane_rows[table] == rows, table
    assert lane_totals == python_totals
