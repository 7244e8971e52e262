"""Run a `GpuPoller` in a child process and step it from the test, one poll per line.

Which NVML library a process uses is settled when it first loads one (LD_LIBRARY_PATH is read at
start-up, and a loaded library stays loaded), so "no library, then a library" and "the real driver,
not the fake one" need a process of their own. The child reads a `now` per line on stdin and answers
one JSON line per poll; the test waits on that line, never on a clock.

Run as a script, this module is the child.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class PollerProcess:
    """The parent's side: `poll(now)` returns what the child's poller saw, as plain JSON values."""

    def __init__(self, env: Mapping[str, str], retry_initial_s: float = 5.0) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-W", "error", str(Path(__file__).resolve()), str(retry_initial_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, **env},
        )

    def poll(self, now: float) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{now}\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise AssertionError(f"poller child died: {self.close()}")
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> str:
        """End the child; its stderr (the log lines)."""
        _, err = self._proc.communicate()
        return err

    def __enter__(self) -> PollerProcess:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._proc.poll() is None:
            self.close()


def _child(retry_initial_s: float) -> None:
    import logging

    from agent.sources.nvml import GpuPoller

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    poller = GpuPoller(retry_initial_s=retry_initial_s)
    for line in sys.stdin:
        result = poller.poll(float(line))
        print(json.dumps({
            "up": poller.up,
            "hint": poller.hint,
            "last_error": poller.last_error,
            "errors_by_call": dict(poller.errors_by_call),
            "driver_version": poller.driver_version,
            "gpus": [dataclasses.asdict(g) for g in result.gpus],
            "processes": [dataclasses.asdict(p) for p in result.processes],
            "events": [dataclasses.asdict(e) for e in result.events],
        }), flush=True)
    poller.close()


if __name__ == "__main__":
    _child(float(sys.argv[1]))
