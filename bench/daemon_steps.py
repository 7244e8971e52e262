"""Where the daemon's CPU goes under a storm, in-process and without mtail. By hand:

    .venv/bin/python bench/daemon_steps.py [--lines 100000] [--per-step 500] [--profile]

The bench's vLLM mix (bench/compare.py's `generate`) is appended `--per-step` lines at a time to a log the
daemon follows, and one `Daemon` step runs after each append, its stages (ingest, commit, judge + publish)
timed apart in CPU seconds of this process (`time.process_time`), 0.1 s of the daemon's clock apart as in a
storm (`service.MIN_STEP_SECONDS`). `daemon.py` measures the whole process against mtail; this says which
stage its CPU is spent in, and `--profile` prints cProfile's largest items (which inflates Python calls:
read it as an order, not as shares).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import generate

from agent.config import load_config
from agent.daemon.loop import Daemon


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--per-step", type=int, default=500)
    ap.add_argument("--profile", action="store_true", help="print cProfile's largest items")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="deepinfer-steps-"))
    try:
        mix = work / "mix.log"
        generate(mix, args.lines)
        lines = mix.read_text(encoding="utf-8").splitlines(keepends=True)
        log = work / "vllm.log"
        log.write_text("")
        config = work / "config.yaml"
        config.write_text(f"sources: [{{path: {log}, server: vllm, name: vllm}}]\nnvml: {{enabled: false}}\n"
                          f"store: {{path: {work / 'agent.db'}}}\n")
        daemon = Daemon(load_config(config))
        now = time.time()
        daemon.start(now)
        daemon.run_once(now)
        spent = {"ingest": 0.0, "commit": 0.0, "judge + publish": 0.0}
        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            profile.enable()
        with log.open("a", encoding="utf-8") as handle:
            for start in range(0, len(lines), args.per_step):
                handle.writelines(lines[start:start + args.per_step])
                handle.flush()
                now += 0.1
                t0 = time.process_time()
                ingested = daemon.ingest(now)
                t1 = time.process_time()
                daemon.commit(ingested, now)
                t2 = time.process_time()
                daemon.commit_findings(daemon.judge(now), now)
                daemon.publish(now)
                t3 = time.process_time()
                spent["ingest"] += t1 - t0
                spent["commit"] += t2 - t1
                spent["judge + publish"] += t3 - t2
        daemon.close(now + 1.0)
        if profile is not None:
            profile.disable()
        total = sum(spent.values())
        print(f"{len(lines):,} lines in steps of {args.per_step}: {total:.2f} s CPU, "
              f"{1e6 * total / len(lines):.1f} µs a line")
        for stage, seconds in spent.items():
            print(f"  {stage}: {seconds:.2f} s ({100 * seconds / total:.0f} %)")
        if profile is not None:
            stats = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats(30)
            stats.sort_stats("tottime").print_stats(20)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
