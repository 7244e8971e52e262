"""The console script's entry point: `deepinfer-agent --help` answered without importing typer.

Importing typer (and click) is most of what `--help` used to cost (~0.15 s of ~0.16 s). The top-level help
does not change between runs, so its text is kept here, exactly as typer renders it at the usual width
(tests/unit/test_launch.py renders it again and fails when it drifts), and printed when the output would be
the same: the program is called `deepinfer-agent`, the argument is `--help` or `-h` alone, no shell
completion is asked for, and the terminal is at least 80 columns wide (click wraps at min(columns, 80) - 2).
Everything else goes to the CLI (`agent/cli.py`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

PROG = "deepinfer-agent"
HELP_COLUMNS = 80  # click's widest help: at this many columns or more, the text below is what it prints

TOP_HELP = """Usage: deepinfer-agent [OPTIONS] COMMAND [ARGS]...

  Watch GPU inference nodes; size the KV-cache budget; explain OOM, queueing,
  timeouts and 429/503.

Options:
  -V, --version         Print the version and exit.
  --install-completion  Install completion for the current shell.
  --show-completion     Show completion for the current shell, to copy it or
                        customize the installation.
  -h, --help            Show this message and exit.

Commands:
  check     Validate a config file: print every problem (file:line:...
  run       Run the agent: follow logs, poll NVML and engines, store...
  status    What the running agent sees now: sources, load vs budget,...
  models    List the model presets with the per-token KV size (bf16) each...
  scan      Classify saved logs: OOM, preemption, queueing, refusals,...
  budget    Compute the KV-cache budget and max concurrency, showing...
  advise    Judge the rules over a past window of the store, or over...
  report    Post-incident summary: verdict, timeline, peaks vs capacity,...
  loadtest  Step-up load test: raise concurrency level by level, watch...
  simulate  Run a SIMULATED vLLM-like engine (no GPU, no model): paged-KV...
  demo      The whole product in about a minute, no GPU: an engine with...
  rules     Check the advisor's rule files.
"""


DEBUG_VARIABLE = "DEEPINFER_DEBUG"  # set (to anything but 0) for a traceback instead of one `error:` line


def main() -> None:
    if _static_help_applies(sys.argv):
        sys.stdout.write(TOP_HELP)
        sys.stdout.flush()
        return
    sys.exit(guarded())


def guarded(prog_name: str = PROG) -> int:
    """Run the CLI; whatever escapes it ends as one `error:` line on stderr and an exit code, never a
    traceback (unless DEEPINFER_DEBUG is set): a usage mistake exits 2 naming the option, anything the
    commands did not foresee exits 1 with its type and message, Ctrl-C 130, a closed stdout quietly."""
    import typer

    from agent.cli import app

    try:
        code = app(prog_name=prog_name, standalone_mode=False)
        return code if isinstance(code, int) else 0
    except (typer.Abort, KeyboardInterrupt):
        return 130
    except typer.TyperException as exc:  # click's errors (typer's copy): a usage mistake exits 2
        code = int(getattr(exc, "exit_code", 1))
        ctx = getattr(exc, "ctx", None)
        see = f" (see {ctx.command_path} --help)" if code == 2 and ctx is not None else ""
        format_message = getattr(exc, "format_message", None)
        return _error(f"{format_message() if format_message else exc}{see}", code)
    except BrokenPipeError:  # `| head` closed the pipe: nothing left to say to anyone
        with contextlib.suppress(OSError):
            sys.stdout = Path(os.devnull).open("w")  # noqa: SIM115 - so the interpreter's flush at exit is quiet
        return 141
    except Exception as exc:
        if os.environ.get(DEBUG_VARIABLE, "0") not in ("", "0"):
            raise
        return _error(f"{type(exc).__name__}: {exc} (unexpected; {DEBUG_VARIABLE}=1 shows where)", 1)
    except MemoryError:
        return _error("out of memory", 1)


def _error(message: str, code: int) -> int:
    from agent.inert import printable

    sys.stderr.write(f"error: {printable(message, keep_newlines=False)[:2000]}\n")
    return code


def _static_help_applies(argv: list[str]) -> bool:
    return (len(argv) == 2 and argv[1] in ("--help", "-h") and os.path.basename(argv[0]) == PROG  # noqa: PTH119 (pathlib: +5 ms)
            and not any(name.startswith("_DEEPINFER_AGENT_COMPLETE") for name in os.environ)
            and terminal_columns() >= HELP_COLUMNS)


def terminal_columns() -> int:
    """`shutil.get_terminal_size().columns` (what click wraps help to), without importing shutil."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    try:
        lines = int(os.environ["LINES"])
    except (KeyError, ValueError):
        lines = 0
    if columns <= 0 or lines <= 0:
        try:
            size = os.get_terminal_size(sys.__stdout__.fileno())  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            size = os.terminal_size((80, 24))
        if columns <= 0:
            columns = size.columns or 80
    return columns
