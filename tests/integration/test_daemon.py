"""The daemon as a real subprocess: real files, real SQLite, real pynvml on the fake driver, a real
Prometheus server scraping it, promtool linting it, and real signals (HUP, TERM, KILL)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import FakeNvml
from tests.unit.test_metrics_serving import Flood

pytestmark = pytest.mark.integration

OOM = ("(EngineCore_DP0 pid=990) ERROR 11-29 09:00:01 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
       "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free.")
REJECT = '(APIServer pid=851) INFO:     127.0.0.1:40000 - "POST /v1/completions HTTP/1.1" 429 Too Many Requests'
STATS = ("(APIServer pid=851) INFO 11-29 09:00:02 [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
         "Avg generation throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: 2 reqs, GPU KV cache usage: 42.0%, "
         "Prefix cache hit rate: 0.0%")


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


class Agent:
    """`deepinfer-agent run` in a subprocess, with its stderr collected and its metrics port read."""

    def __init__(self, config: Path, env: dict[str, str], number: int, wrap: list[str] | None = None) -> None:
        self.config = config
        self.env = env
        self.wrap = wrap
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.stderr_path = config.parent / f"agent-{number}.stderr"

    def start(self) -> Agent:
        self._err = self.stderr_path.open("w")
        argv = [sys.executable, "-m", "agent", "run", "--config", str(self.config)]
        if self.wrap is not None:  # e.g. a shell that mounts a filesystem first, then execs the agent
            argv = [*self.wrap[:-1], f"{self.wrap[-1]} {shlex.join(argv)}"]
        self.proc = subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL, stderr=self._err, text=True)
        match = wait_for("the metrics address in the agent's log", self._address)
        self.port = int(match.group(1))
        return self

    def _address(self) -> re.Match[str] | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"agent exited early ({self.proc.returncode}):\n{self.stderr_path.read_text()}")
        found = re.findall(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", self.stderr_path.read_text())
        return re.match(r"(\d+)", found[-1]) if found else None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
            return response.read().decode()

    def value(self, name: str, **labels: str) -> float | None:
        """The sum of the samples of `name` that carry `labels` (None when there is none)."""
        values = [float(line.rsplit(" ", 1)[1]) for line in self.metrics().splitlines()
                  if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items())]
        return sum(values) if values else None

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def node(tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[dict[str, Any]]:
    """A node: a vLLM log file, a config, one fake GPU, and the environment the agent runs in."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "vllm.log"
    log.write_text("")
    config = tmp_path / "config.yaml"
    config.write_text(f"""
model: {{preset: qwen2.5-7b, weights_gib: 14.2}}
gpu: {{vram_gib: 24, overhead_gib: 1.6}}
server: {{gpu_memory_fraction: 0.9, max_model_len: 8192, max_num_seqs: 13}}
sources:
  - path: {logs}/*.log
    server: vllm
    name: vllm
    poll_interval_seconds: 0.2
nvml: {{enabled: true, interval_seconds: 0.5}}
metrics: {{listen: 127.0.0.1, port: 0}}
store: {{path: {tmp_path}/state/agent.db}}
""")
    fake_nvml.set({"count": 1, "gpu0.name": "NVIDIA H100 80GB HBM3", "gpu0.memory_total": 85899345920,
                   "gpu0.memory_used": 21474836480, "gpu0.memory_free": 64424509440})
    # pynvml loads libnvidia-ml.so.1 by name: the fake is found the way a real driver would be.
    env = {**os.environ, **fake_nvml.env, "LD_LIBRARY_PATH": str(fake_nvml.library.parent),
           "PYTHONUNBUFFERED": "1"}
    agents: list[Agent] = []

    def agent() -> Agent:
        a = Agent(config, env, len(agents))
        agents.append(a)
        return a.start()

    yield {"log": log, "config": config, "db": tmp_path / "state" / "agent.db", "agent": agent, "tmp": tmp_path}
    for a in agents:
        a.kill()


def append(path: Path, *lines: str) -> None:
    with path.open("a") as handle:
        handle.write("".join(line + "\n" for line in lines))


def test_events_reach_the_store_and_metrics_and_survive_kill(node: dict[str, Any]) -> None:
    agent = node["agent"]()
    append(node["log"], STATS, OOM, REJECT)
    wait_for("the OOM counter", lambda: agent.value("deepinfer_events_total", kind="oom") == 1)
    assert agent.value("deepinfer_events_total", kind="http_429") == 1
    # the source is a glob: each file it matches is its own engine, `<source>/<file>` (docs/rules.md)
    assert agent.value("deepinfer_server_waiting_requests", source="vllm/vllm") == 2
    assert agent.value("deepinfer_budget_max_concurrency") == 13
    wait_for("GPU memory from the fake driver",
             lambda: agent.value("deepinfer_gpu_memory_used_bytes", gpu="0") == 21474836480)
    agent.kill()  # SIGKILL: nothing is flushed
    again = node["agent"]()
    assert again.value("deepinfer_events_total", kind="oom") == 1, "counters continue after a restart"
    append(node["log"], OOM.replace("09:00:01", "09:05:01"))
    wait_for("the second OOM", lambda: again.value("deepinfer_events_total", kind="oom") == 2)
    with sqlite3.connect(node["db"]) as db:
        kinds = [k for (k,) in db.execute("SELECT kind FROM events ORDER BY kind")]
    assert kinds == ["http_429", "oom", "oom", "pending"]


