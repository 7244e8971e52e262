"""`deepinfer-agent demo`: the whole product on one laptop, in about a minute, with no GPU.

What it does, each step printed as it happens:

1. starts the SIMULATED vLLM-like engine (`simulate`) with a deliberately too-high `max_num_seqs`
   (64, where the budget of its card allows 13 requests of 8,192 tokens), writing a vLLM-format log — or,
   with `--engine vllm`, the REAL vLLM 0.32 (CPU build) the engine tests install, serving a tiny model whose
   cache holds 2 requests while max_num_seqs is 4;
2. starts the agent (`run`) on that log and the engine's /metrics, as it would run on a GPU node;
3. runs the step-up load test (`loadtest`) against the engine, level by level, until preemptions
   show that the KV cache ran out, and keeps each level in the agent's store;
4. prints the advisor's recommendation (`advise`) over what the agent stored during this run;
5. writes the HTML report (`report`) of exactly this run (`--from` its start `--to` its end) and says
   where it is.

A `--workdir` that holds an earlier demo's files starts fresh: the demo removes the files it makes
(store, log, config, outputs, report) and says so, so two runs never merge into one report.

Every part runs as its own process through the real command line, exactly as an operator would run
it; the demo only orchestrates. The processes are stopped on exit, on an error and on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent import http
from agent.errors import AgentError
from agent.tools import real_engines

# The engine: the budget method's worked example (Qwen2.5-7B on a 24 GiB card, 14.2 GiB of weights,
# 1.6 GiB of overhead, util 0.90) holds 13 requests of 8,192 tokens; max_num_seqs 64 overcommits it.
MODEL, VRAM_GIB, WEIGHTS_GIB, OVERHEAD_GIB, UTIL, MAX_MODEL_LEN = "qwen2.5-7b", 24, 14.2, 1.6, 0.9, 8192
MAX_NUM_SEQS = 64
INPUT_TOKENS, OUTPUT_TOKENS = 7168, 1024  # a request that fills its max_model_len, as the budget assumes
SPEED = 40.0  # simulated time runs this many times faster than the token rates say
LEVELS = "2,4,8,12,16,24"
STARTUP_TIMEOUT_SECONDS = 30.0
# The real vLLM (--engine vllm): 250 + 250 tokens a request; 2 fit its cache, 3 and more preempt
REAL_LEVELS = "1,2,3,4,6"
REAL_STARTUP_TIMEOUT_SECONDS = 300.0
STEPS = ("simulate", "run", "loadtest", "advise", "report")  # each leaves <step>.out in the workdir


class DemoError(AgentError):
    """A step of the demo failed; the message names it and what it printed."""


@dataclass
class Demo:
    """Where the demo runs and the processes it started."""

    workdir: Path
    say: Callable[[str], None]
    processes: list[subprocess.Popen[bytes]]

    @property
    def log(self) -> Path:
        return self.workdir / "vllm.log"

    @property
    def db(self) -> Path:
        return self.workdir / "agent.db"

    @property
    def config(self) -> Path:
        return self.workdir / "agent.yaml"

    @property
    def report(self) -> Path:
        return self.workdir / "report.html"

    def made(self) -> list[Path]:
        """Every file a demo run makes here (the store with its WAL files, the log, the config, each
        command's output, the report): what a rerun removes, and nothing else."""
        names = [self.log, self.config, self.report, *(self.workdir / f"{step}.out" for step in STEPS)]
        names += [self.db, self.db.with_name(self.db.name + "-wal"), self.db.with_name(self.db.name + "-shm")]
        return [p for p in names if p.exists()]


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agent", *args]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until(what: str, ready: Callable[[], bool], process: subprocess.Popen[bytes], output: Path,
                timeout: float = STARTUP_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DemoError(f"{what} exited with code {process.returncode}:\n{_tail(output)}")
        if ready():
            return
        time.sleep(0.1)
    raise DemoError(f"{what} did not become ready within {timeout:g} s:\n{_tail(output)}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


def _answers(url: str) -> bool:
    try:
        return http.get(url, timeout_seconds=1.0).status == 200
    except AgentError:
        return False


def _start(demo: Demo, name: str, args: Sequence[str]) -> tuple[subprocess.Popen[bytes], Path]:
    output = demo.workdir / f"{name}.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(_command(*args), stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    demo.processes.append(process)
    return process, output


def _config_text(demo: Demo, metrics_port: int, engine_url: str, real: bool = False) -> str:
    # The log and the engine's /metrics under one name are one engine: the log tells what happened, the scrape
    # counts what a vLLM V1 log never prints (preemptions), and each occurrence is counted once.
    budget = ("server: {max_model_len: 512, max_num_seqs: 4}\n" if real else
              f"model: {{preset: {MODEL}, weights_gib: {WEIGHTS_GIB}}}\n"
              f"gpu: {{vram_gib: {VRAM_GIB}, overhead_gib: {OVERHEAD_GIB}}}\n"
              f"server: {{gpu_memory_fraction: {UTIL}, max_model_len: {MAX_MODEL_LEN}, max_num_seqs: {MAX_NUM_SEQS}}}\n"
              f"limits: {{max_output_tokens: {OUTPUT_TOKENS}}}\n")
    what = "REAL vLLM (CPU build)" if real else "SIMULATED engine"
    return f"""# Written by `deepinfer-agent demo`: the agent watching the {what}.
{budget}sources:
  - {{path: {demo.log.name}, server: vllm, name: vllm, start_at: beginning, poll_interval_seconds: 0.2}}
scrape:
  - {{url: "{engine_url}/metrics", server: vllm, name: vllm, interval_seconds: 2, timeout_seconds: 1}}
nvml: {{enabled: false}}
metrics: {{listen: 127.0.0.1, port: {metrics_port}}}
store: {{path: {demo.db.name}}}
"""


def _run_step(demo: Demo, title: str, args: Sequence[str], allow_exit: tuple[int, ...] = (0,)) -> str:
    """Run one command to completion; its output is returned (and kept beside the others)."""
    done = subprocess.run(_command(*args), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=600, check=False)
    (demo.workdir / f"{args[0]}.out").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode not in allow_exit:
        raise DemoError(f"{title} failed (exit {done.returncode}):\n{(done.stderr or done.stdout)[-2000:]}")
    return done.stdout


def _start_engine(demo: Demo, engine: str, port: int) -> None:
    """Start the engine the demo drives and wait until it serves: the simulator, or the real vLLM the engine
    tests installed (it starts in 30–70 s on a CPU)."""
    url = f"http://127.0.0.1:{port}"
    if engine == "vllm":
        installed = real_engines.vllm()
        if not installed.ready:
            raise DemoError(installed.how_to_install())
        demo.say(f"[1/5] starting REAL vLLM {real_engines.VLLM_VERSION} (CPU build) serving a tiny random-weight "
                 f"model: 1,024 KV tokens hold 2 requests of 512, while max_num_seqs is 4 (start-up takes a minute)")
        with demo.log.open("wb") as sink:
            process = subprocess.Popen(real_engines.vllm_argv(port), stdout=sink, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env={**os.environ, **real_engines.VLLM_ENV},
                                       start_new_session=True)
        demo.processes.append(process)
        _wait_until("vLLM", lambda: _answers(f"{url}/health"), process, demo.log, REAL_STARTUP_TIMEOUT_SECONDS)
        return
    demo.say(f"[1/5] starting the SIMULATED engine: {MODEL} on a {VRAM_GIB} GiB card, max_num_seqs "
             f"{MAX_NUM_SEQS} (the budget allows 13 requests of {MAX_MODEL_LEN:,} tokens)")
    process, output = _start(demo, "simulate", [
        "simulate", "--port", str(port), "--model", MODEL, "--vram-gib", str(VRAM_GIB),
        "--util", str(UTIL), "--weights-gib", str(WEIGHTS_GIB), "--overhead-gib", str(OVERHEAD_GIB),
        "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_NUM_SEQS), "--speed", str(SPEED),
        "--stats-interval", "0.5", "--log", str(demo.log)])
    _wait_until("the simulated engine", lambda: _answers(f"{url}/v1/models"), process, output)


def run_demo(workdir: Path | None, say: Callable[[str], None], engine: str = "simulated") -> Path:
    """Run the demo against `engine` (`simulated`, or `vllm`: the real one); return the HTML report's path.
    Processes are stopped whatever happens."""
    root = workdir or Path(tempfile.mkdtemp(prefix="deepinfer-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    demo = Demo(root.resolve(), say, [])
    earlier = demo.made()
    if earlier:
        for path in earlier:
            path.unlink()
        say(f"{demo.workdir} held an earlier demo run: its {len(earlier)} files were removed, this run starts fresh")
    started = time.monotonic()
    real = engine == "vllm"
    began_at = time.time()
    with _stopped_at_exit(demo):
        engine_port, metrics_port = _free_port(), _free_port()
        engine_url = f"http://127.0.0.1:{engine_port}"
        _start_engine(demo, engine, engine_port)

        say(f"[2/5] starting the agent on the engine's log {demo.log.name} and its /metrics, as one engine "
            f"(the agent's own metrics on http://127.0.0.1:{metrics_port}/metrics)")
        demo.config.write_text(_config_text(demo, metrics_port, engine_url, real), encoding="utf-8")
        agent, output = _start(demo, "run", ["run", "--config", str(demo.config)])
        _wait_until("the agent", lambda: _answers(f"http://127.0.0.1:{metrics_port}/metrics"), agent, output)

        levels, prompt, answer, per_level = (REAL_LEVELS, 250, 250, "6") if real else (
            LEVELS, INPUT_TOKENS, OUTPUT_TOKENS, "24")
        say(f"[3/5] step-up load test, levels {levels}: {prompt:,} prompt + {answer:,} output "
            "tokens per request, until the engine breaks")
        table = _run_step(demo, "the load test", [
            "loadtest", f"{engine_url}/v1/completions", "--levels", levels, "--requests-per-level", per_level,
            "--input-tokens", str(prompt), "--output-tokens", str(answer), "--pause", "1",
            "--timeout", "120" if real else "60", "--db", str(demo.db), "--config", str(demo.config), "--no-gpu"],
            allow_exit=(0, 4))  # 4: no level was safe, which is the demo's point on the real engine
        say(_indent(table))
        time.sleep(2.0)  # the agent reads the last stats lines and preemption warnings

        say("[4/5] what the advisor recommends, from what the agent stored:")
        # The windows are this run's: from its start (a second early, for the clock's rounding) to now.
        ran_for = f"{math.ceil(time.time() - began_at) + 1}s"
        advice = _run_step(demo, "advise", ["advise", "--db", str(demo.db), "--config", str(demo.config),
                                            "--since", ran_for])
        say(_indent(advice))

        say("[5/5] writing the post-incident report")
        _run_step(demo, "report", ["report", "--db", str(demo.db), "--config", str(demo.config),
                                   "--from", f"{began_at - 1:.0f}", "--to", f"{time.time() + 1:.0f}",
                                   "--format", "html", "--output", str(demo.report)])
    say(f"done in {time.monotonic() - started:.0f} s. Report: {demo.report}\n"
        f"Everything the demo made (config, store, logs, each command's output) is in {demo.workdir}")
    return demo.report


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.rstrip().splitlines())


@contextlib.contextmanager
def _stopped_at_exit(demo: Demo) -> Iterator[None]:
    """Stop every started process on the way out (normal exit, an error or Ctrl-C): SIGTERM, then SIGKILL."""
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _as_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        for process in reversed(demo.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        for process in demo.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            if process.poll() is None:
                process.kill()
                process.wait()


def _as_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _say(text: str) -> None:
    print(text, flush=True)


def main(workdir: Path | None, engine: str = "simulated") -> int:
    """The CLI's entry: 0 when every step ran, 1 with the failing step named, 130 on Ctrl-C."""
    try:
        run_demo(workdir, _say, engine)
    except KeyboardInterrupt:
        print("interrupted: the demo's processes were stopped", file=sys.stderr)
        return 130
    except AgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
