"""Black-box tests: the real `run` command, real files, real rotations and signals; counted in the store
and on /metrics (tests/integration/blackbox.py). Each reproduces a way lines were lost or stored twice."""

from __future__ import annotations

import contextlib
import gzip
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.offline.saved import scan_stream
from agent.records import Event, Server, ServerStats
from tests.integration.blackbox import ROOT, Agent, append, line, lost_and_duplicated
from tests.integration.test_daemon import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    made: list[Agent] = []
    yield made
    for a in made:
        a.kill()


def node(tmp_path: Path, agents: list[Agent], pattern: str = "vllm.log", port: int = 0, **source: object) -> Agent:
    a = Agent(tmp_path, pattern, port, **source)
    agents.append(a)
    return a


def half_line(path: Path, n: int) -> None:
    """The first half of line n, no newline yet: the agent holds it and its cursor stays before it."""
    with path.open("a") as handle:
        handle.write(line(n)[:30])


def finish_line(path: Path, n: int) -> None:
    with path.open("a") as handle:
        handle.write(line(n)[30:] + "\n")


def assert_exactly_once(a: Agent, written: list[int]) -> None:
    numbers = a.settle(len(set(written)))
    lost, duplicated = lost_and_duplicated(numbers, written)
    assert (lost, duplicated) == (0, 0), f"lost {lost}, duplicated {duplicated} of {len(written)}"
    wait_for("the 503 counter on /metrics", lambda: a.metric("deepinfer_events_total", kind="http_503")
             == len(written))


def test_a_rotated_file_shifted_again_while_the_agent_is_down_is_finished(tmp_path: Path,
                                                                          agents: list[Agent]) -> None:
    a = node(tmp_path, agents, rotate_wait_seconds=60)
    a.start()
    append(a.log, range(100))
    half_line(a.log, 100)
    a.settle(100)
    a.kill()
    a.log.rename(a.logs / "vllm.log.1")  # rotated while down: found again by inode, drained...
    append(a.log, range(200, 300))
    a.start()
    a.settle(200)
    a.kill()  # ...and killed before it was finished: now remembered as vllm.log.1
    rotated = a.logs / "vllm.log.1"
    finish_line(rotated, 100)
    append(rotated, range(101, 150))
    rotated.rename(a.logs / "vllm.log.2")  # logrotate shifts .1 to .2 while the agent is down
    a.log.rename(rotated)
    append(a.log, range(300, 350))
    a.start()
    assert_exactly_once(a, [*range(150), *range(200, 350)])


def test_a_glob_naming_rotated_files_does_not_read_a_copytruncate_copy_again(tmp_path: Path,
                                                                            agents: list[Agent]) -> None:
    a = node(tmp_path, agents, "*")
    a.start()
    append(a.log, range(1000))
    a.settle(1000)
    shutil.copyfile(a.log, a.logs / "vllm.log.1")
    wait_for("a few polls", lambda: a.metric("deepinfer_source_lines_total") is not None)
    os.truncate(a.log, 0)
    append(a.log, range(1000, 2000))
    assert_exactly_once(a, list(range(2000)))


def test_truncated_in_place_and_regrown_past_the_cursor_while_down(tmp_path: Path, agents: list[Agent]) -> None:
    header = "".join(f"(APIServer pid=851) INFO: vLLM API server version 0.11.0 banner line {i}\n" for i in range(4))
    a = node(tmp_path, agents)
    a.start()
    a.log.write_text(header)
    append(a.log, range(500))
    a.settle(500)
    a.kill()
    a.log.write_text(header)  # truncated in place (same inode, same first bytes) and written again
    append(a.log, range(1000, 1700))
    a.start()
    assert_exactly_once(a, [*range(500), *range(1000, 1700)])
    assert (a.metric("deepinfer_source_truncations_total") or 0) >= 1


