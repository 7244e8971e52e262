"""The file tailer on real files: lines, encodings, envelopes, start positions, errors and self-metrics.

The loop is stepped with `poll(now)` on a made-up clock; nothing sleeps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

from agent.sinks.store import Store
from agent.sources.tailer import FileTailer, TailOptions
from tests.conftest import Follow, FollowFactory

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_partial_line_is_held_until_its_newline(tmp_path: Path, follow: FollowFactory) -> None:
    f = follow()
    log = tmp_path / "a.log"
    log.write_bytes(b"one\ntw")
    assert [line.text for line in f.step(1)] == ["one"]
    with log.open("ab") as out:
        out.write(b"o\r\nthree\n")
    lines = f.step(2)
    assert [(line.text, line.offset) for line in lines] == [("two", 4), ("three", 9)]


def test_quiet_partial_line_is_flushed_and_counted(tmp_path: Path, follow: FollowFactory) -> None:
    f = follow(partial_flush_seconds=5.0)
    log = tmp_path / "a.log"
    log.write_bytes(b"prompt> ")
    assert f.step(0) == []
    assert f.step(4) == []
    assert [line.text for line in f.step(6)] == ["prompt> "]
    with log.open("ab") as out:
        out.write(b"answer\n")
    assert [line.text for line in f.step(7)] == ["answer"]
    assert f.tailer.stats().partial_flushes_total == 1


def test_shutdown_flushes_the_partial_line(tmp_path: Path, store: Store, follow: FollowFactory) -> None:
    f = follow()
    (tmp_path / "a.log").write_bytes(b"done\nhalf")
    f.step(0)
    batch = f.tailer.close(1)
    f.commit(batch)
    assert f.texts() == ["done", "half"]


def test_invalid_utf8_is_replaced_and_counted(tmp_path: Path, follow: FollowFactory) -> None:
    f = follow()
    (tmp_path / "a.log").write_bytes(b"ok \xc3\xa9\nbad \xff\xfe end\n")
    assert [line.text for line in f.step(0)] == ["ok é", "bad \ufffd\ufffd end"]
    assert f.tailer.stats().invalid_utf8_total == 1


def test_giant_line_is_truncated_with_bounded_memory(tmp_path: Path, follow: FollowFactory) -> None:
    f = follow(max_line_bytes=1024)
    log = tmp_path / "a.log"
    with log.open("wb") as out:
        out.write(b"before\n")
        for _ in range(32):  # a 32 MiB line, then a normal one; the cut falls inside a 2-byte character
            out.write(b"x" * 1023 + "é".encode() * (512 * 1024 - 512))
        out.write(b"\nafter\n")
    tracemalloc.start()
    lines = f.step(0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [(line.text[:7], len(line.text), line.truncated) for line in lines] == [
        ("before", 6, False), ("xxxxxxx", 1023, True), ("after", 5, False)]
    assert peak < 8 * 1024 * 1024, f"peak {peak} bytes while reading a 32 MiB line"
    stats = f.tailer.stats()
    assert (stats.truncated_lines_total, stats.invalid_utf8_total) == (1, 0)


def test_docker_json_file_lines_are_unwrapped_and_rejoined(tmp_path: Path, follow: FollowFactory) -> None:
    shutil.copy(FIXTURES / "docker-json.log", tmp_path / "c-json.log")
    f = follow("*-json.log", fmt="docker")
    lines = f.step(0)
    long = "".join(chr(ord("a") + i % 26) for i in range(40000))
    assert [(line.text[:30], line.stream) for line in lines] == [
        ("INFO 05-01 10:00:00 engine sta", "stdout"),
        ("WARNING stderr in between", "stderr"),
        (long[:30], "stdout"),
        ("ERROR torch.OutOfMemoryError: ", "stderr"),
        ("not json at all", None),
    ]
    assert lines[2].text == long
    assert lines[0].ts == pytest.approx(1746093600.123456789)
    assert lines[3].ts == pytest.approx(1746093602 - 7200)
    assert f.tailer.stats().framing_errors_total == 1


def test_docker_split_line_survives_a_crash_between_its_pieces(tmp_path: Path, follow: FollowFactory) -> None:
    rows = (FIXTURES / "docker-json.log").read_text().splitlines(keepends=True)
    log = tmp_path / "c-json.log"
    log.write_text("".join(rows[:3]))  # the first piece of the long line, and stderr after it
    f = follow("*-json.log", fmt="docker")
    f.step(0)
    f.restart()
    with log.open("a") as out:
        out.write("".join(rows[3:]))
    f.step(1)
    texts = Counter(text[:10] for text in f.texts())
    assert texts == Counter({"INFO 05-01": 1, "WARNING st": 1, "abcdefghij": 1, "ERROR torc": 1, "not json a": 1})


def test_cri_partials_are_joined(tmp_path: Path, follow: FollowFactory) -> None:
    shutil.copy(FIXTURES / "cri.log", tmp_path / "0.log")
    f = follow("0.log", fmt="cri")
    lines = f.step(0)
    assert [(line.text, line.stream) for line in lines] == [
        ("INFO engine started", "stdout"),
        ("interleaved stderr line", "stderr"),
        ("first half of a long line that the runtime split in three", "stdout"),
        ("", "stdout"),
        ("garbage that is not CRI", None),
    ]
    assert lines[0].ts == pytest.approx(1746093600.123456789)


def test_first_run_starts_at_the_end_later_files_from_the_start(tmp_path: Path, store: Store) -> None:
    (tmp_path / "old.log").write_bytes(b"history\nmore history\nhalf")
    f = Follow(store, str(tmp_path / "*.log"), TailOptions(start_at="end", rotate_wait_seconds=0))
    assert f.step(0) == []
    with (tmp_path / "old.log").open("ab") as out:
        out.write(b" done\nfresh\n")
    (tmp_path / "new.log").write_bytes(b"new file line\n")
    assert sorted(line.text for line in f.step(1)) == ["fresh", "half done", "new file line"]
    f.restart()
    (tmp_path / "later.log").write_bytes(b"written while down\n")
    assert [line.text for line in f.step(2)] == ["written while down"]


def test_file_that_does_not_exist_yet_is_picked_up(tmp_path: Path, follow: FollowFactory) -> None:
    f = follow("sub/*.log")
    assert f.step(0) == [] and f.tailer.stats().files == 0
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "vllm.log").write_text("hello\n")
    assert [line.text for line in f.step(1)] == ["hello"]


def test_a_broad_glob_does_not_read_rotated_names_twice(tmp_path: Path, follow: FollowFactory) -> None:
    f = follow("*")
    log = tmp_path / "x.log"
    log.write_text("a\nb\n")
    f.step(0)
    log.rename(tmp_path / "x.log.1")
    log.write_text("c\n")
    for now in range(1, 5):
        f.step(now)
    assert sorted(f.texts()) == ["a", "b", "c"]


def test_a_second_rotation_under_a_broad_glob_reads_each_line_once(tmp_path: Path, follow: FollowFactory) -> None:
    """Opening the new `x.log` catches up its rotated siblings, which may resume a retired file that the same
    pass over the glob meets next: it was still taken for retired there (a KeyError stopped every poll)."""
    f = follow("x.log*", rotate_wait_seconds=5.0)
    log = tmp_path / "x.log"
    log.write_text("")
    f.step(0)
    log.write_text("a\nb")
    log.rename(tmp_path / "x.log.0")
    log.write_text("")
    f.step(0)
    f.step(4)
    log.rename(tmp_path / "x.log.1")
    log.write_text("c\n")
    for now in range(5, 12):
        f.step(now)
    assert sorted(f.texts()) == ["a", "b", "c"]


def test_cursor_of_a_deleted_file_expires_after_the_grace_period(
        tmp_path: Path, store: Store, follow: FollowFactory) -> None:
    f = follow(cursor_grace_seconds=100.0)
    log = tmp_path / "a.log"
    log.write_text("a\n")
    f.step(0)
    log.unlink()
    f.step(1)
    f.step(2)  # drained and closed; its cursor is kept for the grace period
    assert any(c.file_key for c in store.cursors("test"))
    f.step(150)
    assert [c for c in store.cursors("test") if c.file_key] == []


def test_backlog_is_read_in_bounded_steps_and_lag_is_reported(tmp_path: Path, store: Store) -> None:
    with (tmp_path / "a.log").open("wb") as out:
        out.write((b"y" * 99 + b"\n") * 100_000)  # 10 MB
    tailer = FileTailer("test", str(tmp_path / "a.log"), TailOptions(start_at="beginning"))
    batch = tailer.poll(0)
    assert batch.more and 0 < len(batch.lines) < 100_000
    assert tailer.stats().lag_bytes == 10_000_000 - tailer.stats().bytes_total
    total = len(batch.lines)
    while batch.more:
        batch = tailer.poll(0)
        total += len(batch.lines)
    assert total == 100_000 and tailer.stats().lag_bytes == 0


PERMISSION_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from agent.sources.tailer import FileTailer, TailOptions
    log = sys.argv[1]
    tailer = FileTailer("test", log, TailOptions(start_at="beginning"))
    denied = tailer.poll(0)
    down = tailer.stats()
    os.chmod(log, 0o644)
    allowed = tailer.poll(1)
    print(json.dumps([len(denied.lines), down.up, down.read_errors_total,
                      [line.text for line in allowed.lines], tailer.stats().up]))
""")


