"""The console script's entry point: `deepinfer-agent --help` answered without importing typer.

Importing typer (and click) is most of what `--help` used to cost (~0.15 s of ~0.16 s). The top-level help
does not change between runs, so its text is kept here, exactly as typer renders it at the usual width
(tests/unit/test_launch.py renders it again and fails when it drifts), and printed when the output would be
the same: the program is called `deepinfer-agent`, the argument is `--help` or `-h` alone, no shell
completion is asked for, and the terminal is at least 80 columns wide (click wraps at min(columns, 80) - 2).
Everything else goes to the CLI (`agent/cli.py`).
"""

from __future__ import annotations

import os
import sys

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


def main() -> None:
    if _static_help_applies(sys.argv):
        sys.stdout.write(TOP_HELP)
        sys.stdout.flush()
        return
    from agent.cli import app

    app()


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
