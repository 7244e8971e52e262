"""`deepinfer-agent demo` end to end, as the README's first command: every step through the real CLI."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_the_demo_recommends_the_capacity_bound_and_writes_the_report(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "agent", "demo", "--workdir", str(tmp_path)], capture_output=True,
                          text=True, timeout=240, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "SIMULATED" in out and "budget says 13" in out
    assert "lower max_num_seqs 64 → 13" in out, out
    report = (tmp_path / "report.html").read_text()
    assert "max_num_seqs" in report and "uPlot" in report
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False)
    assert leftover.stdout.strip() == "", "the demo left processes running"


def test_a_rerun_into_the_same_workdir_starts_fresh_and_says_so(tmp_path: Path) -> None:
    """Two runs into one --workdir: the second removes the first's files, so its store, and so its advice and
    report, hold one load test, not two merged."""
    def demo() -> str:
        done = subprocess.run([sys.executable, "-m", "agent", "demo", "--workdir", str(tmp_path)],
                              capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "starts fresh" not in demo()
    second = demo()
    assert f"{tmp_path} held an earlier demo run" in second and "this run starts fresh" in second
    with sqlite3.connect(tmp_path / "agent.db") as db:
        (tests,) = db.execute("SELECT count(DISTINCT run_id) FROM load_steps").fetchone()
    assert tests == 1