def test_a_file_rotated_and_compressed_before_it_was_finished_is_read_from_the_archive(
        tmp_path: Path, agents: list[Agent]) -> None:
    a = node(tmp_path, agents)
    a.start()
    append(a.log, range(100))
    half_line(a.log, 100)
    a.settle(100)
    a.kill()
    finish_line(a.log, 100)
    append(a.log, range(101, 150))
    rotated = a.logs / "vllm.log.1"
    a.log.rename(rotated)  # logrotate: rename, create, compress (no delaycompress)
    append(a.log, range(200, 250))
    with rotated.open("rb") as raw, gzip.open(a.logs / "vllm.log.1.gz", "wb") as packed:
        shutil.copyfileobj(raw, packed)
    rotated.unlink()
    a.start()
    assert_exactly_once(a, [*range(150), *range(200, 250)])



def test_identical_lines_in_successive_rotated_files_are_all_stored(tmp_path: Path, agents: list[Agent]) -> None:
    """1,000 identical 503 lines, rotated by rename, 1,000 more: the same offsets in another file are other
    lines. Each line is counted through a numbered twin with the same length at the same offset."""
    a = node(tmp_path, agents)
    a.start()
    same = line(0)
    for round_ in range(3):
        with a.log.open("a") as handle:
            handle.write((same + "\n") * 1000)
        wait_for(f"round {round_}", lambda r=round_: a.metric("deepinfer_events_total", kind="http_503")
                 == 1000 * (r + 1))
        a.log.rename(a.logs / f"vllm.log.{round_ + 1}")
    assert a.query("SELECT count(*) FROM events WHERE kind = 'http_503'")[0][0] == 3000


def test_second_stamped_lines_of_two_files_started_in_one_second_are_all_stored(tmp_path: Path,
                                                                                agents: list[Agent]) -> None:
    a = node(tmp_path, agents)
    a.start()
    stamped = ("(APIServer pid=851) WARNING 11-29 09:00:01 [serving.py:88] deadline exceeded, "
               "generated_tokens=7\n")
    for round_ in range(2):
        with a.log.open("a") as handle:
            handle.write(stamped * 50)
        wait_for(f"round {round_}", lambda r=round_: a.metric("deepinfer_events_total", kind="deadline_exceeded")
                 == 50 * (r + 1))
        if round_ == 0:
            a.log.rename(a.logs / "vllm.log.1")  # the next file starts within the same second


def test_lines_held_behind_a_traceback_are_stored_once_across_a_rename_and_a_kill(tmp_path: Path,
                                                                                 agents: list[Agent]) -> None:
    a = node(tmp_path, agents)
    a.start()
    with a.log.open("a") as handle:  # a traceback opens (held back until it ends), other lines go on
        handle.write("(EngineCore_DP0 pid=9) ERROR 11-29 09:00:01 [core.py:710] EngineCore failed\n"
                     "Traceback (most recent call last):\n")
    append(a.log, range(20))
    a.settle(20)
    a.kill()
    a.log.rename(a.logs / "vllm.log.1")  # renamed while the agent is down
    append(a.log, range(20, 30))
    a.start()
    assert_exactly_once(a, list(range(30)))

# --- silent misconfiguration and faults: each one visible -----------------------------------------