def test_sigterm_flushes_and_exits_zero_within_five_seconds(node: dict[str, Any]) -> None:
    agent = node["agent"]()
    append(node["log"], STATS)
    wait_for("the first sample", lambda: agent.value("deepinfer_server_running_requests", source="vllm/vllm") == 5)
    with node["log"].open("a") as handle:
        handle.write("no newline yet: a partial last line")
    started = time.monotonic()
    agent.signal(signal.SIGTERM)
    assert agent.wait(10) == 0
    assert time.monotonic() - started < 5
    assert "stopped" in agent.stderr_path.read_text()


def test_sighup_with_a_broken_config_keeps_the_last_good_one(node: dict[str, Any]) -> None:
    agent = node["agent"]()
    good = node["config"].read_text()
    node["config"].write_text(good.replace("max_num_seqs: 13", "max_num_seqs: -1"))
    agent.signal(signal.SIGHUP)
    wait_for("the reload error", lambda: agent.value("deepinfer_config_reload_errors_total") == 1)
    assert agent.value("deepinfer_config_last_reload_success") == 0
    append(node["log"], OOM)
    wait_for("an event after the failed reload", lambda: agent.value("deepinfer_events_total", kind="oom") == 1)
    assert "server.max_num_seqs" in agent.stderr_path.read_text()
    node["config"].write_text(good.replace("max_num_seqs: 13", "max_num_seqs: 12"))
    agent.signal(signal.SIGHUP)
    wait_for("the good reload", lambda: agent.value("deepinfer_config_max_num_seqs") == 12)
    assert agent.value("deepinfer_config_last_reload_success") == 1
    assert agent.value("deepinfer_events_total", kind="oom") == 1


def test_exposition_passes_promtool(node: dict[str, Any]) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; .ci/run installs it)")
    agent = node["agent"]()
    append(node["log"], STATS, OOM, REJECT)
    wait_for("events", lambda: agent.value("deepinfer_events_total", kind="oom") == 1)
    lint = subprocess.run([promtool, "check", "metrics"], input=agent.metrics(), capture_output=True, text=True)
    assert lint.returncode == 0, lint.stderr
    assert lint.stderr == ""