def test_permission_denied_is_reported_and_retried(tmp_path: Path) -> None:
    """As root (which reads anything) the child drops the capabilities that override file modes."""
    log = tmp_path / "a.log"
    log.write_text("secret\n")
    log.chmod(0o000)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
        prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]
    root = Path(__file__).parent.parent.parent
    result = subprocess.run([*prefix, sys.executable, "-c", PERMISSION_SCRIPT, str(log)], capture_output=True,
                            text=True, check=True, cwd=root)
    assert json.loads(result.stdout) == [0, False, 1, ["secret"], True]


def test_copytruncate_between_two_reads_of_one_poll_tears_nothing(
        tmp_path: Path, follow: FollowFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The crash test's lost-and-twice run: a poll read the first 64 KiB chunk of the live file, then
    the writer copytruncated it and wrote it past that point again before the next chunk was read. The
    read went on in the new bytes under the old file key (one line torn at the chunk boundary, the new
    bytes stored twice, once more from the file's new incarnation) and the copy was resumed after them
    (the old bytes in between lost). A read that finds the bytes before it changed must stop there and
    leave the rest to the copy."""
    import agent.sources.tailer as tailer

    def numbered(tag: str, count: int) -> list[str]:  # 101-byte lines: a chunk boundary falls mid-line
        return [f"{tag}-{i:05d} " + "x" * 90 for i in range(count)]

    old, new = numbered("old", 1500), numbered("new", 1000)
    log = tmp_path / "vllm.log"
    log.write_text("".join(t + "\n" for t in old))
    real_pread = os.pread
    rotated: list[int] = []

    def pread(fd: int, length: int, offset: int) -> bytes:
        if offset == tailer.READ_CHUNK_BYTES and length > tailer.NEAR_BYTES and not rotated:
            rotated.append(offset)  # logrotate's copytruncate, and the server writing on, between two reads
            shutil.copyfile(log, tmp_path / "vllm.log.1")
            os.truncate(log, 0)
            with log.open("a") as out:
                out.write("".join(t + "\n" for t in new))
        return real_pread(fd, length, offset)

    f = follow("vllm.log")
    monkeypatch.setattr(tailer.os, "pread", pread)
    f.step(1)
    monkeypatch.undo()
    assert rotated
    f.restart()  # and a crash right after, as in that run
    f.step(2)
    f.step(3)
    assert Counter(f.texts()) == Counter(old + new)


@pytest.mark.parametrize("cut", ["at_a_line_end", "inside_a_line"])
def test_a_file_cut_in_place_below_the_cursor_is_not_read_again(tmp_path: Path, follow: FollowFactory,
                                                                 cut: str) -> None:
    """`truncate -s` of a file being read: the 300 lines it keeps were delivered already, so they are not
    delivered again; the lines written after the cut are, once. (No copy exists: it is no copytruncate.)"""
    f = follow()
    log = tmp_path / "a.log"
    lines = [f"line {i:04d} of the engine log, long enough to pass the fingerprint" for i in range(1000)]
    log.write_text("".join(line + "\n" for line in lines))
    f.step(1)
    keep = sum(len(line) + 1 for line in lines[:300]) + (0 if cut == "at_a_line_end" else 7)
    os.truncate(log, keep)
    f.step(2)  # the cut is seen (inotify wakes the loop at once); the writer goes on after it
    with log.open("a") as out:
        out.write("after the cut 1\nafter the cut 2\n")
    f.step(3)
    f.step(4)
    texts = f.texts()
    # inside a line: the piece of it the cut kept was delivered whole before; reading on from the cut gives
    # the writer's next line as it wrote it
    assert texts == [*lines, "after the cut 1", "after the cut 2"]
    assert f.tailer.stats().truncations_total == 1


def test_copytruncate_still_reads_the_live_file_from_its_start(tmp_path: Path, follow: FollowFactory) -> None:
    f = follow()
    log = tmp_path / "a.log"
    log.write_text("".join(f"old {i:03d} ................................................\n" for i in range(50)))
    f.step(1)
    shutil.copy(log, tmp_path / "a.log.1")  # logrotate's copytruncate: the copy, then the cut to 0
    os.truncate(log, 0)
    with log.open("a") as out:
        out.write("".join(f"new {i:03d} ................................................\n" for i in range(3)))
    f.step(2)
    assert f.texts()[-3:] == [f"new {i:03d} ................................................" for i in range(3)]
    assert len(f.texts()) == 53
