"""Deployment files checked by the real tools: the systemd unit (`systemd-analyze verify` and `security`),
the install script (`--dry-run`, shellcheck), the daemon's notify/watchdog protocol as systemd sees it,
the Prometheus alert rules (`promtool check rules` / `test rules`), the fleet scrape example
(`promtool check config`), and the Grafana dashboards: every panel query is run against a real
Prometheus scraping a real `deepinfer-agent run` fed a scenario log."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.fake_nvml import FakeNvml
from tests.integration.test_daemon import Agent, append, free_port, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "deepinfer-agent.service"
INSTALL = ROOT / "systemd" / "install.sh"
VENV = Path(sys.executable).parent.parent
MAX_EXPOSURE = 2.0


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (.ci/run installs it with apt-get)")
    return path


def rendered_unit(tmp_path: Path) -> Path:
    """The unit as install.sh writes it, with ExecStart pointing at this test's virtualenv, so that
    `systemd-analyze verify` can resolve the binary (it fails on a missing one)."""
    assert (VENV / "bin" / "deepinfer-agent").exists(), "the package is not installed in this virtualenv"
    text = subprocess.run(["bash", str(INSTALL), "--print-unit", "--prefix", str(VENV)],
                          capture_output=True, text=True, check=True).stdout
    path = tmp_path / "deepinfer-agent.service"
    path.write_text(text)
    return path


def unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


# --- systemd unit ------------------------------------------------------------------------------------

def test_unit_verifies_with_nothing_on_stderr(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    # verify exits 0 on unknown keys and bad values (it only warns): stderr must be empty too.
    result = subprocess.run([analyze, "verify", str(rendered_unit(tmp_path))], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout == ""


def test_unit_security_exposure_is_at_most_two(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    unit = rendered_unit(tmp_path)
    # --threshold is on a 0–100 scale: 20 means an overall exposure of 2.0.
    result = subprocess.run([analyze, "security", "--offline=true", f"--threshold={int(MAX_EXPOSURE * 10)}",
                             str(unit)], capture_output=True, text=True)
    match = re.search(r"Overall exposure level for deepinfer-agent\.service: (\d+\.\d)", result.stdout)
    assert match, result.stdout + result.stderr
    score = float(match.group(1))
    print(f"systemd-analyze security exposure: {score}")
    assert score <= MAX_EXPOSURE, result.stdout
    assert result.returncode == 0, result.stdout
    documented = re.search(r"rates the unit \*\*(\d+\.\d) \(OK\)\*\*", (ROOT / "docs" / "deployment.md").read_text())
    assert documented and float(documented.group(1)) == score, "docs/deployment.md states another score"


def test_unit_keeps_nvml_devices_reachable_and_speaks_notify() -> None:
    s = unit_settings(UNIT.read_text())
    assert s["Type"] == ["notify"]
    assert s["ExecStart"] == ["/opt/deepinfer-agent/bin/deepinfer-agent run --config /etc/deepinfer-agent/config.yaml"]
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert s["Restart"] == ["on-failure"]
    # PrivateDevices=yes hides /dev/nvidia* and NVML fails: a closed device list that allows them instead.
    assert "PrivateDevices" not in s
    assert s["DevicePolicy"] == ["closed"]
    assert "char-nvidia* rw" in s["DeviceAllow"]
    # NVML reads /proc/driver/nvidia: ProcSubset=pid would hide it.
    assert "ProcSubset" not in s
    assert s["SupplementaryGroups"] == ["adm systemd-journal"]
    assert s["StateDirectory"] == ["deepinfer-agent"]
    assert s["ConfigurationDirectory"] == ["deepinfer-agent"]


def test_daemon_pings_the_watchdog_well_within_watchdog_sec(tmp_path: Path) -> None:
    """What systemd sees of `Type=notify` + `WatchdogSec=`: READY=1, then WATCHDOG=1 every WatchdogSec/2."""
    watchdog_sec = int(unit_settings(UNIT.read_text())["WatchdogSec"][0].removesuffix("s"))
    # The loop wakes at least every 5 s (the longest idle wait), so a ping is at most 5 s late.
    assert watchdog_sec / 2 + 5 < watchdog_sec
    notify = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    sock.settimeout(10)
    (tmp_path / "engine.log").write_text("")
    config = tmp_path / "config.yaml"
    config.write_text(f"""
