"""`deepinfer-agent scan` against mtail and grep on the same realistic logs, every contender a whole process.

    .venv/bin/python bench/compare.py [--lines 1000000] [--runs 5] [--workdir /tmp/deepinfer-bench]
                                      [--rss-lines 5000000] [--storm-lines 200000] [--daemon-seconds 20]
                                      [--skip-all-cores]

What it does, in order (bench/README.md explains the choices):

1. Writes two deterministic vLLM logs (`random.Random(11)`): the bench's mix, V1 with two DP engines (process
   tags before every line), and the second mix, the same lines without process tags (a single-process server's
   prefix). Stats and access lines make up most of each, about 1 % are problems (429 and 503 refusals, CUDA
   OOM errors at least 40 s apart so each is one incident), a few per cent other INFO lines; the time advances
   by a random fraction of a second per line, so consecutive stamps often differ.
2. Runs each contender once and checks its counts against the generator's: 429, 503, OOM and stats
   samples for the agent (text and JSON lines) and mtail (bench/mtail/vllm.mtail, the same classes);
   grep's line count against the sum of the problem classes. A contender that miscounts is reported
   and left out of the timing.
3. Times them as whole processes (start-up, reading, framing, output included; output to a file, since
   grep quits early on /dev/null), one warm-up round, then `--runs` rounds in which every contender runs
   once, the order rotating, so noise from the shared machine falls on all of them alike. `scan` runs with
   the compiled lane on and off (`DEEPINFER_LANE=python`). Reported: the median wall time, CPU time (and
   instructions, where `perf stat -e instructions` counts), peak RSS, and the median of the per-round
   ratios against mtail, for wall time and for CPU time. One-core contenders are pinned with
   `taskset -c 0`; the all-cores ones are not pinned (`scan` then uses `--jobs` = the CPUs available).
4. A refusal storm (every line a 503 access line), start-up (a one-line file), peak RSS of `scan` on a
   `--rss-lines` file, `deepinfer-agent --help` wall time, and the daemon storm (bench/daemon.py).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
AGENT = [sys.executable, "-m", "agent"]
CLASSES = ("http_429", "http_503", "oom", "samples")
GREP_PATTERN = '" 429 |" 503 |CUDA out of memory'


def generate(path: Path, lines: int, tagged: bool = True) -> Counter[str]:
    """Write the log; return the true count of each class. `tagged`: V1's process tags before every line
    (`(APIServer pid=3646) `, `(EngineCore_DP0 pid=990) `); without, the same lines as a single-process server
    prints them (the second mix: stats lines behind a bare `INFO <stamp> [file:line]` prefix)."""
    rng = random.Random(11)
    truth: Counter[str] = Counter()
    t = 1795824000.0  # 2026-11-28 00:00 UTC
    last_oom = 0.0
    running = [40, 40]
    waiting = [0, 0]
    with path.open("w", encoding="utf-8") as handle:
        out = handle if tagged else _Untagged(handle)
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


class _Untagged:
    """A file that drops the process tag (`(Name pid=N) `) every line of the mix starts with."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def write(self, text: str) -> None:
        self._handle.write(text[text.index(") ") + 2:] if text.startswith("(") else text)


def generate_refusals(path: Path, lines: int) -> Counter[str]:
    """A refusal storm: every line a 503 access line (the moment the agent matters most)."""
    line = ('(APIServer pid=3646) INFO:     10.0.0.9:40000 - "POST /v1/chat/completions HTTP/1.1" 503 Service '
            "Unavailable\n")
    path.write_text(line * lines, encoding="utf-8")
    return Counter({"http_429": 0, "http_503": lines, "oom": 0, "samples": 0})


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
    cpus: list[float] = field(default_factory=list)
    instructions: list[int] = field(default_factory=list)
    rss_kib: int = 0
    miscount: str = ""


def perf_counts_instructions() -> bool:
    """Whether `perf stat -e instructions` counts here (a VM without a PMU says `<not supported>`)."""
    if shutil.which("perf") is None:
        return False
    done = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"], capture_output=True, text=True)
    return done.returncode == 0 and re.search(r"^\d+,", done.stderr, re.M) is not None


PERF = perf_counts_instructions()
LANE_OFF = {"DEEPINFER_LANE": "python"}


def run_once(c: Contender, out_path: Path) -> tuple[float, int, float, int]:
    """(wall seconds, peak RSS KiB, CPU seconds, instructions or 0) of one whole-process run, stdout to a file."""
    env = {**os.environ, **c.env}
    rss_file = out_path.with_suffix(".rss")
    perf_file = out_path.with_suffix(".perf")
    argv = c.argv
    if PERF:
        argv = ["perf", "stat", "-x,", "-e", "instructions", "-o", str(perf_file), *argv]
    # GNU time reports the child's own peak (a child of this Python process would inherit its high-water mark)
    if Path("/usr/bin/time").exists():
        argv = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with out_path.open("wb") as out:
        start = time.perf_counter()
        code = subprocess.run(argv, stdout=out, stderr=subprocess.DEVNULL, env=env, cwd=ROOT).returncode
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code not in (0, 1):  # grep -c exits 1 when it counts 0
        raise RuntimeError(f"{c.name}: exit {code}")
    rss = int(rss_file.read_text().split()[-1]) if rss_file.exists() else 0
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    instructions = 0
    if PERF and perf_file.exists() and (m := re.search(r"^(\d+),", perf_file.read_text(), re.M)):
        instructions = int(m.group(1))
    return wall, rss, cpu, instructions


