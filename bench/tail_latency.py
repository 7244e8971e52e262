"""Append → record latency of the file source, with inotify and with polling (run by hand).

A separate writer process appends lines stamped with CLOCK_MONOTONIC (system-wide on Linux) at about
200 lines/s; this process runs the source loop as the daemon does (poll, commit to a real SQLite file,
wait on the Waker) and measures, for every line, the time from the append to the end of the commit
that stored it. Usage: .venv/bin/python bench/tail_latency.py [LINES]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from agent.sinks.store import Store
from agent.sources.tailer import FileTailer, TailOptions
from agent.sources.wake import Waker

WRITER = textwrap.dedent("""
    import os, random, sys, time
    path, lines = sys.argv[1], int(sys.argv[2])
    rng = random.Random(1)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for n in range(lines):
        time.sleep(rng.expovariate(200.0))
        os.write(fd, f"{time.monotonic():.6f} INFO line {n}\\n".encode())
    os.close(fd)
""")


def measure(mode: str, interval: float, lines: int) -> list[float]:
    """Latencies in seconds for `lines` appended lines, waking by inotify or polling every `interval`."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "app.log"
        log.touch()
        store = Store.open(Path(tmp) / "agent.db")
        tailer = FileTailer("bench", str(log), TailOptions(start_at="beginning"))
        waker = Waker(use_inotify=mode == "inotify")
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(lines)])
        latencies: list[float] = []
        while len(latencies) < lines:
            batch = tailer.poll(time.time())
            store.commit(batch.lines, batch.cursors, batch.expired)
            done = time.monotonic()
            latencies += [done - float(line.text.split(" ", 1)[0]) for line in batch.lines]
            waker.watch(tailer.watch_dirs())
            if not batch.more:
                waker.wait(interval)
        writer.wait()
        waker.close()
        store.close()
    return latencies


def main() -> None:
    lines = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(f"{'mode':<22} {'lines':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for mode, interval in (("inotify", 1.0), ("polling", 1.0), ("polling", 0.25)):
        got = sorted(measure(mode, interval, lines))
        p50, p99 = statistics.median(got), got[int(0.99 * (len(got) - 1))]
        label = f"{mode} (poll {interval:g} s)"
        print(f"{label:<22} {len(got):>6} {p50 * 1e3:>8.2f} {p99 * 1e3:>8.2f} {got[-1] * 1e3:>8.2f}")


if __name__ == "__main__":
    main()
