"""The daemon's own cost and latency, measured on this machine. By hand:

    .venv/bin/python bench/daemon.py [--idle-seconds 30] [--appends 200] [--storm-rate 5000] [--storm-seconds 20]

DESIGN.md §4 targets: idle under 0.5 % of one core and under 60 MiB RSS; append → counter on /metrics
p99 under 250 ms; a 5,000 lines/s storm under 25 % of one core with memory flat. It starts
`deepinfer-agent run` as a real subprocess on a temporary vLLM log (no GPU: NVML reported down), reads
its CPU time and RSS from /proc, and times each appended 429 line until `deepinfer_events_total` on
/metrics counts it. As a reference measured in the same run, the same /proc numbers are read for a
`tail -F` of the same log (the minimum any follower pays).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

LINE = '(APIServer pid=851) INFO:     127.0.0.1:40000 - "POST /v1/completions HTTP/1.1" 429 Too Many Requests\n'
BORING = ('(APIServer pid=851) INFO:     127.0.0.1:40000 - "POST /v1/completions HTTP/1.1" 200 OK\n')
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else float("nan")


def counter(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("deepinfer_events_total{") and 'kind="http_429"' in line:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def cost(pid: int, seconds: float) -> tuple[float, float]:
    """(% of one core, RSS MiB at the end) over `seconds`."""
    before, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - start), rss_mib(pid)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle-seconds", type=float, default=30)
    ap.add_argument("--appends", type=int, default=200)
    ap.add_argument("--storm-rate", type=int, default=5000)
    ap.add_argument("--storm-seconds", type=float, default=20)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="deepinfer-bench-"))
    log = work / "vllm.log"
    log.write_text("")
    config = work / "config.yaml"
    config.write_text(f"sources: [{{path: {log}, server: vllm, name: vllm}}]\n"
                      f"metrics: {{listen: 127.0.0.1, port: 0}}\nstore: {{path: {work}/agent.db}}\n")
    err = (work / "agent.stderr").open("w")
    agent = subprocess.Popen([sys.executable, "-m", "agent", "run", "--config", str(config)],
                             stderr=err, stdout=subprocess.DEVNULL, cwd=Path(__file__).resolve().parent.parent)
    tail = subprocess.Popen(["tail", "-F", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port = 0
        while not port:
            found = re.findall(r"metrics on http://127\.0\.0\.1:(\d+)/", (work / "agent.stderr").read_text())
            port = int(found[-1]) if found else 0
            time.sleep(0.05)
        time.sleep(2)  # let start-up settle
        idle_cpu, idle_rss = cost(agent.pid, args.idle_seconds)
        print(f"idle: {idle_cpu:.2f} % of one core, RSS {idle_rss:.1f} MiB over {args.idle_seconds:g} s "
              f"(target < 0.5 %, < 60 MiB)")

        latencies = []
        with log.open("a") as handle:
            for i in range(args.appends):
                expected = counter(port) + 1
                start = time.perf_counter()
                handle.write(LINE)
                handle.flush()
                while counter(port) < expected:
                    time.sleep(0.001)
                latencies.append((time.perf_counter() - start) * 1000)
                time.sleep(0.02 if i % 10 else 0.3)
        q = statistics.quantiles(latencies, n=100)
        print(f"append → counter on /metrics: p50 {statistics.median(latencies):.1f} ms, p99 {q[98]:.1f} ms, "
              f"max {max(latencies):.1f} ms over {len(latencies)} appends (target p99 < 250 ms)")

        rss_before = rss_mib(agent.pid)
        before_agent, before_tail = cpu_seconds(agent.pid), cpu_seconds(tail.pid)
        start = time.monotonic()
        sent = 0
        with log.open("a") as handle:
            while (elapsed := time.monotonic() - start) < args.storm_seconds:
                due = int(elapsed * args.storm_rate) - sent
                if due > 0:
                    handle.write((BORING * 99 + LINE) * (due // 100) + BORING * (due % 100))
                    handle.flush()
                    sent += due
                time.sleep(0.01)
        spent = time.monotonic() - start
        storm_cpu = 100 * (cpu_seconds(agent.pid) - before_agent) / spent
        tail_storm = 100 * (cpu_seconds(tail.pid) - before_tail) / spent
        time.sleep(2)
        print(f"storm: {sent / spent:,.0f} lines/s for {spent:.0f} s: agent {storm_cpu:.1f} % of one core "
              f"(target < 25 %), RSS {rss_before:.1f} → {rss_mib(agent.pid):.1f} MiB; reference tail -F "
              f"{tail_storm:.1f} % (ratio agent / tail {storm_cpu / max(tail_storm, 0.01):.0f}×)")
    finally:
        agent.terminate()
        tail.terminate()
        agent.wait(10)
        err.close()


if __name__ == "__main__":
    main()