def _ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}× (pairs {min(values):.2f}–{max(values):.2f})"


def race(title: str, contenders: list[Contender], runs: int, lines: int, out_path: Path) -> None:
    """Counts first, one warm-up round, then `runs` rounds in rotating order; a table of ratios against the
    mtail contender of the same cores (speed: mtail's wall time / this one's; CPU: the same with CPU time)."""
    print(f"\n## {title}")
    for c in contenders:
        run_once(c, out_path)
        got = c.counts(out_path.read_text(encoding="utf-8", errors="replace"))
        if any(got[k] != v for k, v in c.expect.items()):
            c.miscount = f"counts {dict(got)} ≠ {dict(c.expect)}"
            print(f"MISCOUNT {c.name}: {c.miscount} (not timed)")
    timed = [c for c in contenders if not c.miscount]
    for c in timed:  # warm-up round (page cache, interpreter files)
        run_once(c, out_path)
    for r in range(runs):
        for c in timed[r % len(timed):] + timed[:r % len(timed)]:
            wall, rss, cpu, instructions = run_once(c, out_path)
            c.times.append(wall)
            c.cpus.append(cpu)
            c.instructions.append(instructions)
            c.rss_kib = max(c.rss_kib, rss)
    work = "instructions/line" if PERF else "CPU µs/line"
    print(f"{'contender':<34} {'median s':>8} {'CPU s':>6} {work:>17} {'RSS':>7}  speed vs mtail; CPU vs mtail")
    for c in timed:
        cores = c.name.rsplit(", ", 1)[-1]
        mt = next((m for m in timed if m.name.startswith("mtail") and m.name.endswith(cores)), None)
        ratio = ""
        if mt is not None and mt is not c:
            speed = [m / t for t, m in zip(c.times, mt.times, strict=True)]
            cpu = [m / t for t, m in zip(c.cpus, mt.cpus, strict=True)]
            ratio = f"{_ratio(speed)}; {_ratio(cpu)}"
        per_line = (statistics.median(c.instructions) / lines if PERF
                    else statistics.median(c.cpus) / lines * 1e6)
        print(f"{c.name:<34} {statistics.median(c.times):>8.2f} {statistics.median(c.cpus):>6.2f} "
              f"{per_line:>17,.2f} {c.rss_kib / 1024:>5.0f} MiB  {ratio}")


def scans(log: Path, truth: Counter[str], pin: list[str], cpus: int, all_cores: bool,
          jsonl: bool = True) -> list[Contender]:
    """`scan` text (and JSON lines) with the lane on and off, one core (and all cores), and mtail beside."""
    mtail = ["mtail", "--one_shot", "--one_shot_format", "prometheus", "--progs", str(ROOT / "bench/mtail"),
             "--logs", str(log), "--address", "127.0.0.1", "--port", "0"]
    out: list[Contender] = []
    layouts = [("1 core", pin, ["--jobs", "1"]), (f"all {cpus} cores", [], [])]
    for cores, prefix, jobs in layouts if all_cores else layouts[:1]:
        for lane, env in (("lane on", {}), ("lane off", LANE_OFF)):
            out.append(Contender(f"scan text, {lane}, {cores}", [*prefix, *AGENT, "scan", *jobs, str(log)],
                                 agent_text_counts, truth, env))
            if jsonl:
                out.append(Contender(f"scan jsonl, {lane}, {cores}",
                                     [*prefix, *AGENT, "scan", *jobs, "--format", "jsonl", str(log)],
                                     agent_jsonl_counts, truth, env))
        if shutil.which("mtail") is not None:
            out.append(Contender(f"mtail, {cores}", [*prefix, *mtail], mtail_counts, truth))
    return out


