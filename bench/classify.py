"""Classification throughput on a 1M-line vLLM-like log, against mtail and grep on the same file. By hand:

    .venv/bin/python bench/classify.py [--lines 1000000] [--runs 3] [--workdir /tmp/deepinfer-bench]

DESIGN.md §4 sets the targets as ratios measured in the same run: at least mtail's throughput on the
same log and the same classes on one core (the issue aims at 5×), and within 5× of `grep -c -E` with the
same patterns. Everything runs pinned to one core (`taskset -c 0`, `sched_setaffinity`). The log mix
follows shared/reference/tooling-notes.md §2: 59 % V1 stats lines, 38 % uvicorn 200 lines, 2 % other
INFO lines, 1 % special lines (CUDA OOM, 429, 503, V0 preemption warnings), seed 42.

The agent does more than the references per line (it also turns every stats line into a load sample
and tracks the queue), so the ratio understates like-for-like speed. Counts are printed side by side:
429/503/preemption must agree exactly; OOM *events* are fewer than OOM *lines* because repeats within
30 s are one incident.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.records import Event
from parsers.vllm import VllmParser

PATTERNS = {
    "oom": "CUDA out of memory",
    "http_429": '" 429 ',
    "http_503": '" 503 ',
    "preemption": "is preempted by",
}
MTAIL_PROG = r"""
counter vllm_cuda_oom_total
counter vllm_http_too_many_requests_total
counter vllm_http_service_unavailable_total
counter vllm_preemptions_total
counter vllm_http_requests_total by code
gauge vllm_gpu_kv_cache_usage_percent

/CUDA out of memory/ {
  vllm_cuda_oom_total++
}
/" 429 / {
  vllm_http_too_many_requests_total++
}
/" 503 / {
  vllm_http_service_unavailable_total++
}
/is preempted by/ {
  vllm_preemptions_total++
}
/INFO: +\S+ - "[A-Z]+ \S+ HTTP\/[0-9.]+" (?P<code>\d{3}) / {
  vllm_http_requests_total[$code]++
}
/GPU KV cache usage: (?P<kv>\d+\.\d+)%/ {
  vllm_gpu_kv_cache_usage_percent = $kv
}
"""


def generate(path: Path, lines: int) -> Counter[str]:
    """Write the synthetic log; return how many lines of each special class it holds."""
    rng = random.Random(42)
    truth: Counter[str] = Counter()
    total_preempt = 0
    with path.open("w", encoding="utf-8") as out:
        for i in range(lines):
            second = i // 100
            stamp = f"11-29 {second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
            r = rng.random()
            if r < 0.59:
                out.write(f"(APIServer pid=3646) INFO {stamp} [loggers.py:116] Engine 000: Avg prompt throughput: "
                          f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(0, 3000):.1f} "
                          f"tokens/s, Running: {rng.randint(0, 256)} reqs, Waiting: {rng.choice((0, 0, 0, 3, 17))} "
                          f"reqs, GPU KV cache usage: {rng.uniform(0, 100):.1f}%, Prefix cache hit rate: "
                          f"{rng.uniform(0, 60):.1f}%\n")
            elif r < 0.97:
                out.write(f'(APIServer pid=3646) INFO:     10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}:'
                          f'{rng.randint(1024, 65535)} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
            elif r < 0.99:
                out.write(f"(APIServer pid=3646) INFO {stamp} [launcher.py:46] Route: /v1/models, Methods: GET\n")
            else:
                kind = rng.choice(tuple(PATTERNS))
                truth[kind] += 1
                if kind == "oom":
                    out.write(f"(EngineCore_DP0 pid=990) ERROR {stamp} [core.py:710] torch.OutOfMemoryError: CUDA "
                              "out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
                              "of which 1.20 GiB is free.\n")
                elif kind == "preemption":
                    total_preempt += 1
                    out.write(f"WARNING {stamp} scheduler.py:1141] Sequence group {i} is preempted by "
                              "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can "
                              "affect the end-to-end performance. Increase gpu_memory_utilization or "
                              f"tensor_parallel_size to provide more KV cache memory. "
                              f"total_num_cumulative_preemption={total_preempt}\n")
                else:
                    status = "429 Too Many Requests" if kind == "http_429" else "503 Service Unavailable"
                    out.write(f'(APIServer pid=3646) INFO:     10.0.0.9:40000 - "POST /v1/chat/completions '
                              f'HTTP/1.1" {status}\n')
    return truth


def run_agent(path: Path) -> tuple[float, Counter[str], int]:
    """One pass of the agent's parser over the file, as the daemon runs it (read, decode, feed)."""
    parser = VllmParser(str(path), time.time())
    kinds: Counter[str] = Counter()
    records = 0
    start = time.perf_counter()
    with path.open("rb") as handle:
        for offset, raw in enumerate(handle):
            for r in parser.feed(raw.decode("utf-8", "replace").rstrip("\n"), None, None, offset):
                records += 1
                if isinstance(r, Event):
                    kinds[r.kind.value] += 1
        for r in parser.flush():
            records += 1
            if isinstance(r, Event):
                kinds[r.kind.value] += 1
    return time.perf_counter() - start, kinds, records


def timed(cmd: list[str], runs: int) -> list[float]:
    """Wall times of a command whose stdout goes to a pipe (grep quits early on /dev/null)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/deepinfer-bench"))
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    log = args.workdir / "vllm.log"
    truth = generate(log, args.lines)
    os.sched_setaffinity(0, {0})
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []

    agent_times, kinds, records = [], Counter[str](), 0
    for _ in range(args.runs):
        elapsed, kinds, records = run_agent(log)
        agent_times.append(elapsed)
    agent = statistics.median(agent_times)
    print(f"file: {log} ({args.lines:,} lines, {log.stat().st_size / 1e6:.0f} MB)")
    print(f"special lines: {dict(truth)}")
    print(f"agent events:  {dict(kinds)}  ({records:,} records incl. load samples)")
    print(f"agent (VllmParser.feed, 1 core): median {agent:.2f} s → {args.lines / agent:,.0f} lines/s")

    grep_cmd = [*pin, "grep", "-c", "-E", "|".join(PATTERNS.values()), str(log)]
    grep = statistics.median(timed(grep_cmd, args.runs))
    print(f"grep -c -E (same patterns, 1 core): median {grep:.2f} s → {args.lines / grep:,.0f} lines/s")

    if shutil.which("mtail"):
        progs = args.workdir / "progs"
        progs.mkdir(exist_ok=True)
        (progs / "vllm.mtail").write_text(MTAIL_PROG, encoding="utf-8")
        mtail_cmd = [*pin, "mtail", "--one_shot", "--one_shot_format", "prometheus", "--progs", str(progs),
                     "--logs", str(log), "--address", "127.0.0.1", "--port", "0"]
        mtail = statistics.median(timed(mtail_cmd, args.runs))
        print(f"mtail --one_shot (1 core): median {mtail:.2f} s → {args.lines / mtail:,.0f} lines/s")
        print(f"ratio agent / mtail = {mtail / agent:.2f}  (target ≥ 1, aim 5)")
    else:
        print("mtail not installed (apt-get install mtail): no mtail ratio")
    print(f"ratio grep / agent = {agent / grep:.1f}  (target ≤ 5)")


if __name__ == "__main__":
    main()
