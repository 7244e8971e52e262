"""`scan` locates records by line: `path:LINE` in the text's notable events, `line` next to `offset` in JSON
lines (the physical line of a Docker/CRI record's first piece), the same with `--jobs N`; and its progress
bar goes to a terminal's stderr for large files only, leaving stdout as it was."""

from __future__ import annotations

import io
import json
import random
import re
from datetime import timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.offline.parallel import chunks, scan_path
from agent.records import Server
from agent.views.scan_progress import PROGRESS_MIN_BYTES, progress_bar, wants_progress
from agent.views.scan_text import JsonlWriter

from .conftest import LOGS
from .test_scan_stream import FIXTURES, _both, _straddling_log

runner = CliRunner()


def _line_at(data: bytes, offset: int) -> int:
    return data[:offset].count(b"\n") + 1


def _jsonl(path: Path, jobs: int = 1, progress: object = None) -> str:
    out = io.StringIO()
    writer = JsonlWriter(out)
    scan_path(path, writer, Server.AUTO, timezone.utc, jobs, writer, None, min_bytes=1, probe=3,
              progress=progress)  # type: ignore[arg-type]
    writer.flush()
    return out.getvalue()


def _assert_lines(path: Path, jsonl: str) -> int:
    """Every record that has an offset has `line`, right after it, naming the line that offset starts."""
    data = path.read_bytes()
    located = 0
    for text in jsonl.splitlines():
        record = json.loads(text)
        if record.get("offset") is None:
            continue
        keys = list(record)
        assert keys[keys.index("offset") + 1] == "line", text
        assert record["line"] == _line_at(data, record["offset"]), text
        located += 1
    return located


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(LOGS)))
def test_jsonl_line_is_the_line_of_the_offset(tmp_path: Path, path: Path) -> None:
    log = tmp_path / path.name
    log.write_bytes(b"\n\n" + path.read_bytes())  # blank lines before the first count too
    _assert_lines(log, _jsonl(log))


def test_docker_record_is_located_at_its_first_piece() -> None:
    path = LOGS / "vllm/v1_0.10.docker.log"
    jsonl = _jsonl(path)
    assert _assert_lines(path, jsonl)
    oom = next(json.loads(t) for t in jsonl.splitlines() if '"kind": "oom"' in t)
    first = path.read_bytes().splitlines()[oom["line"] - 1]
    assert b"OutOfMemoryError" in first or b"Traceback" in first or b"fatal error" in first


@pytest.mark.parametrize("trailing", ["\n", ""])
def test_jobs_give_the_same_lines(tmp_path: Path, trailing: str) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("\n\n" + _straddling_log(600, random.Random(7)).rstrip("\n") + trailing, encoding="utf-8")
    one = _jsonl(log, 1)
    assert _assert_lines(log, one) > 200
    assert len(chunks(str(log), log.stat().st_size, 3, 1)) == 3
    assert _jsonl(log, 3) == one
    assert _both(log, 3) == _both(log, 1)  # the text's notable events too


def test_text_names_path_and_line(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_bytes((LOGS / "vllm/v1_0.10.log").read_bytes())
    lines = log.read_bytes().splitlines()
    for jobs in ("1", "3"):
        out = runner.invoke(app, ["scan", "--jobs", jobs, str(log)]).output
        where = re.findall(rf"\[{re.escape(str(log))}:(\d+)\]", out)
        assert where, out
        assert "13" in where  # the OOM's traceback starts at line 13 ("EngineCore encountered a fatal error")
        assert b"fatal error" in lines[12]
        assert all(1 <= int(n) <= len(lines) for n in where)


def test_stdin_records_have_lines() -> None:
    text = (LOGS / "tgi/v3.log").read_text(encoding="utf-8")
    result = runner.invoke(app, ["scan", "--format", "jsonl", "--server", "tgi", "-"], input=text)
    data = text.encode()
    records = [json.loads(t) for t in result.output.splitlines()]
    assert any(r.get("line") for r in records)
    for r in records:  # a pipe cannot be read again: the last lines' starts are remembered instead
        if r.get("offset") is not None:
            assert r["line"] == _line_at(data, r["offset"])


# ---- progress -------------------------------------------------------------------------------------

def test_progress_only_on_a_terminal_for_a_large_file() -> None:
    big = PROGRESS_MIN_BYTES
    assert wants_progress(big, tty=True)
    assert not wants_progress(big, tty=False)
    assert not wants_progress(big - 1, tty=True)
    assert not wants_progress(None, tty=True)  # stdin, a pipe
    assert wants_progress(10, tty=True, min_bytes=10)


def test_no_bar_when_not_wanted() -> None:
    err = io.StringIO()  # not a terminal
    with progress_bar("x", 1 << 40, err) as progress:
        assert progress is None
    with progress_bar("x", 100, err, tty=True) as progress:  # small
        assert progress is None
    with progress_bar("-", None, err, tty=True) as progress:
        assert progress is None
    assert err.getvalue() == ""


@pytest.mark.parametrize("jobs", [1, 3])
def test_bar_draws_on_stderr_and_stdout_is_unchanged(tmp_path: Path, jobs: int) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(_straddling_log(2000, random.Random(3)), encoding="utf-8")
    size = log.stat().st_size
    told: list[int] = []
    err = io.StringIO()
    with progress_bar(str(log), size, err, tty=True, min_bytes=1) as bar:
        assert bar is not None

        def progress(done: int) -> None:
            told.append(done)
            bar(done)
        with_bar = _jsonl(log, jobs, progress)
    assert with_bar == _jsonl(log, jobs)
    assert told and told == sorted(told) and told[-1] == size
    assert "vllm.log" in err.getvalue()  # drawn on the stream it was given


def test_cli_without_a_terminal_prints_no_bar(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_bytes((LOGS / "vllm/v1_0.10.log").read_bytes())
    result = runner.invoke(app, ["scan", "--format", "jsonl", str(log)])
    assert result.exit_code == 0
    assert all(line.startswith("{") for line in result.output.splitlines())
