"""The console script answers `deepinfer-agent --help` from a kept copy of typer's text, without typer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from agent import launch


def test_the_kept_help_is_what_typer_prints() -> None:
    # Rendered as a real run does (typer's CliRunner forces its own width). After changing the app's options
    # or a command's first docstring line, regenerate the text with the same command.
    code = "from agent.cli import app; app(prog_name='deepinfer-agent')"
    done = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "100"}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == launch.TOP_HELP


@pytest.mark.parametrize(("argv", "columns", "served"), [
    (["deepinfer-agent", "--help"], "100", True),
    (["/usr/local/bin/deepinfer-agent", "-h"], "80", True),
    (["deepinfer-agent", "--help"], "79", False),  # click wraps narrower: typer renders it
    (["deepinfer-agent", "scan", "--help"], "100", False),
    (["deepinfer-agent", "--version"], "100", False),
    (["python -m agent", "--help"], "100", False),  # another program name in the usage line
])
def test_the_kept_help_is_served_only_where_it_is_exact(monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                        columns: str, served: bool) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    assert launch._static_help_applies(argv) is served
    monkeypatch.setenv("_DEEPINFER_AGENT_COMPLETE", "bash_source")  # shell completion is typer's
    assert launch._static_help_applies(argv) is False


@pytest.mark.parametrize("env", [{"COLUMNS": "120"}, {"COLUMNS": "50", "LINES": "20"}, {"COLUMNS": "x"}, {}])
def test_terminal_columns_is_shutils(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert launch.terminal_columns() == shutil.get_terminal_size().columns


def test_help_imports_no_typer() -> None:
    code = ("import sys; sys.argv = ['deepinfer-agent', '--help']; from agent.launch import main; main(); "
            "assert 'typer' not in sys.modules and 'click' not in sys.modules, 'imported typer'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "100"}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == launch.TOP_HELP
