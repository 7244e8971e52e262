"""What a stored load sample costs SQLite, and how much of it each time index of `server_stats` is. By hand:

    .venv/bin/python bench/store_rows.py [--rows 200000] [--per-commit 250] [--variant 0|1|2|3]

A store is made (`Store.open`: the schema and its pragmas), then rows like a storm's samples are inserted
with the store's own statement, `--per-commit` a transaction as the daemon's steps give them, once with
every index and once with each of `server_stats_at` and `server_stats_source_at` dropped (and both). Only
SQLite's part of a row is timed (CPU of this process): building the row and the loop's work are not in it.
Every index is read by some query (bench/README.md, `EXPLAIN QUERY PLAN`); this says what one costs.
`--variant` runs one of the four alone, for an instruction count that a busy machine does not blur:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python bench/store_rows.py --variant 1
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from agent.records import ServerStats
from agent.sinks.rows import TABLES
from agent.sinks.store import Store

VARIANTS: tuple[tuple[str, ...], ...] = ((), ("server_stats_at",), ("server_stats_source_at",),
                                         ("server_stats_at", "server_stats_source_at"))


def cost(work: Path, dropped: tuple[str, ...], rows: int, per_commit: int) -> float:
    """µs of CPU a row, inserting `rows` samples into a fresh store without the `dropped` indexes."""
    path = work / f"store-{len(list(work.iterdir()))}.db"
    Store.open(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    for name in dropped:
        conn.execute(f"DROP INDEX {name}")
    at = 1.78e9
    batch = [(at + i * 0.0004, at + i // 2500, "vllm/vllm", "vllm", 40, 0, None, 0.5, 1000.0, 900.0, 0.3, None,
              None, "/var/log/vllm/vllm.log", i * 240, "65024:2146366:62415879ae72") for i in range(rows)]
    insert = TABLES[ServerStats].insert
    start = time.process_time()
    for k in range(0, rows, per_commit):
        conn.execute("BEGIN")
        conn.executemany(insert, batch[k:k + per_commit])
        conn.execute("COMMIT")
    spent = time.process_time() - start
    conn.close()
    return 1e6 * spent / rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--per-commit", type=int, default=250)
    ap.add_argument("--variant", type=int, choices=range(len(VARIANTS)),
                    help="only this one: 0 every index, 1 and 2 without one time index, 3 without both")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="deepinfer-rows-"))
    try:
        for dropped in VARIANTS if args.variant is None else VARIANTS[args.variant:args.variant + 1]:
            label = "every index" if not dropped else "without " + " and ".join(dropped)
            print(f"{label}: {cost(work, dropped, args.rows, args.per_commit):.2f} µs a row")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
