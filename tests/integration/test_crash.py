"""Crash test with real processes: the real `deepinfer-agent run`, SIGKILLed again and again while a writer
appends 100,000 numbered lines and rotates the log 24 times the way logrotate does (shifting `.1` to
`.2` …, alternating rename + create and copytruncate), some rotations while the agent is down.

Afterwards the store must hold exactly one event per written line, and /metrics must count them all.
Every line is an event (a 503 access line without a time stamp, or a vLLM deadline warning stamped to
the second), so the store's events say which lines arrived and how often — nothing else is needed to
check delivery. Waiting is on conditions with deadlines that stretch while the agent makes progress:
a loaded machine is slow, not wrong. The agent is ready (metrics answer, first cursor committed)
before the writer starts, so the first run never meets rotations it did not see happen.

The database sits next to the log directory's parent on purpose, in the same filesystem: when the
tailer once opened every file in a directory to look for copytruncate copies, closing them dropped
SQLite's POSIX locks.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.blackbox import ROOT, Agent, lost_and_duplicated
from tests.integration.test_daemon import wait_for

LINES = 100_000
EVERY = 4_000
KILLS = 10
pytestmark = pytest.mark.integration


def _rotations(progress: Path) -> int:
    with contextlib.suppress(OSError, ValueError):
        return int(progress.read_text())
    return 0


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("CRASH_SCHEDULE", "20251129")))  # vary by hand for more schedules
    agent = Agent(tmp_path, "vllm.log", rotate_wait_seconds=1.0)
    progress = tmp_path / "progress"
    agent.start(timeout=120)
    writer = subprocess.Popen([sys.executable, "-m", "tests.integration.rotating_writer", str(agent.log), str(LINES),
                               str(EVERY), str(progress)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    kills = shifted_while_down = 0
    started = time.monotonic()
    try:
        while writer.poll() is None or kills < KILLS:
            time.sleep(rng.uniform(0.05, 0.6))
            assert agent.proc is not None and agent.proc.poll() is None, agent.stderr.read_text()[-2000:]
            agent.kill()
            kills += 1
            if kills % 3 == 1 and writer.poll() is None:  # let logrotate shift files while the agent is down
                seen = _rotations(progress)
                with contextlib.suppress(AssertionError):
                    wait_for("a rotation", lambda seen=seen: _rotations(progress) > seen or writer.poll() is not None,
                             timeout=60)
                shifted_while_down += _rotations(progress) > seen
            agent.start(timeout=120)
        rotations = int(writer.communicate(timeout=120)[0])
        written_at = time.monotonic() - started
        numbers = agent.settle(LINES, timeout=60)
        lost, duplicated = lost_and_duplicated(numbers, range(LINES))
        print(f"\ncrash test: written {LINES}, stored {sum(numbers.values())}, lost {lost}, duplicated {duplicated}, "
              f"kills {kills}, rotations {rotations} ({shifted_while_down} while the agent was down); "
              f"writes and kills {written_at:.0f} s, caught up {time.monotonic() - started:.0f} s")
        assert kills >= KILLS and rotations >= 20 and shifted_while_down >= 1
        assert (lost, duplicated) == (0, 0)
        wait_for("every event counted on /metrics",
                 lambda: agent.metric("deepinfer_events_total") == LINES, timeout=30)
    finally:  # never leave a process behind, whatever failed
        writer.kill()
        writer.wait()
        agent.kill()
