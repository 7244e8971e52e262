"""The console script: `deepinfer-agent --help` is typer's own rendering of the app, whatever the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = ("check", "run", "status", "models", "scan", "budget", "advise", "report", "loadtest", "simulate", "demo",
            "rules")
SCRIPT = Path(sys.executable).parent / "deepinfer-agent"


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed next to this interpreter")
@pytest.mark.parametrize("columns", ["100", "60"])
def test_the_console_script_prints_the_apps_help_at_any_width(columns: str) -> None:
    done = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": columns}, check=False)
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == "Usage: deepinfer-agent [OPTIONS] COMMAND [ARGS]..."
    listed = [line.split()[0] for line in lines[lines.index("Commands:") + 1:] if line.startswith("  ")
              and not line.startswith("   ")]
    assert tuple(listed) == COMMANDS
    assert all(len(line) <= min(int(columns), 80) for line in lines)  # click wraps at min(columns, 80) - 2
