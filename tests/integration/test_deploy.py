"""Deployment files checked by the real tools: the systemd unit (`systemd-analyze verify` and `security`),
the install script (`--dry-run`, shellcheck), the daemon's notify/watchdog protocol as systemd sees it,
the Prometheus alert rules (`promtool check rules` / `test rules`), the fleet scrape example
(`promtool check config`), and the Grafana dashboards: every panel query is run against a real
Prometheus scraping a real `deepinfer-agent run` fed a scenario log."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

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
