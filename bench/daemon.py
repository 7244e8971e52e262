"""The daemon's own cost and latency, side by side with mtail following the same file. By hand:

    .venv/bin/python bench/daemon.py [--idle-seconds 30] [--appends 100] [--storm-rate 5000] [--storm-seconds 20]
                                     [--store-apart] [--commit-seconds S]

`deepinfer-agent run` (no GPU: NVML reported down) and `mtail` (bench/mtail/vllm.mtail) both follow one
vLLM log in a temporary folder; the agent's store is kept in that same folder unless `--store-apart`
(its own writes must not wake it); `--commit-seconds` sets `store.commit_seconds` (default: the agent's).
Three phases, each measured for both from /proc (CPU time, RSS):

1. idle: nothing is written for `--idle-seconds`;
2. append → metric: a 429 line is appended, then /metrics is polled until the counter moved
   (`deepinfer_events_total{kind="http_429"}`, mtail's `vllm_http_too_many_requests_total`); p50/p99;
3. storm: lines of bench/compare.py's realistic mix (stats and access lines, ~1 % problems) appended at
   `--storm-rate` lines/s; CPU as % of one core, and the ratio agent / mtail.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import generate

ROOT = Path(__file__).resolve().parent.parent
REFUSAL = '(APIServer pid=3646) INFO:     10.0.0.9:40000 - "POST /v1/chat/completions HTTP/1.1" 429 Too Many Requests\n'
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else float("nan")


def metric(port: int, name: str, label: str = "") -> float:
    """The sum of one metric's samples (those with `label` in their labels)."""
    total = 0.0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in "{ " and label in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--idle-seconds", type=float, default=30)
    ap.add_argument("--appends", type=int, default=100)
    ap.add_argument("--storm-rate", type=int, default=5000)
    ap.add_argument("--storm-seconds", type=float, default=20)
    ap.add_argument("--store-apart", action="store_true", help="keep the agent's store out of the log folder")
    ap.add_argument("--commit-seconds", type=float, help="the agent's store.commit_seconds (default: its own)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="deepinfer-bench-"))
    logs = work / "logs"
    logs.mkdir()
    log = logs / "vllm.log"
    log.write_text("")
    mix_file = work / "mix.log"
    generate(mix_file, max(50_000, int(args.storm_rate * args.storm_seconds) + 1))
    mix = mix_file.read_text(encoding="utf-8").splitlines(keepends=True)
    store = (work if args.store_apart else logs) / "agent.db"
    config = work / "config.yaml"
    spacing = "" if args.commit_seconds is None else f", commit_seconds: {args.commit_seconds}"
    config.write_text(f"sources: [{{path: {log}, server: vllm, name: vllm}}]\n"
                      f"metrics: {{listen: 127.0.0.1, port: 0}}\nstore: {{path: {store}{spacing}}}\n")
    err = (work / "agent.stderr").open("w")
    agent = subprocess.Popen([sys.executable, "-m", "agent", "run", "--config", str(config)],
                             stderr=err, stdout=subprocess.DEVNULL, cwd=ROOT)
    mtail_port = free_port()
    mtail = subprocess.Popen(["mtail", "--progs", str(ROOT / "bench/mtail"), "--logs", str(log), "--address",
                              "127.0.0.1", "--port", str(mtail_port)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) if shutil.which("mtail") else None
    try:
        port = 0
        while not port:
            found = re.findall(r"metrics on http://127\.0\.0\.1:(\d+)/", (work / "agent.stderr").read_text())
            port = int(found[-1]) if found else 0
            time.sleep(0.05)
        time.sleep(2)  # let start-up settle
        procs = {"agent": agent.pid, **({"mtail": mtail.pid} if mtail else {})}
        print(f"store: {'apart from' if args.store_apart else 'in'} the log folder"
              + ("" if args.commit_seconds is None else f", commit_seconds {args.commit_seconds:g}"))

        before = {name: cpu_seconds(pid) for name, pid in procs.items()}
        start = time.monotonic()
        time.sleep(args.idle_seconds)
        spent = time.monotonic() - start
        for name, pid in procs.items():
            print(f"idle {name}: {100 * (cpu_seconds(pid) - before[name]) / spent:.2f} % of one core, "
                  f"RSS {rss_mib(pid):.1f} MiB over {spent:.0f} s")

        probes: dict[str, Callable[[], float]] = {
            "agent": lambda: metric(port, "deepinfer_events_total", 'kind="http_429"')}
        if mtail:
            probes["mtail"] = lambda: metric(mtail_port, "vllm_http_too_many_requests_total")
        latencies: dict[str, list[float]] = {name: [] for name in probes}
        with log.open("a") as handle:
            for i in range(args.appends):
                expected = {name: probe() + 1 for name, probe in probes.items()}
                t0 = time.perf_counter()
                handle.write(REFUSAL)
                handle.flush()
                pending = set(probes)
                while pending and time.perf_counter() - t0 < 10:
                    for name in list(pending):
                        if probes[name]() >= expected[name]:
                            latencies[name].append((time.perf_counter() - t0) * 1000)
                            pending.discard(name)
                    time.sleep(0.002)
                time.sleep(0.05 if i % 10 else 0.3)
        for name, values in latencies.items():
            if len(values) >= 2:
                q = statistics.quantiles(values, n=100, method="inclusive")  # never past the largest
                print(f"append → metric, {name}: p50 {statistics.median(values):.0f} ms, p99 {q[98]:.0f} ms, "
                      f"max {max(values):.0f} ms over {len(values)} appends")

        rss_before = {name: rss_mib(pid) for name, pid in procs.items()}
        before = {name: cpu_seconds(pid) for name, pid in procs.items()}
        start = time.monotonic()
        sent = 0
        with log.open("a") as handle:
            while (elapsed := time.monotonic() - start) < args.storm_seconds:
                due = int(elapsed * args.storm_rate) - sent
                if due > 0:
                    handle.writelines(mix[(sent + k) % len(mix)] for k in range(due))
                    handle.flush()
                    sent += due
                time.sleep(0.01)
        spent = time.monotonic() - start
        time.sleep(2)  # the backlog, if any, counts too
        cpu = {name: 100 * (cpu_seconds(pid) - before[name]) / (spent + 2) for name, pid in procs.items()}
        for name, pid in procs.items():
            print(f"storm {name}: {sent / spent:,.0f} lines/s for {spent:.0f} s: {cpu[name]:.1f} % of one core, "
                  f"RSS {rss_before[name]:.1f} → {rss_mib(pid):.1f} MiB")
        if "mtail" in cpu:
            print(f"storm CPU ratio agent / mtail: {cpu['agent'] / max(cpu['mtail'], 0.01):.1f}× (target ≤ 2×)")
    finally:
        agent.terminate()
        if mtail:
            mtail.terminate()
            mtail.wait(10)
        agent.wait(10)
        err.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