def _status(a: Agent) -> str:
    done = subprocess.run([sys.executable, "-m", "agent", "status", "-c", str(a.config)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    return done.stdout


@pytest.mark.parametrize(("pattern", "prepare", "words"), [
    ("missing.log", lambda logs: None, "does not exist"),
    ("adir", lambda logs: (logs / "adir").mkdir(), "is a directory"),
    ("dangling.log", lambda logs: (logs / "dangling.log").symlink_to(logs / "nowhere.log"), "dangling symlink"),
    ("../state/*", lambda logs: None, "the agent's own store"),
])
def test_a_source_that_cannot_be_read_is_down_logged_and_explained(
        tmp_path: Path, agents: list[Agent], pattern: str, prepare: Callable[[Path], object], words: str) -> None:
    with socket.socket() as probe:  # a fixed port, so that `status` finds the agent from the config
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    a = node(tmp_path, agents, pattern, port)
    prepare(a.logs)
    a.start()
    wait_for("source_up 0", lambda: a.metric("deepinfer_source_up", source="vllm") == 0)
    text = a.metrics_text()
    assert any(row.startswith("deepinfer_source_down_info{") and words in row for row in text.splitlines()), text
    warnings = [row for row in a.stderr.read_text().splitlines() if " WARNING " in row and "source vllm" in row]
    assert len(warnings) == 1 and words in warnings[0]
    assert words in _status(a)
    assert a.metric("deepinfer_events_total") in (None, 0.0)  # the store never read itself


def test_idle_connections_to_the_metrics_port_do_not_blind_the_agent(tmp_path: Path, agents: list[Agent]) -> None:
    a = node(tmp_path, agents, "*.log")
    a.limit_files = (96, 96)  # a small descriptor budget, so the test needs few sockets
    a.start()
    idle = []
    try:
        for _ in range(150):
            with contextlib.suppress(OSError):
                idle.append(socket.create_connection(("127.0.0.1", a.port), timeout=5))
        append(a.logs / "new.log", range(10))  # a file created while the port is flooded
        numbers = a.settle(10)
        assert set(numbers) == set(range(10))
        wait_for("/metrics answering", lambda: a.metric("deepinfer_source_up", source="vllm") == 1)
    finally:
        for sock in idle:
            sock.close()


def test_the_soft_open_file_limit_is_raised_to_the_hard_limit(tmp_path: Path, agents: list[Agent]) -> None:
    a = node(tmp_path, agents)
    a.limit_files = (200, 4000)
    a.start()
    assert a.proc is not None
    limits = Path(f"/proc/{a.proc.pid}/limits").read_text()
    row = next(r for r in limits.splitlines() if r.startswith("Max open files"))
    assert row.split()[3:5] == ["4000", "4000"]


def test_sighup_with_a_new_metrics_port_moves_the_server(tmp_path: Path, agents: list[Agent]) -> None:
    a = node(tmp_path, agents)
    a.start()
    old = a.port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        new = probe.getsockname()[1]
    a.config.write_text(a.config.read_text().replace("port: 0", f"port: {new}"))
    assert a.proc is not None
    a.proc.send_signal(signal.SIGHUP)
    a.port = new
    wait_for("/metrics on the new port", lambda: a.metric("deepinfer_config_last_reload_success") == 1)

    def old_port_closed() -> bool:
        try:
            socket.create_connection(("127.0.0.1", old), timeout=2).close()
        except OSError:
            return True
        return False

    wait_for("the old port to close", old_port_closed)
    assert "moved by a config reload" in a.stderr.read_text()


def test_no_secret_of_a_cuda_error_reaches_the_store(tmp_path: Path, agents: list[Agent]) -> None:
    a = node(tmp_path, agents)
    a.start()
    with a.log.open("a") as handle:
        handle.write("(EngineCore_DP0 pid=9) ERROR 11-29 09:00:01 [core.py:710] RuntimeError: CUDA error: invalid "
                     "argument Bearer zqtokenzqtoken 'zqsecret prompt'\n")
    wait_for("the cuda_error event", lambda: a.metric("deepinfer_events_total", kind="cuda_error") == 1)
    stored = a.query("SELECT message, fields FROM events")
    assert stored and "zq" not in repr(stored)


def test_the_store_is_created_private_under_umask_000(tmp_path: Path, agents: list[Agent]) -> None:
    a = node(tmp_path, agents)
    a.umask = 0
    a.start()
    assert (a.db.parent.stat().st_mode & 0o777, a.db.stat().st_mode & 0o777) == (0o750, 0o640)


def test_a_symlink_planted_at_the_store_path_is_refused(tmp_path: Path, agents: list[Agent]) -> None:
    a = node(tmp_path, agents)
    a.db.parent.mkdir()
    target = tmp_path / "elsewhere.db"
    a.db.symlink_to(target)
    with pytest.raises(pytest.fail.Exception, match="first cursor"):
        a.start(timeout=5)  # serves /metrics, but never opens the store: no cursor is ever committed
    wait_for("store_up 0", lambda: a.metric("deepinfer_store_up") == 0)
    assert "symlink" in a.stderr.read_text() and "Traceback" not in a.stderr.read_text()
    assert not target.exists()


def _ragged_log(seed: int) -> bytes:
    """A busy vLLM log: stats lines (a queue forming and draining), access lines answering 200 and 503,
    benign INFO lines, a CRLF line, a line of invalid UTF-8, a CUDA OOM; ~3,000 lines."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for n in range(3000):
        second = f"11-29 10:{n // 60 % 60:02d}:{n % 60:02d}"
        roll = rng.random()
        if roll < 0.45:
            waiting = rng.choice([0, 0, 0, 1, 4])
            out.append(f"(APIServer pid=851) INFO {second} [loggers.py:123] Engine 000: Avg prompt throughput: "
                       f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(0, 3000):.1f} "
                       f"tokens/s, Running: {rng.randint(0, 64)} reqs, Waiting: {waiting} reqs, GPU KV cache usage: "
                       f"{rng.uniform(0, 100):.1f}%, Prefix cache hit rate: {rng.uniform(0, 100):.1f}%".encode())
        elif roll < 0.90:
            out.append(line(n).replace("503 Service Unavailable", "200 OK").encode() if rng.random() < 0.9
                       else line(n).encode())
        elif roll < 0.97:
            out.append(f"(APIServer pid=851) INFO {second} [launcher.py:37] Route: /v1/models, Methods: GET".encode())
        elif roll < 0.98:
            out.append(line(n).encode() + b"\r")
        elif roll < 0.99:
            out.append(b"(APIServer pid=851) INFO " + second.encode() + b" [x.py:1] caf\xe9 \xff bytes")
        else:
            out.append(f"(EngineCore_DP0 pid=990) ERROR {second} [core.py:710] torch.OutOfMemoryError: CUDA out of "
                       f"memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB.".encode())
    return b"\n".join(out) + b"\n"


def test_the_daemon_stores_what_scan_finds_in_a_log_written_in_ragged_pieces(tmp_path: Path,
                                                                             agents: list[Agent]) -> None:
    """The daemon reads a plain file in runs of whole lines (split and decoded at once) and parses each run in
    one call; written in pieces that cut lines anywhere, the log must give the store exactly the samples and
    events `scan` finds in the finished file, line by line, nothing lost or doubled."""
    data = _ragged_log(7)
    a = node(tmp_path, agents)
    a.log.write_bytes(b"")
    a.start()
    rng = random.Random(8)
    with a.log.open("ab") as handle:
        at = 0
        while at < len(data):
            step = rng.choice([1, 7, 100, 4096, 9000, 70000])
            handle.write(data[at:at + step])
            handle.flush()
            at += step
            time.sleep(rng.choice([0.0, 0.0, 0.01]))
    with a.log.open("rb") as handle:
        found = scan_stream(handle, str(a.log), Server.VLLM, a.log.stat().st_mtime).records
    samples = sorted((r.offset, r.running, r.waiting, r.kv_usage_ratio) for r in found if isinstance(r, ServerStats))
    events = sorted((r.offset, r.kind.value) for r in found if isinstance(r, Event))
    assert len(samples) > 1000 and {kind for _, kind in events} >= {"http_503", "pending", "oom"}

    def stored() -> tuple[list[Any], list[Any]]:
        return (sorted(tuple(r) for r in a.query("SELECT offset, running, waiting, kv_usage_ratio FROM server_stats")),
                sorted(tuple(r) for r in a.query("SELECT offset, kind FROM events")))

    deadline = time.monotonic() + 60
    while (got := stored()) != (samples, events) and time.monotonic() < deadline:
        time.sleep(0.2)
    got_samples, got_events = got
    assert set(samples) - set(got_samples) == set() and set(events) - set(got_events) == set(), "lost"
    assert (got_samples, got_events) == (samples, events), "stored twice or wrongly"
