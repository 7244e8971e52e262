"""The agent's commands, run as an operator runs them (the installed console script, real subprocesses), on a
real engine's log or against its endpoint; each returns what the command printed, parsed where it is JSON."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

AGENT = shutil.which("deepinfer-agent", path=str(Path(sys.executable).parent)) or "deepinfer-agent"


def agent(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([AGENT, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NO_COLOR": "1"})
    assert "Traceback" not in proc.stderr, proc.stderr
    if check:
        assert proc.returncode == 0, (args, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


def report_json(log: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(agent("report", "--log", str(log), "--format", "json").stdout)
    return out


def occurrences(report: dict[str, Any], kind: str) -> int:
    """A kind's occurrences in the report's timeline (0 when absent)."""
    for line in report["timeline"]:
        if line["kind"] == kind:
            return int(line["occurrences"] if line.get("occurrences") is not None else line["count"])
    return 0


class Daemon:
    """`deepinfer-agent run` following one engine's log and scraping its /metrics as one engine (same name)."""

    def __init__(self, work: Path, log: Path, metrics_url: str, server: str) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.db = work / "agent.db"
        self.config = work / "agent.yaml"
        self.config.write_text(
            f"sources: [{{path: '{log}', server: {server}, name: engine, start_at: beginning}}]\n"
            f"scrape: [{{url: '{metrics_url}', server: {server}, name: engine, interval_seconds: 2, "
            "timeout_seconds: 1}]\n"
            "nvml: {enabled: false}\nmetrics: {listen: 127.0.0.1, port: 0}\n"
            f"store: {{path: '{self.db}', retention_days: 3650}}\n")
        with (work / "agent.err").open("w") as err:
            self.proc = subprocess.Popen([AGENT, "run", "--config", str(self.config)], stdout=subprocess.DEVNULL,
                                         stderr=err, start_new_session=True)
        deadline = time.monotonic() + 30
        while not self.db.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # the first scrape is the baseline its counters count from
        assert self.proc.poll() is None, (work / "agent.err").read_text()

    def stop(self) -> None:
        time.sleep(5)  # a last scrape and a last read of the log
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)

    def occurrences(self) -> dict[str, int]:
        """Occurrences by kind in the daemon's store (`report --db`, the whole store)."""
        report = json.loads(agent("report", "--db", str(self.db), "--since", "1d", "--format", "json").stdout)
        return {line["kind"]: occurrences(report, line["kind"]) for line in report["timeline"]}
