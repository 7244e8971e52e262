"""`deepinfer-agent scan` against mtail and grep on the same realistic log, every contender a whole process.

    .venv/bin/python bench/compare.py [--lines 1000000] [--runs 5] [--workdir /tmp/deepinfer-bench]
                                      [--rss-lines 5000000] [--skip-all-cores]

What it does, in order (bench/README.md explains the choices):

1. Writes a deterministic vLLM V1 log (`random.Random(11)`): two DP engines' stats lines and uvicorn access
   lines make up most of it, about 1 % are problems (429 and 503 refusals, CUDA OOM errors at least 40 s
   apart so each is one incident), a few per cent other INFO lines; the time advances by a random
   fraction of a second per line, so consecutive stamps often differ (a cache keyed on the stamp misses).
2. Runs each contender once and checks its counts against the generator's: 429, 503, OOM and stats
   samples for the agent (text and JSON lines) and mtail (bench/mtail/vllm.mtail, the same classes);
   grep's line count against the sum of the problem classes. A contender that miscounts is reported
   and left out of the timing.
3. Times them as whole processes (start-up, reading, framing, output included; output to a file, since
   grep quits early on /dev/null), one warm-up round, then `--runs` rounds in which every contender runs
   once, the order rotating, so noise from the shared machine falls on all of them alike. Reported: the
   median wall time and lines/s of each, the median of the per-round ratios against mtail, and peak RSS
   (`wait4`). One-core contenders are pinned with `taskset -c 0`; the all-cores ones are not pinned
   (`scan` then uses `--jobs` = the CPUs available).
4. Peak RSS of `scan` on a `--rss-lines` file (text and JSON lines), and `deepinfer-agent --help` wall time.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENT = [sys.executable, "-m", "agent"]
CLASSES = ("http_429", "http_503", "oom", "samples")
GREP_PATTERN = '" 429 |" 503 |CUDA out of memory'


def generate(path: Path, lines: int) -> Counter[str]:
    """Write the log; return the true count of each class."""
    rng = random.Random(11)
    truth: Counter[str] = Counter()
    t = 1795824000.0  # 2026-11-28 00:00 UTC
    last_oom = 0.0
    running = [40, 40]
    waiting = [0, 0]
    with path.open("w", encoding="utf-8") as out:
        for _ in range(lines):
            t += rng.expovariate(8.0)  # ~8 lines a second
            stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime(t))
            r = rng.random()
            if r < 0.46:
                engine = rng.randrange(2)
                running[engine] = max(0, min(256, running[engine] + rng.randint(-6, 6)))
                if waiting[engine] == 0:  # a queue forms now and then and lasts a while
                    waiting[engine] = rng.randint(1, 30) if rng.random() < 0.02 else 0
                else:
                    waiting[engine] = 0 if rng.random() < 0.1 else max(1, waiting[engine] + rng.randint(-3, 3))
                out.write(f"(APIServer pid=3646) INFO {stamp} [loggers.py:123] Engine 00{engine}: Avg prompt "
                          f"throughput: {rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: "
                          f"{rng.uniform(0, 3000):.1f} tokens/s, Running: {running[engine]} reqs, Waiting: "
                          f"{waiting[engine]} reqs, GPU KV cache usage: {rng.uniform(0, 100):.1f}%, Prefix cache hit "
                          f"rate: {rng.uniform(0, 60):.1f}%\n")
                truth["samples"] += 1
            elif r < 0.95:
                route = rng.choice(("/v1/chat/completions", "/v1/chat/completions", "/v1/completions", "/metrics"))
                out.write(f'(APIServer pid=3646) INFO:     10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}:'
                          f'{rng.randint(1024, 65535)} - "POST {route} HTTP/1.1" 200 OK\n')
            elif r < 0.99:
                other = rng.random()
                if other < 0.5:
                    out.write(f"(APIServer pid=3646) INFO {stamp} [launcher.py:37] Route: /v1/models, Methods: GET\n")
                elif other < 0.8:
                    out.write(f"(APIServer pid=3646) INFO {stamp} [chat_utils.py:470] Detected the chat template "
                              "content format to be 'string'. You can set `--chat-template-content-format` to "
                              "override this.\n")
                else:
                    out.write(f"(EngineCore_DP{rng.randrange(2)} pid={990 + rng.randrange(2)}) INFO {stamp} "
                              f"[block_pool.py:321] Successfully reset prefix cache\n")
            else:
                kind = rng.choice(("http_429", "http_429", "http_503", "http_503", "oom"))
                if kind == "oom" and t - last_oom < 40:
                    kind = "http_429"
                truth[kind] += 1
                if kind == "oom":
                    last_oom = t
                    out.write(f"(EngineCore_DP0 pid=990) ERROR {stamp} [core.py:710] torch.OutOfMemoryError: CUDA "
                              "out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
                              "of which 1.20 GiB is free.\n")
                else:
                    status = "429 Too Many Requests" if kind == "http_429" else "503 Service Unavailable"
                    out.write(f'(APIServer pid=3646) INFO:     10.0.0.9:40000 - "POST /v1/chat/completions '
                              f'HTTP/1.1" {status}\n')
    return truth


# ---- counts each contender reports -----------------------------------------------------------------
def agent_text_counts(out: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for kind in ("http_429", "http_503", "oom"):
        m = re.search(rf"^  {kind} +([\d,]+) ", out, re.M)
        counts[kind] = int(m.group(1).replace(",", "")) if m else 0
    m = re.search(r"^Load \(([\d,]+) samples\)", out, re.M)
    counts["samples"] = int(m.group(1).replace(",", "")) if m else 0
    return counts


def agent_jsonl_counts(out: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    counts["samples"] = out.count('{"type": "stats"')
    for kind in ("http_429", "http_503", "oom"):
        counts[kind] = out.count(f'"kind": "{kind}"')
    return counts


def mtail_counts(out: str) -> Counter[str]:
    names = {"vllm_http_too_many_requests_total": "http_429", "vllm_http_service_unavailable_total": "http_503",
             "vllm_cuda_oom_total": "oom", "vllm_stats_samples_total": "samples"}
    counts: Counter[str] = Counter()
    for line in out.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            counts[names[name]] += int(float(line.rsplit(" ", 1)[1]))
    return counts


@dataclass
class Contender:
    name: str
    argv: list[str]
    counts: Callable[[str], Counter[str]]
    expect: Counter[str]
    env: dict[str, str] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)
    rss_kib: int = 0
    miscount: str = ""


def run_once(c: Contender, out_path: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS KiB) of one whole-process run, stdout to a file."""
    env = {**os.environ, **c.env}
    rss_file = out_path.with_suffix(".rss")
    # GNU time reports the child's own peak (a child of this Python process would inherit its high-water mark)
    argv = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *c.argv] if Path("/usr/bin/time").exists() else c.argv
    with out_path.open("wb") as out:
        start = time.perf_counter()
        code = subprocess.run(argv, stdout=out, stderr=subprocess.DEVNULL, env=env, cwd=ROOT).returncode
        wall = time.perf_counter() - start
    if code not in (0, 1):  # grep -c exits 1 when it counts 0
        raise RuntimeError(f"{c.name}: exit {code}")
    rss = int(rss_file.read_text().split()[-1]) if rss_file.exists() else 0
    return wall, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/deepinfer-bench"))
    ap.add_argument("--rss-lines", type=int, default=5_000_000, help="0 skips the memory run")
    ap.add_argument("--skip-all-cores", action="store_true")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    log = args.workdir / f"vllm-{args.lines}.log"
    truth = generate(log, args.lines)
    size = log.stat().st_size
    print(f"log: {args.lines:,} lines, {size / 1e6:.0f} MB; truth {dict(truth)} "
          f"(problem lines {sum(truth[k] for k in ('http_429', 'http_503', 'oom')) / args.lines:.2%})")
    pin = ["taskset", "-c", "0"]
    grep_truth = Counter({"lines": truth["http_429"] + truth["http_503"] + truth["oom"]})
    cpus = len(os.sched_getaffinity(0))
    mtail = ["mtail", "--one_shot", "--one_shot_format", "prometheus", "--progs", str(ROOT / "bench/mtail"),
             "--logs", str(log), "--address", "127.0.0.1", "--port", "0"]
    contenders = [
        Contender("scan text, 1 core", [*pin, *AGENT, "scan", "--jobs", "1", str(log)], agent_text_counts, truth),
        Contender("scan jsonl, 1 core", [*pin, *AGENT, "scan", "--jobs", "1", "--format", "jsonl", str(log)],
                  agent_jsonl_counts, truth),
        Contender("mtail, 1 core", [*pin, *mtail], mtail_counts, truth),
        Contender("grep LC_ALL=C, 1 core", [*pin, "grep", "-c", "-E", GREP_PATTERN, str(log)],
                  lambda out: Counter({"lines": int(out.strip() or 0)}), grep_truth, {"LC_ALL": "C"}),
        Contender(f"grep {os.environ.get('LANG', 'C.UTF-8')} (default locale), 1 core",
                  [*pin, "grep", "-c", "-E", GREP_PATTERN, str(log)],
                  lambda out: Counter({"lines": int(out.strip() or 0)}), grep_truth),
    ]
    if not args.skip_all_cores:
        contenders += [
            Contender(f"scan text, all {cpus} cores", [*AGENT, "scan", str(log)], agent_text_counts, truth),
            Contender(f"scan jsonl, all {cpus} cores", [*AGENT, "scan", "--format", "jsonl", str(log)],
                      agent_jsonl_counts, truth),
            Contender(f"mtail, all {cpus} cores", mtail, mtail_counts, truth),
        ]
    if shutil.which("mtail") is None:
        contenders = [c for c in contenders if "mtail" not in c.name]
        print("mtail not installed: no mtail contender")
    out_path = args.workdir / "out"
    # counts first: a contender that miscounts is reported, not timed
    for c in contenders:
        run_once(c, out_path)
        got = c.counts(out_path.read_text(encoding="utf-8", errors="replace"))
        if any(got[k] != v for k, v in c.expect.items()):
            c.miscount = f"counts {dict(got)} ≠ {dict(c.expect)}"
            print(f"MISCOUNT {c.name}: {c.miscount} (not timed)")
    timed = [c for c in contenders if not c.miscount]
    print(f"counts agree: {', '.join(c.name for c in timed)}")
    for c in timed:  # warm-up round (page cache, interpreter files)
        run_once(c, out_path)
    for r in range(args.runs):
        order = timed[r % len(timed):] + timed[:r % len(timed)]
        for c in order:
            wall, rss = run_once(c, out_path)
            c.times.append(wall)
            c.rss_kib = max(c.rss_kib, rss)
    ref = {name: next((c for c in timed if c.name == name), None)
           for name in ("mtail, 1 core", f"mtail, all {cpus} cores")}
    print(f"\n{'contender':<36} {'median s':>9} {'lines/s':>12} {'peak RSS':>9}  ratio vs mtail (median of pairs)")
    for c in timed:
        median = statistics.median(c.times)
        mt = ref["mtail, 1 core"] if "1 core" in c.name else ref[f"mtail, all {cpus} cores"]
        ratio = ""
        if mt is not None and mt is not c:
            pairs = [m / t for t, m in zip(c.times, mt.times, strict=True)]
            ratio = (f"{statistics.median(pairs):.2f}× mtail's speed (pairs {min(pairs):.2f}–{max(pairs):.2f})")
        print(f"{c.name:<36} {median:>9.2f} {args.lines / median:>12,.0f} {c.rss_kib / 1024:>7.0f} MiB  {ratio}")
    if args.rss_lines:
        big = args.workdir / f"vllm-{args.rss_lines}.log"
        if not big.exists():
            generate(big, args.rss_lines)
        for fmt in ("text", "jsonl"):
            c = Contender(f"scan {fmt}", [*pin, *AGENT, "scan", "--jobs", "1", "--format", fmt, str(big)],
                          agent_text_counts, truth)
            wall, rss = run_once(c, out_path)
            print(f"peak RSS, scan {fmt} on {args.rss_lines:,} lines (1 job): {rss / 1024:.0f} MiB ({wall:.1f} s)")
        c = Contender("scan jsonl all", [*AGENT, "scan", "--format", "jsonl", str(big)], agent_text_counts, truth)
        wall, rss = run_once(c, out_path)
        print(f"peak RSS, scan jsonl on {args.rss_lines:,} lines ({cpus} jobs, main process): {rss / 1024:.0f} MiB "
              f"({wall:.1f} s)")
    helps = []
    for _ in range(7):
        start = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "deepinfer-agent"), "--help"], check=True,
                       stdout=subprocess.DEVNULL)
        helps.append(time.perf_counter() - start)
    print(f"deepinfer-agent --help: median {statistics.median(helps) * 1000:.0f} ms over 7 runs (target ≤ 150 ms)")


if __name__ == "__main__":
    main()
