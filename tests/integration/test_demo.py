"""`deepinfer-agent demo` end to end, as the README's first command: every step through the real CLI."""

from __future__ import annotations

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
