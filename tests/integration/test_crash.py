"""Crash test with real processes: SIGKILL the tailer again and again while logs are written and rotated.

A writer appends 200,000 numbered lines across 25 rotations (rename + create and copytruncate); the
tailer process (tests/integration/tail_driver.py, the daemon's source loop in miniature) is killed with
SIGKILL at random moments at least 10 times and restarted. Afterwards the store must hold every line
number exactly once. Waiting here is on the processes (`wait(timeout)`), the only clock a real crash has.

The database sits in the log directory on purpose: when the tailer once opened every file there to look
for copytruncate copies, closing them dropped SQLite's POSIX locks on it, and this test (under CPU load)
caught readers seeing "database disk image is malformed".
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from agent.sinks.store import Store

LINES = 200_000
EVERY = 8_000
ROOT = Path(__file__).parent.parent.parent


def start_driver(db: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.integration.tail_driver", str(db), str(log)], cwd=ROOT)


def stored_numbers(db: Path) -> Counter[int]:
    with Store.open(db) as store:
        return Counter(int(line.text[1:7]) for line in store.lines("crash"))


@pytest.mark.integration
def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    log, db = tmp_path / "app.log", tmp_path / "agent.db"
    rng = random.Random(int(os.environ.get("CRASH_SEED", "20251129")))  # vary by hand for more schedules
    driver = start_driver(db, log)
    writer = subprocess.Popen([sys.executable, "-m", "tests.integration.rotating_writer", str(log), str(LINES),
                               str(EVERY)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        kills = 0
        while writer.poll() is None or kills < 10:
            with contextlib.suppress(subprocess.TimeoutExpired):
                driver.wait(timeout=rng.uniform(0.05, 0.5))
            assert driver.returncode in (None, -signal.SIGKILL), "the tailer died on its own"
            driver.send_signal(signal.SIGKILL)
            driver.wait()
            kills += 1
            driver = start_driver(db, log)
        rotations = int(writer.communicate()[0])

        deadline = time.monotonic() + 60
        numbers = stored_numbers(db)
        while len(numbers) < LINES and time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                driver.wait(timeout=0.5)
            numbers = stored_numbers(db)
    finally:  # never leave a process behind, whatever failed
        writer.kill()
        writer.wait()
        driver.send_signal(signal.SIGTERM)
        driver.wait(timeout=10)

    lost = LINES - len(numbers)
    duplicated = sum(n - 1 for n in numbers.values())
    print(f"\ncrash test: written {LINES}, delivered {sum(numbers.values())}, lost {lost}, "
          f"duplicated {duplicated}, kills {kills}, rotations {rotations}")
    assert kills >= 10 and rotations >= 20
    assert set(numbers) == set(range(LINES))
    assert duplicated == 0
