"""What the running agent was built from, for `deepinfer_build_info` (as node_exporter's build_info).

The revision and branch come from the git checkout the package runs from (an editable install, a
clone installed with `pip install .` keeps none), read once at start-up; `unknown` where there is no
checkout or no git. Nothing here is secret: a commit id and a branch name.
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from agent import __version__

UNKNOWN = "unknown"


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), *args], capture_output=True,
                              text=True, timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else UNKNOWN


@dataclass(frozen=True)
class BuildInfo:
    version: str = __version__
    revision: str = UNKNOWN
    branch: str = UNKNOWN
    python: str = field(default_factory=platform.python_version)


def read_build_info() -> BuildInfo:
    """This process's build: the package version, the checkout's commit and branch, the interpreter."""
    return BuildInfo(revision=_git("rev-parse", "--short=12", "HEAD"), branch=_git("rev-parse", "--abbrev-ref", "HEAD"))
