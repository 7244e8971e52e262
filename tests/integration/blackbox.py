"""A black-box harness: `deepinfer-agent run` as a real subprocess, real files written and rotated by a
writer, SIGKILL / SIGTERM and restarts, and counts of what reached the SQLite store and `/metrics`.

Every line the tests write is a uvicorn access line answering 503 whose route carries a line number
(`POST /v1/n000042`), so each line is exactly one `http_503` event and the store's events say which
lines arrived, how often. Nothing here sleeps a fixed time to let the agent catch up: waits poll a
condition with a deadline that stretches while the agent makes progress (a loaded machine is slow,
not wrong).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.integration.test_daemon import wait_for

ROOT = Path(__file__).parent.parent.parent
SOURCE = "vllm"
ROUTE = re.compile(r"/v1/n(\d+)")


def line(n: int, pad: int = 0) -> str:
    """The access line numbered n (no timestamp: uvicorn prints none), optionally padded."""
    return (f'(APIServer pid=851) INFO:     127.0.0.1:40000 - "POST /v1/n{n:06d} HTTP/1.1" 503 '
            f"Service Unavailable{' ' + 'x' * pad if pad else ''}")


def append(path: Path, numbers: Iterable[int]) -> None:
    with path.open("a") as handle:
        handle.write("".join(line(n) + "\n" for n in numbers))


class Agent:
    """One node: a log directory, a config, a store, and the agent process (restartable)."""

    def __init__(self, tmp: Path, pattern: str = "vllm.log", port: int = 0, **source: Any) -> None:
        self.tmp = tmp
        self.logs = tmp / "logs"
        self.logs.mkdir(exist_ok=True)
        self.db = tmp / "state" / "agent.db"
        self.config = tmp / "config.yaml"
        options = {"poll_interval_seconds": 0.05, "rotate_wait_seconds": 0.5, "start_at": "beginning", **source}
        extra = "".join(f"    {k}: {json.dumps(v)}\n" for k, v in options.items())
        self.config.write_text(f"""
sources:
  - path: {json.dumps(str(self.logs / pattern))}
    server: vllm
    name: {SOURCE}
{extra}nvml: {{enabled: false}}
metrics: {{listen: 127.0.0.1, port: {port}}}
store: {{path: {json.dumps(str(self.db))}}}
""")
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.runs = 0
        self.limit_files: tuple[int, int] | None = None  # RLIMIT_NOFILE (soft, hard) to start the agent with
        self.umask: int | None = None  # the umask to start the agent with

    @property
    def log(self) -> Path:
        return self.logs / "vllm.log"

    # --- the process -----------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> Agent:
        """Start the agent and wait until it serves /metrics and has committed its source's first cursor."""
        self.runs += 1
        err = self.tmp / f"agent-{self.runs}.stderr"
        self.stderr = err
        limit, umask = self.limit_files, self.umask

        def limits() -> None:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, limit)
            if umask is not None:
                os.umask(umask)

        self.proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--config", str(self.config)], cwd=ROOT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.DEVNULL,
                                     stderr=err.open("wb"), preexec_fn=limits)
        wait_for("the agent's metrics address", self._address, timeout)
        wait_for("the source's first cursor", self._has_cursor, timeout)
        return self

    def _address(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"agent exited ({self.proc.returncode}):\n{self.stderr.read_text()}")
        found = re.findall(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", self.stderr.read_text())
        if found:
            self.port = int(found[-1])
        return bool(found)

    def _has_cursor(self) -> bool:
        return bool(self.query("SELECT count(*) FROM cursors WHERE source = ?", (SOURCE,))[0][0])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> int:
        """SIGTERM; the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    # --- what arrived ------------------------------------------------------------------------------
    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if not self.db.exists():
            return [(0,)]
        for _ in range(50):
            try:
                with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)) as db:
                    return list(db.execute(sql, params).fetchall())
            except sqlite3.OperationalError as exc:  # no such table yet, or locked for a moment
                last = exc
                time.sleep(0.1)
        raise last

    def numbers(self) -> Counter[int]:
        """Line number → how many events the store holds for it (a 503's route, a deadline's token count)."""
        out: Counter[int] = Counter()
        for kind, raw in self.query("SELECT kind, fields FROM events WHERE kind IN ('http_503', "
                                    "'deadline_exceeded')"):
            fields = json.loads(raw)
            if kind == "deadline_exceeded" and isinstance(fields.get("tokens"), int):
                out[fields["tokens"]] += 1
                continue
            match = ROUTE.search(fields.get("route", ""))
            if match:
                out[int(match.group(1))] += 1
        return out

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            return str(response.read().decode())

    def metric(self, name: str, **labels: str) -> float | None:
        """The sum of the samples of `name` with these labels; None when none (or /metrics did not answer)."""
        try:
            text = self.metrics_text()
        except OSError:
            return None
        total = None
        for row in text.splitlines():
            if row.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in row for k, v in labels.items()):
                total = (total or 0.0) + float(row.rsplit(" ", 1)[1])
        return total

    def stored(self) -> int:
        return int(self.query("SELECT count(*) FROM events WHERE kind IN ('http_503', 'deadline_exceeded')")[0][0])

    def settle(self, expected: int, timeout: float = 30.0) -> Counter[int]:
        """Wait until `expected` numbered events are stored, or no progress for `timeout` seconds; then say
        which lines they are (counting rows while waiting keeps the test from competing for the CPU)."""
        count, deadline = self.stored(), time.monotonic() + timeout
        while count < expected and time.monotonic() < deadline:
            time.sleep(0.2)
            now = self.stored()
            if now > count:
                deadline = time.monotonic() + timeout
            count = now
        return self.numbers()


def lost_and_duplicated(numbers: Counter[int], written: Iterable[int]) -> tuple[int, int]:
    expected = set(written)
    return len(expected - set(numbers)), sum(n - 1 for n in numbers.values() if n > 1) + len(set(numbers) - expected)