def startup(workdir: Path, pin: list[str], runs: int) -> None:
    """`scan` of a one-line file (lane on and off) against mtail's one-shot run on it: start-up and exit."""
    tiny = workdir / "one-line.log"
    generate(tiny, 1)
    mtail = ["mtail", "--one_shot", "--one_shot_format", "prometheus", "--progs", str(ROOT / "bench/mtail"),
             "--logs", str(tiny), "--address", "127.0.0.1", "--port", "0"]
    any_counts: Callable[[str], Counter[str]] = lambda out: Counter()  # noqa: E731
    contenders = [Contender("scan, lane on, 1 core", [*pin, *AGENT, "scan", "--jobs", "1", str(tiny)], any_counts,
                            Counter()),
                  Contender("scan, lane off, 1 core", [*pin, *AGENT, "scan", "--jobs", "1", str(tiny)], any_counts,
                            Counter(), LANE_OFF)]
    if shutil.which("mtail") is not None:
        contenders.append(Contender("mtail, 1 core", [*pin, *mtail], any_counts, Counter()))
    print("\n## start-up: a one-line file")
    for r in range(runs):
        for c in contenders[r % len(contenders):] + contenders[:r % len(contenders)]:
            wall, _, cpu, instructions = run_once(c, workdir / "out")
            c.times.append(wall)
            c.cpus.append(cpu)
            c.instructions.append(instructions)
    for c in contenders:
        extra = f", {statistics.median(c.instructions) / 1e9:.3f} G instructions" if PERF else ""
        print(f"{c.name:<24} wall {statistics.median(c.times) * 1000:>5.0f} ms, CPU "
              f"{statistics.median(c.cpus) * 1000:>5.0f} ms{extra} (median of {runs})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/deepinfer-bench"))
    ap.add_argument("--rss-lines", type=int, default=5_000_000, help="0 skips the memory run")
    ap.add_argument("--storm-lines", type=int, default=200_000, help="lines of the refusal storm (0 skips it)")
    ap.add_argument("--daemon-seconds", type=float, default=20, help="the daemon storm (bench/daemon.py; 0 skips)")
    ap.add_argument("--skip-all-cores", action="store_true")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    pin = ["taskset", "-c", "0"]
    cpus = len(os.sched_getaffinity(0))
    out_path = args.workdir / "out"
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else "?"
    print(f"load average before: {load} on {os.cpu_count()} CPUs; work measured as "
          f"{'perf stat -e instructions' if PERF else 'CPU time (perf counts no instructions here)'}")
    if shutil.which("mtail") is None:
        print("mtail not installed: no mtail contender")
    for tagged, name in ((True, "the bench's mix (V1, process tags)"), (False, "the second mix (no process tags)")):
        log = args.workdir / f"vllm-{args.lines}{'' if tagged else '-untagged'}.log"
        truth = generate(log, args.lines, tagged)
        size = log.stat().st_size
        print(f"\nlog: {name}: {args.lines:,} lines, {size / 1e6:.0f} MB; truth {dict(truth)} "
              f"(problem lines {sum(truth[k] for k in ('http_429', 'http_503', 'oom')) / args.lines:.2%})")
        contenders = scans(log, truth, pin, cpus, not args.skip_all_cores)
        if tagged:
            grep_truth = Counter({"lines": truth["http_429"] + truth["http_503"] + truth["oom"]})
            contenders.append(Contender("grep LC_ALL=C, 1 core", [*pin, "grep", "-c", "-E", GREP_PATTERN, str(log)],
                                        lambda out: Counter({"lines": int(out.strip() or 0)}), grep_truth,
                                        {"LC_ALL": "C"}))
        race(f"1 M-line mixes: {name}", contenders, args.runs, args.lines, out_path)
    if args.storm_lines:
        storm = args.workdir / f"refusals-{args.storm_lines}.log"
        truth = generate_refusals(storm, args.storm_lines)
        race(f"refusal storm: {args.storm_lines:,} 503 access lines",
             scans(storm, truth, pin, cpus, all_cores=False, jsonl=False), args.runs, args.storm_lines, out_path)
    startup(args.workdir, pin, 7)
    if args.rss_lines:
        big = args.workdir / f"vllm-{args.rss_lines}.log"
        if not big.exists():
            generate(big, args.rss_lines)
        print()
        for fmt in ("text", "jsonl"):
            c = Contender(f"scan {fmt}", [*pin, *AGENT, "scan", "--jobs", "1", "--format", fmt, str(big)],
                          agent_text_counts, Counter())
            wall, rss, _, _ = run_once(c, out_path)
            print(f"peak RSS, scan {fmt} on {args.rss_lines:,} lines (1 job): {rss / 1024:.0f} MiB ({wall:.1f} s)")
    helps = []
    for _ in range(7):
        start = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "deepinfer-agent"), "--help"], check=True,
                       stdout=subprocess.DEVNULL)
        helps.append(time.perf_counter() - start)
    print(f"deepinfer-agent --help: median {statistics.median(helps) * 1000:.0f} ms over 7 runs (target ≤ 150 ms)")
    if args.daemon_seconds:
        print("\n## daemon storm (bench/daemon.py: `run` and mtail following one log; the lane is scan's only)")
        subprocess.run([sys.executable, str(ROOT / "bench/daemon.py"), "--idle-seconds", "2", "--appends", "5",
                        "--storm-seconds", str(args.daemon_seconds)], check=False, cwd=ROOT)


if __name__ == "__main__":
    main()