@pytest.mark.parametrize("flood", [False, True], ids=["quiet", "1000-idle-and-slowloris"])
def test_a_real_prometheus_scrapes_the_agent(node: dict[str, Any], flood: bool) -> None:
    """Also while 1,000 idle sockets and 40 slowloris connections hold the metrics port: each new
    connection is cut off by its deadline (or evicted when every slot is taken), so Prometheus's get in."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus not installed (Debian package prometheus; .ci/run installs it)")
    agent = node["agent"]()
    append(node["log"], STATS, OOM, REJECT)
    with contextlib.ExitStack() as stack:
        # Prometheus listens before the flood starts: the flood's hundreds of reconnections a second take
        # ephemeral ports, and one of them could take the port Prometheus was about to bind.
        prometheus = stack.enter_context(Prometheus(node["tmp"], agent.port, binary))
        if flood:
            _flood(stack, agent.port)
        _scraped(prometheus)
        if flood:
            cut = sum(agent.value("deepinfer_exporter_connections_total", outcome=o) or 0
                      for o in ("timed_out", "evicted"))
            assert cut >= 1000  # the flood was held off by the deadlines (and evictions), not just outwaited
    assert "Traceback" not in agent.stderr_path.read_text()


def _flood(stack: contextlib.ExitStack, port: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        pytest.skip(f"needs 1400 file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1400), hard))
    stack.callback(Flood(port, idle=1000, slow=40).close)


class Prometheus:
    """A real Prometheus scraping `target_port` every second, started and ready (or the test fails with
    why: its exit and its own log) before the test goes on."""

    def __init__(self, tmp: Path, target_port: int, binary: str) -> None:
        (tmp / "prom.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: deepinfer
    static_configs: [{{targets: ["127.0.0.1:{target_port}"]}}]
""")
        self.port = free_port()
        self.log = tmp / "prometheus.log"
        self.argv = [binary, f"--config.file={tmp / 'prom.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{self.port}"]
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        # It opens its TSDB before it listens (slow on a loaded machine): poll, never a fixed sleep.
        self.wait("Prometheus to be ready", lambda: self._get("/-/ready") is not None, timeout=90)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(10)

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as response:
                return bytes(response.read())
        except OSError:
            return None

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        return [] if body is None else list(json.loads(body)["data"]["result"])

    def wait(self, what: str, check: Callable[[], Any], timeout: float) -> Any:
        """`wait_for`, failing with what Prometheus said: whether it exited, its target's last error."""
        deadline = time.monotonic() + timeout
        while not (result := check()):
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                targets = self._get("/api/v1/targets") or b"(no answer)"
                pytest.fail(f"timed out waiting for {what}; Prometheus exit code {self.proc.poll()}; "
                            f"targets: {targets[:2000]!r}; its log ends: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return result


def _scraped(prometheus: Prometheus) -> None:
    # Prometheus applies new targets on a 5 s tick. The zero series exists before the OOM is counted, so
    # wait for the value, not for the series.
    expr = 'deepinfer_events_total{kind="oom",source="vllm/vllm"} == 1'
    result = prometheus.wait("Prometheus to have scraped the OOM counter", lambda: prometheus.query(expr), 90)
    assert float(result[0]["value"][1]) == 1
    assert prometheus.query('deepinfer_events_total{kind="http_429"}')[0]["value"][1] == "1"
    assert prometheus.query("deepinfer_gpu_memory_total_bytes")[0]["value"][1] == "85899345920"
    assert prometheus.query("up")[0]["value"][1] == "1"
    # Ten scrapes in a row succeeded (while flooded, for the flooded run): none timed out.
    prometheus.wait("ten good scrapes", lambda: prometheus.query(
        "sum_over_time(up[1m]) >= 10 and count_over_time(up[1m]) == sum_over_time(up[1m])"), 60)


def free_port() -> int:
    """A free loopback port (bind 0, read it, release it) for a server that cannot be told port 0."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_full_disk_is_survived_reported_and_caught_up(node: dict[str, Any], tmp_path: Path) -> None:
    """The store on a real, tiny tmpfs (in a private mount namespace): the agent keeps running, reports the
    failure, buffers, and once space is freed every event lands exactly once."""
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    probe = subprocess.run([unshare or "unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True) if unshare and mount else None
    if probe is None or probe.returncode != 0:
        pytest.skip("needs unshare -m and mount (root with CAP_SYS_ADMIN) for a real full filesystem")
    disk = tmp_path / "disk"
    disk.mkdir()
    config = node["config"]
    config.write_text(config.read_text().replace(f"path: {tmp_path}/state/agent.db", f"path: {disk}/agent.db"))
    mount_first = f"mount -t tmpfs -o size=1m tmpfs {disk} && exec"
    agent = Agent(config, {**os.environ, "PYTHONUNBUFFERED": "1"}, 99, [unshare or "unshare", "-m", "sh", "-c",
                                                                       mount_first]).start()
    assert agent.proc is not None
    try:
        append(node["log"], REJECT)
        written = 1
        wait_for("the first event stored", lambda: agent.value("deepinfer_events_total", kind="http_429") == 1)
        # Another process fills the disk while the agent runs (through the agent's view of the mount).
        filler = Path(f"/proc/{agent.proc.pid}/root{disk}/filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):  # ENOSPC ends the loop: the filesystem is full
            while True:
                os.write(fd, b"\0" * 4096)
        os.close(fd)
        while agent.value("deepinfer_store_up") != 0:
            append(node["log"], *[REJECT] * 200)
            written += 200
            assert written < 20000, "the database never filled the 512 KiB filesystem"
            time.sleep(0.1)
        assert agent.proc.poll() is None, "the agent must survive a full disk"
        wait_for("the write error counted", lambda: (agent.value("deepinfer_store_write_errors_total") or 0) >= 1)
        append(node["log"], *[REJECT] * 10)
        written += 10
        wait_for("records buffered", lambda: (agent.value("deepinfer_store_buffered_records") or 0) > 0)
        filler.unlink()  # the operator frees space
        wait_for("the store to recover", lambda: agent.value("deepinfer_store_up") == 1, timeout=60)
        wait_for("the buffer to drain", lambda: agent.value("deepinfer_store_buffered_records") == 0, timeout=60)
        wait_for("every 429 counted once", lambda: agent.value("deepinfer_events_total", kind="http_429") == written)
        # The tmpfs lives in the agent's mount namespace: copy the (quiet, drained) database out to read it.
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"/proc/{agent.proc.pid}/root{disk}/agent.db{suffix}")
            if source.exists():
                shutil.copyfile(source, tmp_path / f"copy.db{suffix}")
        with sqlite3.connect(tmp_path / "copy.db") as db:
            (stored,) = db.execute("SELECT count(*) FROM events WHERE kind = 'http_429'").fetchone()
        assert stored == written
        assert "database or disk is full" in agent.stderr_path.read_text()
    finally:
        agent.kill()


def test_a_taken_metrics_port_fails_the_start_clearly(node: dict[str, Any]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = node["config"]
        config.write_text(config.read_text().replace("port: 0", f"port: {port}"))
        run = subprocess.run([sys.executable, "-m", "agent", "run", "--config", str(config)], capture_output=True,
                             text=True, timeout=30, env={**os.environ, "LD_LIBRARY_PATH": ""})
    assert run.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in run.stderr and "Traceback" not in run.stderr
