"""Benchmark: `deepinfer-agent report --db` over a store of 1,000,000 events and a day of 1 s samples.

Builds the store once (real Store.commit, as the daemon writes it: 1,000,000 events over 24 h in a
realistic mix, 86,400 load samples, 86,400 GPU samples), then times the whole CLI process — Python
start-up, imports, queries, rendering — for each format, and prints the median of the runs. Target
(DESIGN.md §4): under 2 s. Run by hand: `python bench/report.py [--runs 5] [--db PATH]`.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent.records import Event, EventKind, GpuSample, Phase, Server, ServerStats, Severity
from agent.sinks.store import Store
from agent.verdicts import StoredRecord

T0 = 1_796_083_200.0  # 2026-12-01 00:00 UTC
DAY = 86_400
EVENTS = 1_000_000
KINDS = [(EventKind.PREEMPTION, 0.70), (EventKind.PENDING, 0.15), (EventKind.HTTP_429, 0.06), (EventKind.OOM, 0.03),
         (EventKind.DEADLINE_EXCEEDED, 0.03), (EventKind.HTTP_503, 0.02), (EventKind.QUEUE_FULL, 0.01)]


def build(path: Path) -> None:
    """Write the benchmark store at `path` in batches (one transaction each)."""
    with Store.open(path) as store:
        batch: list[StoredRecord] = []
        cumulative, edges = 0.0, []
        for kind, share in KINDS:
            cumulative += share
            edges.append((cumulative, kind))
        for i in range(EVENTS):
            u = (i * 0.6180339887) % 1.0
            kind = next(k for edge, k in edges if u < edge)
            batch.append(Event(T0 + i * DAY / EVENTS, "vllm-0", Server.VLLM, kind, Severity.WARNING, Phase.RUNTIME,
                               f"{kind.value}: request {i % 40} of class {i % 7}", {}, "/var/log/vllm.log", i))
            if len(batch) == 100_000:
                store.commit(batch, now=T0 + DAY)
                batch = []
        for s in range(DAY):
            kv = 0.4 + 0.6 * ((s % 3600) / 3600)
            batch.append(ServerStats(T0 + s, "vllm-0", Server.VLLM, 20 + s % 40, s % 90, 0, kv, 100.0, 900.0, 0.1,
                                     path="/var/log/vllm.log", offset=10_000_000 + s))
            batch.append(GpuSample(T0 + s, 0, "GPU-0", "NVIDIA L4", None, 24 << 30, 0, None, (16 << 30) + s * 4096,
                                   0.9, 0.5, 60.0, 200.0, 300.0))
            if len(batch) >= 100_000:
                store.commit(batch, now=T0 + DAY)
                batch = []
        store.commit(batch, now=T0 + DAY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--db", type=Path, help="reuse (or create) the store here")
    args = parser.parse_args()
    db = args.db or Path(tempfile.mkdtemp(prefix="report-bench-")) / "agent.db"
    if not db.exists():
        started = time.perf_counter()
        build(db)
        print(f"built {db} ({db.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - started:.0f} s")
    cli = [sys.executable, "-m", "agent", "report", "--db", str(db)]
    for fmt in ("text", "json", "html"):
        times, cpu = [], []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run([*cli, "--format", fmt], check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        # CPU time is printed beside wall time: on a shared machine the wall clock also counts waiting for a core.
        print(f"report --format {fmt:<4}: median {statistics.median(times):.2f} s wall, "
              f"{statistics.median(cpu):.2f} s CPU over {args.runs} runs (wall min {min(times):.2f}, "
              f"max {max(times):.2f}; target < 2 s)")


if __name__ == "__main__":
    main()
