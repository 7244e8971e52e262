"""Every command, walked: documented exit codes, human placeholders, `--format` wherever `--json` is, `-` for
standard input and output, NO_COLOR and --color, `status --watch`, and the page at `/`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from agent.bookkeeping import SourceStats
from agent.cli import Color, app, use_color
from agent.sinks.exporter import Snapshot, landing

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "data" / "logs" / "vllm" / "real-club3090-58-enginedead.log"
PYTHON_TYPES = re.compile(r"<(?:list\[|str>|int>|float>|int range>|Path>|bool>|text>?\]|dict)")


def commands() -> list[tuple[str, ...]]:
    """Every runnable command as the words a user types (`rules check`, not `rules`)."""
    out: list[tuple[str, ...]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        if hasattr(command, "commands"):  # a group (typer vendors its own click)
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
        else:
            out.append(path)

    walk(typer.main.get_command(app), ())
    return out


def test_the_walk_finds_every_command() -> None:
    assert {" ".join(c) for c in commands()} == {
        "check", "run", "status", "models", "scan", "budget", "advise", "report", "loadtest", "simulate", "demo",
        "rules check"}


@pytest.mark.parametrize("words", commands(), ids=" ".join)
def test_every_command_documents_its_exit_codes_and_shows_human_placeholders(words: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert re.search(r"\bExits? (?:codes?:? )?0\b|\bexit 0\b", text, re.IGNORECASE), f"{words}: no exit codes"
    # an option's placeholder is its metavar, in words a person types; a positional argument shows typer's own
    # type (typer has no placeholder for one), so only the options are held to it
    options = text[text.index("Options:"):]
    assert not PYTHON_TYPES.search(options), f"{words}: a Python type in --help: {PYTHON_TYPES.search(options)}"
    if "--json" in text:
        assert re.search(r"--format <text\|json[|>]", text), f"{words}: --json without --format text|json"


def test_format_json_and_the_json_alias_print_the_same_document() -> None:
    as_format = runner.invoke(app, ["models", "--format", "json"])
    as_alias = runner.invoke(app, ["models", "--json"])
    assert as_format.exit_code == as_alias.exit_code == 0
    assert as_format.stdout == as_alias.stdout and as_format.stdout.lstrip().startswith("[")


def test_dash_is_standard_input_for_every_log_argument_and_standard_output_for_report() -> None:
    text = LOG.read_bytes()
    for args in (["advise", "--log", "-"], ["report", "--log", "-", "-o", "-", "--format", "md"], ["scan", "-"]):
        result = runner.invoke(app, args, input=text)
        assert result.exit_code == 0, (args, result.output)
        assert "engine" in result.stdout.lower(), args
    from_file = runner.invoke(app, ["report", "--log", str(LOG), "--format", "json"])
    from_stdin = runner.invoke(app, ["report", "--log", "-", "-o", "-", "--format", "json"], input=text)
    assert from_file.stdout.count('"kind"') == from_stdin.stdout.count('"kind"') > 0


def test_report_dash_output_writes_no_file_named_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["report", "--log", str(LOG), "-o", "-"])
    assert result.exit_code == 0 and "Engine died" in result.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("choice", "tty", "env", "expected"), [
    (Color.AUTO, True, {}, True),
    (Color.AUTO, True, {"NO_COLOR": "1"}, False),
    (Color.AUTO, True, {"TERM": "dumb"}, False),
    (Color.AUTO, False, {}, False),
    (Color.ALWAYS, False, {"NO_COLOR": "1"}, True),  # an explicit flag wins over the environment
    (Color.NEVER, True, {}, False),
])
def test_colour_follows_no_color_and_the_flag(choice: Color, tty: bool, env: dict[str, str], expected: bool,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert use_color(choice, tty) is expected


def test_report_color_always_and_never() -> None:
    coloured = runner.invoke(app, ["report", "--log", str(LOG), "--color", "always"])
    plain = runner.invoke(app, ["report", "--log", str(LOG), "--color", "never"])
    assert "\x1b[" in coloured.stdout and "\x1b[" not in plain.stdout


def test_status_watch_refuses_a_bad_interval(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"store: {{path: {tmp_path}/agent.db}}\n")
    result = runner.invoke(app, ["status", "-c", str(config), "--watch", "0"])
    assert result.exit_code == 1 and result.stderr.startswith("error: --watch 0")


def test_the_page_at_root_lists_sources_lines_lag_and_engines_escaped() -> None:
    snap = Snapshot(version="1.2.3", started_at=0.0,
                    totals={("source_lines_total", ("pods",)): 12345.0,
                            ("events_total", ("pods/<b>", "vllm", "oom")): 1.0},
                    sources=[SourceStats("pods", lag_bytes=2048, files=2),
                             SourceStats("gone", up=False, down_reason="missing")])
    page = landing(snap).decode()
    assert "<td>pods</td><td>up</td><td>12,345</td><td>2,048</td><td>2</td><td>pods/&lt;b&gt;</td>" in page
    assert "<td>gone</td><td>down: missing</td><td>0</td>" in page
    assert 'href="/metrics"' in page
