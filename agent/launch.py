"""The console script's entry point: the CLI (`agent/cli.py`), with every error ending as one `error:` line.

typer renders all help, `deepinfer-agent --help` included.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

PROG = "deepinfer-agent"

DEBUG_VARIABLE = "DEEPINFER_DEBUG"  # set (to anything but 0) for a traceback instead of one `error:` line


def main() -> None:
    sys.exit(guarded())


def guarded(prog_name: str = PROG) -> int:
    """Run the CLI; whatever escapes it ends as one `error:` line on stderr and an exit code, never a
    traceback (unless DEEPINFER_DEBUG is set): a usage mistake exits 2 naming the option, anything the
    commands did not foresee exits 1 with its type and message, Ctrl-C 130, a closed stdout quietly."""
    import typer

    from agent.app import app_for
    from agent.cli import app

    try:
        code = app_for(app, sys.argv[1:])(prog_name=prog_name, standalone_mode=False)
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