sources: [{{path: {tmp_path}/engine.log, server: vllm, poll_interval_seconds: 0.2}}]
metrics: {{listen: 127.0.0.1, port: 0}}
store: {{path: {tmp_path}/agent.db}}
""")
    env = {**os.environ, "NOTIFY_SOCKET": str(notify), "WATCHDOG_USEC": "1000000"}  # a ping every 0.5 s
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--config", str(config)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        messages: list[str] = []
        started = time.monotonic()
        messages.append(sock.recv(4096).decode())
        proc.send_signal(signal.SIGSTOP)  # held still just after READY=1
        # READY comes after the first step: the log was found and its position stored, so a line written
        # from now on is read (and one written before the start is not taken for a new one).
        with sqlite3.connect(tmp_path / "agent.db") as db:
            paths = [p for (p,) in db.execute("SELECT path FROM cursors")]
        proc.send_signal(signal.SIGCONT)
        assert str(tmp_path / "engine.log") in paths
        while messages.count("WATCHDOG=1") < 3:
            messages.append(sock.recv(4096).decode())
        assert messages[0].startswith("READY=1"), messages
        assert time.monotonic() - started < 10
        proc.terminate()
        assert proc.wait(10) == 0
        while not messages[-1].startswith("STOPPING=1"):
            messages.append(sock.recv(4096).decode())
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()


# --- install.sh --------------------------------------------------------------------------------------

def dry_run(tmp_path: Path, *args: str) -> str:
    result = subprocess.run(["bash", str(INSTALL), "--dry-run", "--prefix", str(tmp_path / "venv"),
                             "--config-dir", str(tmp_path / "etc"), "--unit-dir", str(tmp_path / "units"), *args],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_install_dry_run_on_a_fresh_node_prints_every_step_and_changes_nothing(tmp_path: Path) -> None:
    out = dry_run(tmp_path, "--user", "deepinfer-test-no-such-user")
    steps = [line for line in out.splitlines() if line.startswith("+ ")]
    expected = [
        "+ useradd --system --user-group",
        f"+ python3 -m venv {tmp_path}/venv",
        f"+ {tmp_path}/venv/bin/pip install --quiet --upgrade pip",
        f"+ {tmp_path}/venv/bin/pip install --quiet --upgrade {ROOT}",
        f"+ ln -sfn {tmp_path}/venv/bin/deepinfer-agent /usr/local/bin/deepinfer-agent",
        f"+ install -d -m 0755 {tmp_path}/etc",
        f"+ install -m 0640 -o root -g deepinfer-test-no-such-user {ROOT}/examples/config.yaml "
        f"{tmp_path}/etc/config.yaml",
        f"+ {tmp_path}/venv/bin/deepinfer-agent check --config {tmp_path}/etc/config.yaml",
        f"+ write {tmp_path}/units/deepinfer-agent.service",
        "+ systemctl daemon-reload",
        "+ systemctl enable deepinfer-agent",
        "+ systemctl restart deepinfer-agent",
    ]
    assert len(steps) == len(expected), out
    for step, want in zip(steps, expected, strict=True):
        assert step.startswith(want), (step, want)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a dry run created files"


def test_install_dry_run_again_keeps_what_is_there(tmp_path: Path) -> None:
    """Idempotent: an existing user, virtualenv, config and identical unit are left alone."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "config.yaml").write_text("# the operator's own\n")
    (tmp_path / "units").mkdir()
    unit = subprocess.run(["bash", str(INSTALL), "--print-unit", "--prefix", str(tmp_path / "venv"),
                           "--config-dir", str(tmp_path / "etc"), "--user", "root"],
                          capture_output=True, text=True, check=True).stdout
    (tmp_path / "units" / "deepinfer-agent.service").write_text(unit)
    out = dry_run(tmp_path, "--user", "root", "--no-start")
    assert "# user root exists" in out
    assert f"# virtualenv {tmp_path}/venv exists" in out
    assert f"# {tmp_path}/etc/config.yaml exists: kept as it is" in out
    assert f"# {tmp_path}/units/deepinfer-agent.service is up to date" in out
    assert "useradd" not in out and "-m venv" not in out and "install -m 0640" not in out and "+ write" not in out
    assert "+ systemctl enable deepinfer-agent" in out
    assert "systemctl restart" not in out
    assert (tmp_path / "etc" / "config.yaml").read_text() == "# the operator's own\n"


