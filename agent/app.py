"""The typer app every command registers on, and what the commands share: output format, colour, failing.

agent/cli.py and agent/commands/* import it (and not each other), so no module of the CLI imports one that
imports it back.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from agent import __version__


def _new_app() -> typer.Typer:
    """The app's settings in one place: the whole app and the one-command apps of `app_for` are alike."""
    return typer.Typer(
        name="deepinfer-agent",
        help="Watch GPU inference nodes; size the KV-cache budget; explain OOM, queueing, timeouts and 429/503.",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
        rich_markup_mode=None,  # click's plain help: rendering it with rich would import rich (most of `--help`'s time)
    )


app = _new_app()


def app_for(whole: typer.Typer, args: list[str]) -> typer.Typer:
    """The app to run `deepinfer-agent ARGS` with: for `COMMAND …`, one that holds only that command of the
    `whole` app (and the app's own options), because typer builds every registered command's click command,
    inspecting each function's signature, before it parses anything; anything else (no arguments, an option
    first, a group such as `rules`, a misspelt name) gets the whole app. Either way typer parses and renders
    the help."""
    for info in whole.registered_commands:
        if info.callback is not None and args[:1] == [info.name or typer.main.get_command_name(info.callback.__name__)]:
            one = _new_app()
            one.registered_callback = whole.registered_callback
            one.registered_commands.append(info)
            return one
    return whole


NOT_RUNNING = 3  # `status` when nothing answers on the metrics port (as `systemctl is-active` says inactive)


class Output(str, Enum):
    """`--format` of a command that prints data: text for people, json for programs."""

    TEXT = "text"
    JSON = "json"


FORMAT_HELP = "text (for people) or json (one JSON document, for programs)."
JSON_ALIAS_HELP = "Same as --format json."


class Color(str, Enum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


def use_color(choice: Color, stream_is_tty: bool) -> bool:
    """Colour or not: `--color always|never` decides; `auto` colours a terminal unless NO_COLOR is set
    (no-color.org: any non-empty value) or TERM is `dumb`."""
    if choice != Color.AUTO:  # typer may hand over the enum's value: compare by value
        return bool(choice == Color.ALWAYS)
    import os

    return stream_is_tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def write_output(text: str, output: Path | None) -> None:
    """Print `text`, or write it to `output`; `-` is standard output, as for every file argument."""
    if output is None or str(output) == "-":
        typer.echo(text, nl=False, color=True)  # colour was decided already (use_color): click must not strip it
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"{output}: cannot write: {exc.strerror or exc}")


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"deepinfer-agent {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """deepinfer-agent: KV-cache budgets and inference-server incident classification."""