def test_install_script_is_shellcheck_clean() -> None:
    shellcheck = tool("shellcheck")
    result = subprocess.run([shellcheck, str(INSTALL)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    assert "set -euo pipefail" in INSTALL.read_text()


# --- Prometheus alert rules --------------------------------------------------------------------------

PROMETHEUS = ROOT / "prometheus"


def test_alert_rules_pass_promtool_check_and_unit_tests() -> None:
    promtool = tool("promtool")
    check = subprocess.run([promtool, "check", "rules", str(PROMETHEUS / "alerts.yaml")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout
    test = subprocess.run([promtool, "test", "rules", str(PROMETHEUS / "alerts_test.yaml")],
                          capture_output=True, text=True, cwd=PROMETHEUS)
    assert test.returncode == 0, test.stdout + test.stderr
    assert "SUCCESS" in test.stdout


def test_every_alert_is_tested_firing_and_not_firing_and_names_the_runbook() -> None:
    rules = [rule for group in yaml.safe_load((PROMETHEUS / "alerts.yaml").read_text())["groups"]
             for rule in group["rules"]]
    alerts = {rule["alert"] for rule in rules}
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load((PROMETHEUS / "alerts_test.yaml").read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert alerts - fired == set(), "alerts never tested firing"
    assert alerts - quiet == set(), "alerts never tested not firing"
    for rule in rules:
        assert "deepinfer-agent report --since 1h" in rule["annotations"]["runbook"], rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


# --- fleet scrape example ------------------------------------------------------------------------------

def test_fleet_scrape_example_passes_promtool_check_config(tmp_path: Path) -> None:
    promtool = tool("promtool")
    # The example names its alert rules and file_sd lists by relative path: check it where they resolve.
    shutil.copy(PROMETHEUS / "scrape-example.yaml", tmp_path / "prometheus.yml")
    shutil.copy(PROMETHEUS / "alerts.yaml", tmp_path / "alerts.yaml")
    (tmp_path / "targets").mkdir()
    shutil.copy(PROMETHEUS / "targets-example.yaml", tmp_path / "targets" / "gpu-nodes.yaml")
    result = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# --- Grafana dashboards against a real Prometheus scraping the real agent --------------------------------

def generator() -> ModuleType:
    """grafana/generate.py as a module (it is a script, not part of the installed package)."""
    pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk needs Python 3.11+ "
                        "(the test extra installs it there)")
    spec = importlib.util.spec_from_file_location("grafana_generate", ROOT / "grafana" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_committed_dashboards_equal_what_the_generator_makes() -> None:
    gen = generator()
    for relative, text in gen.outputs().items():
        committed = ROOT / "grafana" / relative
        assert committed.exists(), f"{relative} is not committed: run python grafana/generate.py"
        assert committed.read_text() == text, f"{relative} is stale: run python grafana/generate.py"


def test_dashboards_have_fleet_variables_and_provisioning_is_valid() -> None:
    gen = generator()
    for spec in gen.DASHBOARDS:
        model = gen.build(spec)
        variables = {v["name"]: v for v in model["templating"]["list"]}
        assert list(variables) == ["datasource", "job", "instance", "engine"]
        assert variables["datasource"]["type"] == "datasource"
        for name in ("job", "instance", "engine"):
            assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
        for panel in model["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
                for target in panel["targets"]:
                    for var in ("$job", "$instance"):
                        assert var in target["expr"], (panel["title"], target["expr"])
    listing = subprocess.run([sys.executable, str(ROOT / "grafana" / "generate.py"), "--list-metrics"],
                             capture_output=True, text=True, check=True)
    assert json.loads(listing.stdout) == gen.panel_metrics()
    datasources = yaml.safe_load((ROOT / "grafana/provisioning/datasources/deepinfer-agent.yaml").read_text())
    assert datasources["datasources"][0]["type"] == "prometheus"
    assert datasources["datasources"][0]["uid"] == "prometheus"
    providers = yaml.safe_load((ROOT / "grafana/provisioning/dashboards/deepinfer-agent.yaml").read_text())
    assert providers["providers"][0]["type"] == "file"


ENGINE_METRICS = ROOT / "tests" / "data" / "scrape" / "vllm-v1-0.33.txt"


def scenario_lines() -> list[str]:
    """One incident of every kind the panels draw, stamped now (old stamps would fall out of retention)."""
    now = time.strftime("%m-%d %H:%M:%S", time.gmtime())
    api, core = f"(APIServer pid=7) INFO {now}", f"(EngineCore_DP0 pid=40) INFO {now}"
    err, core_err = f"(APIServer pid=7) ERROR {now}", f"(EngineCore_DP0 pid=40) ERROR {now}"
    return [
        f"{api} [utils.py:326] non-default args: {{'model': 'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 8192, "
        "'gpu_memory_utilization': 0.9, 'max_num_seqs': 13}",
        f"{core} [gpu_worker.py:276] Available KV cache memory: 5.67 GiB",
        f"{core} [kv_cache_utils.py:1204] GPU KV cache size: 106,176 tokens, Maximum concurrency for 8,192 tokens "
        "per request: 12.96x",
        f"{api} [loggers.py:257] Engine 000: Avg prompt throughput: 5210.3 tokens/s, Avg generation throughput: "
        "1830.2 tokens/s, Running: 13 reqs, Waiting: 20 reqs, Deferred: 3 reqs, Preemptions: 7, GPU KV cache usage: "
        "99.4%, Prefix cache hit rate: 31.0%",
        f"{err} [serving.py:312] The engine is currently busy and cannot accept new requests. Please try again later "
        "or on a different instance.",
        '(APIServer pid=7) INFO:     10.1.2.3:40000 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable',
        '(APIServer pid=7) INFO:     10.1.2.3:40001 - "POST /v1/chat/completions HTTP/1.1" 429 Too Many Requests',
        f"{err} [serving_chat.py:900] Request chatcmpl-1 failed: deadline exceeded after completion_tokens=512",
        f"{core_err} [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
        "has a total capacity of 79.10 GiB of which 1.20 GiB is free.",
        f"{err} [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
        "stack trace (above) for the root cause.",
        f"{api} [loggers.py:257] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: "
        "900.0 tokens/s, Running: 4 reqs, Waiting: 1 reqs, GPU KV cache usage: 30.0%, Prefix cache hit rate: 30.0%",
    ]


def v0_stats() -> str:
    """A stats line in the V0 format, the one that reports swapped requests, stamped now (the newest sample
    of the second engine, after its scenario)."""
    return (f"INFO {time.strftime('%m-%d %H:%M:%S', time.gmtime())} metrics.py:229] Avg prompt throughput: 0.0 "
            "tokens/s, Avg generation throughput: 950.1 tokens/s, Running: 256 reqs, Swapped: 3 reqs, Pending: 40 "
            "reqs, GPU KV cache usage: 99.9%, CPU KV cache usage: 4.0%")


# vLLM's three latency histograms as its /metrics writes them (the 0.33 fixture above was taken idle): ten
# requests per scrape, ttft 0.05–0.5 s, queue under 0.1 s, end to end 1–5 s.
LATENCY = "".join(
    f"# TYPE vllm:{name} histogram\n"
    + "".join(f'vllm:{name}_bucket{{engine="0",le="{le}",model_name="Qwen/Qwen2.5-7B-Instruct"}} {n}\n'
              for le, n in buckets)
    + f'vllm:{name}_sum{{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"}} {total}\n'
    + f'vllm:{name}_count{{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"}} 10.0\n'
    for name, buckets, total in (
        ("time_to_first_token_seconds", (("0.05", 2.0), ("0.5", 10.0), ("+Inf", 10.0)), 2.1),
        ("request_queue_time_seconds", (("0.1", 10.0), ("+Inf", 10.0)), 0.3),
        ("e2e_request_latency_seconds", (("1.0", 0.0), ("5.0", 10.0), ("+Inf", 10.0)), 31.0)))


def grown(exposition: str, times: int) -> str:
    """The exposition with every counter and histogram sample (`_total`, `_bucket`, `_sum`, `_count`)
    multiplied by `times`: the same distribution and ratios, `times` as many requests, so each scrape sees
    requests finish."""
    out = []
    for line in exposition.splitlines():
        name, _, value = line.rpartition(" ")
        if line and not line.startswith("#") and name.split("{")[0].endswith(("_total", "_bucket", "_sum", "_count")):
            line = f"{name} {float(value) * times!r}"
        out.append(line)
    return "\n".join(out) + "\n"


class _EngineMetrics(BaseHTTPRequestHandler):
    """An engine's /metrics, served from a real vLLM exposition fixture, its histograms growing per scrape."""

    served = 0

    def do_GET(self) -> None:
        _EngineMetrics.served += 1
        body = grown(ENGINE_METRICS.read_text() + LATENCY, _EngineMetrics.served).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads the agent's counters, not this server's log."""


@dataclass
class Fleet:
    """A real agent (fed the scenario) scraped every second by a real Prometheus."""

    agent: Agent
    prom_port: int

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code in (400, 422):  # a bad query: fail with Prometheus's own words
                pytest.fail(f"Prometheus rejected {expr!r}: {exc.read().decode()}")
            return []  # 503 while it starts
        except OSError:
            return []
        return list(body["data"]["result"])

    def label_values(self, selector: str, label: str) -> list[str]:
        """What a Grafana `label_values(selector, label)` variable offers (the same API call)."""
        url = (f"http://127.0.0.1:{self.prom_port}/api/v1/label/{label}/values?"
               + urllib.parse.urlencode({"match[]": selector}))
        with urllib.request.urlopen(url, timeout=5) as response:
            return sorted(v for v in json.load(response)["data"] if v)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, fake_nvml_library: Path) -> Iterator[Fleet]:
    prometheus = tool("prometheus")
    tmp = tmp_path_factory.mktemp("fleet")
    engine = ThreadingHTTPServer(("127.0.0.1", 0), _EngineMetrics)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    nvml = FakeNvml(tmp / "nvml.conf", fake_nvml_library)
    gpu = {"name": "NVIDIA H100 80GB HBM3", "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "clocks_event_reasons": 4,
           "ecc_corrected": 2, "remapped_correctable": 1, "memory_total": 85899345920, "memory_used": 77309411328,
           "memory_free": 8589934592, "memory_reserved": 536870912, "util_gpu": 97, "util_memory": 60,
           "temperature": 71, "power_mw": 650000, "power_limit_mw": 700000, "procs": "1234:75161927680"}
    nvml.set({"count": 2, **{f"gpu{i}.{k}": v for i in (0, 1) for k, v in gpu.items()},
              "gpu0.uuid": "GPU-0000", "gpu1.uuid": "GPU-0001",
              # one call failing on the second card, so NVML's error counter has a series
              "gpu1.rc.nvmlDeviceGetPowerUsage": 999})
    logs = tmp / "logs"
    logs.mkdir()
    (logs / "vllm.log").write_text("")
    (logs / "legacy.log").write_text("")
    config = tmp / "config.yaml"
    good = f"""
model: {{preset: qwen2.5-7b, weights_gib: 14.2}}
gpu: {{vram_gib: 24, overhead_gib: 1.6}}
server: {{gpu_memory_fraction: 0.9, max_model_len: 8192, max_num_seqs: 13, max_queue_size: 32}}
sources:
  - {{path: {logs}/vllm.log, server: vllm, name: vllm, poll_interval_seconds: 0.2, start_at: beginning}}
  - {{path: {logs}/legacy.log, server: vllm, name: legacy, poll_interval_seconds: 0.2, start_at: beginning}}
scrape:
  - {{url: "http://127.0.0.1:{engine.server_address[1]}/metrics", server: vllm, name: vllm, interval_seconds: 1}}
  - {{url: "http://127.0.0.1:{engine.server_address[1]}/metrics", server: vllm, name: legacy, interval_seconds: 1}}
nvml: {{enabled: true, interval_seconds: 0.5}}
metrics: {{listen: 127.0.0.1, port: 0}}
store: {{path: {tmp}/state/agent.db}}
"""
    config.write_text(good)
    env = {**os.environ, **nvml.env, "LD_LIBRARY_PATH": str(fake_nvml_library.parent), "PYTHONUNBUFFERED": "1"}
    agent = Agent(config, env, 0).start()
    prom_port = free_port()
    (tmp / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: deepinfer-agent
    static_configs: [{{targets: ["127.0.0.1:{agent.port}"]}}]
""")
    prom = subprocess.Popen([prometheus, f"--config.file={tmp / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fleet = Fleet(agent, prom_port)
    try:
        # Prometheus applies new targets on a 5 s tick: poll, never sleep a fixed time.
        wait_for("Prometheus's first scrape of the agent", lambda: fleet.query('up{job="deepinfer-agent"} == 1'),
                 timeout=30)
        # The incidents arrive after the first scrape, so counters rise while Prometheus watches.
        append(logs / "vllm.log", *scenario_lines())
        append(logs / "legacy.log", *scenario_lines(), v0_stats())
        nvml.queue_xid(0, 43)
        wait_for("the timeout event", lambda: agent.value("deepinfer_events_total", kind="deadline_exceeded"))
        wait_for("the Xid", lambda: agent.value("deepinfer_gpu_xid_errors_total", gpu="0", xid="43"))
        # A rejected reload, then an accepted one: both reload counters get a series.
        config.write_text(good.replace("max_num_seqs: 13", "max_num_seqs: -1"))
        agent.signal(signal.SIGHUP)
        wait_for("the rejected reload", lambda: agent.value("deepinfer_config_reload_errors_total") == 1)
        config.write_text(good)
        agent.signal(signal.SIGHUP)
        wait_for("the accepted reload", lambda: agent.value("deepinfer_config_last_reload_success") == 1)
        yield fleet
    finally:
        prom.terminate()
        prom.wait(10)
        agent.kill()
        engine.shutdown()
        engine.server_close()


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """What Grafana does before sending a query: each variable at its value (regex-escaped, as Grafana does
    for a Prometheus regex matcher) or at "All" (`.*`), and the rate window."""
    for var in ("job", "instance", "engine"):
        value = (values or {}).get(var)
        expr = expr.replace(f"${var}", ".*" if value is None else re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value))
    return expr.replace("$__rate_interval", "1m")


def exported_metrics(exposition: str) -> set[str]:
    """Every metric name the exporter declares (a family with no sample yet counts too)."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            suffix = {"counter": "_total", "info": "_info", "histogram": "_bucket"}.get(kind, "")
            names.add(name if name.endswith(suffix) else name + suffix)
    return names


def test_every_panel_query_returns_data_from_a_real_prometheus(fleet: Fleet) -> None:
    gen = generator()
    pending = {**gen.PENDING_ADVISOR, **gen.PENDING_EXPORTER}
    ran, skipped = 0, []
    for spec, panel in gen.panels():
        for query in panel.queries:
            waiting_for = sorted(query.metrics() & pending.keys())
            if waiting_for:
                skipped.append(f"{spec.uid} / {panel.title}: {', '.join(waiting_for)}")
                continue
            expr = substitute(query.expr)
            result = wait_for(f"data for {spec.uid} / {panel.title}: {expr}", lambda e=expr: fleet.query(e),
                              timeout=30)
            assert all(len(r["value"]) == 2 for r in result)
            ran += 1
    assert ran >= 40
    # Queries that wait for metrics not exported yet (PENDING_ADVISOR / PENDING_EXPORTER) are listed, not run.
    print("skipped, pending:", *skipped, sep="\n  ")


# Panels that draw only what NVML or the kernel reports about the card: empty on a node without a GPU.
GPU_PANELS = frozenset({"GPU memory: used vs total vs the engine's ceiling", "GPU utilization",
                        "GPU temperature and power", "GPU clocks and throttling", "GPU memory health", "GPUs",
                        "Xid errors"})


def dropdown_values(fleet: Fleet, model: dict[str, Any]) -> dict[str, list[str]]:
    """Each query variable's concrete values as Grafana would list them (job first: the others depend on it)."""
    values: dict[str, list[str]] = {}
    for variable in model["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
        assert match, variable["query"]
        values[variable["name"]] = wait_for(f"values for ${variable['name']}", lambda m=match: fleet.label_values(
            substitute(m.group(1)), m.group(2)))
    return values


def empty_panels_per_engine(fleet: Fleet, expected_engines: list[str]) -> dict[str, list[str]]:
    """Grafana with one job, one node and one engine picked (each value the dropdowns offer, in turn): every
    query is run; the panels that drew nothing (GPU-only ones aside) per engine. Prints the counts."""
    gen = generator()
    deadline = time.monotonic() + 30  # first each panel at "All", so that Prometheus has scraped enough
    for _, panel in gen.panels():
        exprs = [substitute(q.expr) for q in panel.queries]
        while (panel.title not in GPU_PANELS and time.monotonic() < deadline
               and not any(fleet.query(e) for e in exprs)):
            time.sleep(0.5)
    values = dropdown_values(fleet, gen.build(gen.NODE_OVERVIEW))
    assert values["engine"] == expected_engines, values
    combos = [{"job": j, "instance": i, "engine": e}
              for j in values["job"] for i in values["instance"] for e in values["engine"]]
    empty: dict[str, list[str]] = {}
    for combo in combos:
        panels = queries = panels_with_data = queries_with_data = 0
        for spec, panel in gen.panels():
            answered = [bool(fleet.query(substitute(q.expr, combo))) for q in panel.queries]
            panels, queries = panels + 1, queries + len(answered)
            panels_with_data += any(answered)
            queries_with_data += sum(answered)
            if not any(answered) and panel.title not in GPU_PANELS:
                empty.setdefault(combo["engine"], []).append(f"{spec.uid} / {panel.title}")
        print(f"engine={combo['engine']}: panels with data {panels_with_data}/{panels}, "
              f"queries with data {queries_with_data}/{queries}")
    return empty


def test_every_panel_returns_data_for_each_value_the_dropdowns_offer(fleet: Fleet) -> None:
    """Two engines (each a log and a scrape) and two GPUs: every panel draws something for each engine."""
    assert empty_panels_per_engine(fleet, ["legacy", "vllm"]) == {}


def test_on_the_simulator_demo_every_panel_but_the_gpu_ones_returns_data(tmp_path: Path) -> None:
    """What `deepinfer-agent demo` runs (the simulated engine, the agent on its log and /metrics with the
    demo's own config, a step-up load test), scraped by a real Prometheus: with no GPU, every other panel
    draws data for the demo's engine."""
    from agent.tools import demo

    prometheus = tool("prometheus")
    engine_port = free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    sim = subprocess.Popen([sys.executable, "-m", "agent", "simulate", "--port", str(engine_port), "--model",
                            demo.MODEL, "--vram-gib", str(demo.VRAM_GIB), "--util", str(demo.UTIL), "--weights-gib",
                            str(demo.WEIGHTS_GIB), "--overhead-gib", str(demo.OVERHEAD_GIB), "--max-model-len",
                            str(demo.MAX_MODEL_LEN), "--max-num-seqs", str(demo.MAX_NUM_SEQS), "--speed",
                            str(demo.SPEED), "--stats-interval", "0.5", "--log", str(tmp_path / "vllm.log")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agent: Agent | None = None
    prom: subprocess.Popen[bytes] | None = None
    try:
        wait_for("the simulated engine", lambda: demo._answers(f"{engine_url}/v1/models"))
        config = tmp_path / "agent.yaml"
        config.write_text(demo._config_text(demo.Demo(tmp_path, print, []), 0, engine_url))
        agent = Agent(config, {**os.environ, "PYTHONUNBUFFERED": "1"}, 0).start()
        prom_port = free_port()
        (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: deepinfer-agent
    static_configs: [{{targets: ["127.0.0.1:{agent.port}"]}}]
""")
        prom = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fleet = Fleet(agent, prom_port)
        wait_for("Prometheus's first scrape", lambda: fleet.query('up{job="deepinfer-agent"} == 1'), timeout=30)
        load = subprocess.run([sys.executable, "-m", "agent", "loadtest", f"{engine_url}/v1/completions",
                               "--levels", "8,16", "--requests-per-level", "16", "--input-tokens",
                               str(demo.INPUT_TOKENS), "--output-tokens", str(demo.OUTPUT_TOKENS), "--pause", "1",
                               "--timeout", "60", "--db", str(tmp_path / "agent.db"), "--config", str(config),
                               "--no-gpu"], capture_output=True, text=True, timeout=180, check=False)
        assert load.returncode in (0, 4), load.stdout + load.stderr  # 4: it ran, no level was safe
        assert empty_panels_per_engine(fleet, ["vllm"]) == {}
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(10)
        if agent is not None:
            agent.kill()
        sim.terminate()
        sim.wait(10)


def test_template_variable_queries_return_values(fleet: Fleet) -> None:
    gen = generator()
    for variable in gen.build(gen.NODE_OVERVIEW)["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
        assert match, variable["query"]
        expr, label = substitute(match.group(1)), match.group(2)
        result = wait_for(f"values for ${variable['name']}", lambda e=expr: fleet.query(e))
        assert all(label in r["metric"] for r in result), (variable["name"], result)
    sources = {r["metric"]["source"] for r in fleet.query("deepinfer_source_up")}
    assert sources == {"vllm", "legacy"}
    engines = {r["metric"]["engine"] for r in fleet.query('{__name__=~"deepinfer_source_up|deepinfer_scrape_up"}')}
    assert engines == {"vllm", "legacy"}


def test_panels_use_only_exported_metrics_and_every_metric_has_a_place(fleet: Fleet) -> None:
    gen = generator()
    exported = exported_metrics(fleet.agent.metrics())
    on_panels = set().union(*(set(panel.metrics()) for _, panel in gen.panels()))
    pending = gen.PENDING_ADVISOR.keys() | gen.PENDING_EXPORTER.keys()
    unknown = on_panels - exported - pending - gen.PROMETHEUS_METRICS
    assert unknown == set(), "panels query metrics the agent does not export"
    homeless = exported - on_panels - gen.NOT_ON_A_PANEL.keys()
    assert homeless == set(), "exported metrics on no panel and not in NOT_ON_A_PANEL (with a reason)"
    stale = gen.NOT_ON_A_PANEL.keys() - exported
    assert stale == set(), "NOT_ON_A_PANEL names metrics the agent no longer exports"
    both = gen.NOT_ON_A_PANEL.keys() & on_panels
    assert both == set(), "NOT_ON_A_PANEL names metrics that are on a panel"
    rules = (PROMETHEUS / "alerts.yaml").read_text()
    unknown_in_rules = gen.metrics_in(rules) - exported - pending - gen.PROMETHEUS_METRICS
    assert unknown_in_rules == set(), "alert rules use metrics the agent does not export"


@pytest.mark.parametrize("which", ["PENDING_ADVISOR", "PENDING_EXPORTER"])
def test_pending_metrics_are_not_exported_yet(fleet: Fleet, which: str) -> None:
    """Skips while the metrics are pending; fails once the agent exports one, so the entry is removed."""
    gen = generator()
    pending: dict[str, str] = getattr(gen, which)
    landed = pending.keys() & exported_metrics(fleet.agent.metrics())
    assert landed == set(), f"now exported: remove {sorted(landed)} from {which} in grafana/generate.py"
    if pending:
        pytest.skip(f"{which} in grafana/generate.py: panels on {', '.join(sorted(pending))} are not run "
                    f"against Prometheus until the agent exports them ({'; '.join(pending.values())})")


# --- the unit under a real systemd ---------------------------------------------------------------------

BOOT = r"""
set -e
# Everything the install writes lands in overlays whose upper layers are in $1; /run, /tmp and /var/tmp
# are fresh tmpfs; systemd knows only the units in /run/units (no host unit can be pulled in: a host's
# sysinit.target would run systemd-tmpfiles, which empties the shared /tmp).
for d in etc opt usr/local var/lib var/log; do
  n=${d//\//_}; mkdir -p "$1/$n/up" "$1/$n/work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$1/$n/up,workdir=$1/$n/work" "/$d"
done
mount -t tmpfs tmpfs /run
mkdir -p /run/units /var/log/vllm /etc/deepinfer-agent
cp "$1/config.yaml" /etc/deepinfer-agent/config.yaml
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /var/tmp
: > /var/log/vllm/engine.log
chgrp adm /var/log/vllm /var/log/vllm/engine.log; chmod 0750 /var/log/vllm; chmod 0640 /var/log/vllm/engine.log
printf '[Unit]\nDescription=test\n' > /run/units/test.target
for t in sysinit basic multi-user network-online; do printf '[Unit]\nDescription=stub\n' > /run/units/$t.target; done
: > /run/console; mount --bind /run/console /dev/console
mount -t proc proc /proc
export SYSTEMD_UNIT_PATH=/run/units
exec /lib/systemd/systemd --system --unit=test.target --log-target=console --show-status=no
"""


# The directories BOOT mounts a fresh tmpfs over: a checkout under one is invisible inside the namespace.
HIDDEN_BY_BOOT = (Path("/tmp"), Path("/var/tmp"), Path("/run"))


class NamespacedSystemd:
    """systemd as PID 1 of private PID/mount/UTS/IPC namespaces (the network is the host's loopback)."""

    def __init__(self, layers: Path) -> None:
        self.proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount", "--uts", "--ipc",
                                      "--propagation", "private", "bash", "-c", BOOT, "boot", str(layers)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.pid = int(wait_for("systemd in the namespace", self._child, timeout=10))

    def _child(self) -> str:
        if self.proc.poll() is not None:
            why = self.proc.stderr.read() if self.proc.stderr else ""
            pytest.skip(f"cannot boot systemd in a namespace here: {why}")
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        if children and Path(f"/proc/{children[0]}/comm").read_text().strip() == "systemd":
            return children[0]
        return ""

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-p", "-u", "-i", f"--wd={ROOT}", "--",
                               "env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *argv],
                              capture_output=True, text=True, timeout=timeout)

    def show(self, *props: str) -> dict[str, str]:
        out = self.run("systemctl", "show", "deepinfer-agent", *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines())

    def close(self) -> None:
        os.kill(self.pid, signal.SIGKILL)  # PID 1 of the namespace: everything in it goes with it
        self.proc.wait(10)


@pytest.mark.skipif(os.geteuid() != 0, reason="booting systemd in namespaces needs root")
def test_install_for_real_and_the_unit_runs_under_a_real_systemd(tmp_path: Path) -> None:
    """install.sh for real (user, virtualenv, config, unit, enable, restart) in namespaces, then the hardened
    unit under a real systemd: READY, watchdog, reading a 0640 root:adm log, reload, idempotent re-install."""
    for needed in ("unshare", "nsenter"):
        tool(needed)
    hidden = next((d for d in HIDDEN_BY_BOOT if ROOT.is_relative_to(d)), None)
    if hidden is not None:
        pytest.skip(f"the checkout is under {hidden}, which the namespace mounts a fresh tmpfs over (install.sh "
                    "would not be found): clone it elsewhere to run this test")
    if not Path("/lib/systemd/systemd").exists() or not Path("/usr/bin/python3").exists():
        pytest.skip("needs /lib/systemd/systemd and /usr/bin/python3 (the interpreter the service runs)")
    port = free_port()
    (tmp_path / "config.yaml").write_text(f"""
sources: [{{path: /var/log/vllm/*.log, server: vllm, name: vllm}}]
nvml: {{enabled: true}}
metrics: {{listen: 127.0.0.1, port: {port}}}
store: {{path: /var/lib/deepinfer-agent/agent.db}}
""")
    systemd = NamespacedSystemd(tmp_path)
    try:
        wait_for("systemd to be up", lambda: systemd.run("systemctl", "is-system-running").stdout.strip()
                 in ("running", "degraded"))
        install = [str(INSTALL), "--python", "/usr/bin/python3", "--unit-dir", "/run/units"]
        first = systemd.run("bash", *install, timeout=300)
        if first.returncode != 0 and "pip install" in (first.stdout.splitlines() or [""])[-1]:
            pytest.skip(f"pip could not install (no package index?): {first.stderr[-500:]}")
        assert first.returncode == 0, first.stdout + first.stderr
        assert "+ useradd" in first.stdout and "config.yaml exists: kept" in first.stdout
        state = systemd.show("ActiveState", "StatusText", "NRestarts", "User")
        assert state == {"ActiveState": "active", "StatusText": "watching 1 log source(s)", "NRestarts": "0",
                         "User": "deepinfer-agent"}, state  # Type=notify: active only after READY=1

        def metric(line: str) -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    return line in response.read().decode()
            except OSError:
                return False

        systemd.run("sh", "-c", f"echo '{scenario_lines()[8]}' >> /var/log/vllm/engine.log")
        # a glob source: the file it matched is the engine (`<source>/<file>`, docs/rules.md)
        wait_for("the OOM read through group adm", lambda: metric(
            'deepinfer_events_total{engine="vllm/engine",kind="oom",server="vllm",source="vllm/engine"} 1.0'))
        assert metric('deepinfer_source_up{engine="vllm/engine",source="vllm"} 1.0')
        assert metric("deepinfer_store_up 1.0")
        assert systemd.run("systemctl", "reload", "deepinfer-agent").returncode == 0
        wait_for("the reload", lambda: metric("deepinfer_config_reloads_total 1.0"))

        # The watchdog: pings every WatchdogSec/2 keep it alive (a 2 s watchdog for the test, in a drop-in).
        systemd.run("sh", "-c", "mkdir -p /run/units/deepinfer-agent.service.d && printf '[Service]\\n"
                    "WatchdogSec=2s\\n' > /run/units/deepinfer-agent.service.d/watchdog.conf")
        systemd.run("systemctl", "daemon-reload")
        systemd.run("systemctl", "restart", "deepinfer-agent")
        pings: set[str] = set()

        def pinged_five_times() -> bool:
            pings.add(systemd.show("WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"])
            return len(pings - {"0"}) >= 5

        # Five distinct pings span more than the 2 s watchdog: a service that did not ping is killed by then.
        wait_for("five watchdog pings", pinged_five_times, timeout=20)
        assert systemd.show("ActiveState", "NRestarts") == {"ActiveState": "active", "NRestarts": "0"}

        again = systemd.run("bash", *install, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        for kept in ("user deepinfer-agent exists", "virtualenv /opt/deepinfer-agent exists",
                     "config.yaml exists: kept", "deepinfer-agent.service is up to date"):
            assert kept in again.stdout
        assert systemd.run("systemctl", "stop", "deepinfer-agent").returncode == 0
        assert systemd.show("ActiveState", "Result") == {"ActiveState": "inactive", "Result": "success"}
    finally:
        systemd.close()
