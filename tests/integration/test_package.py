"""The wheel carries the rules and both entry points work from a real install (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True)
    (built,) = out.glob("deepinfer_agent-*.whl")
    return built


def test_wheel_ships_rules_and_both_packages(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "agent/rules/README.md" in names
    assert "agent/cli.py" in names and "parsers/vllm.py" in names
    for asset in ("views/templates/report.html.j2", "views/templates/report_charts.js",
                  "views/vendor/uplot/uPlot.iife.min.js", "views/vendor/uplot/LICENSE"):
        assert f"agent/{asset}" in names  # the HTML report works from an install, offline
    catalogue = {Path(n).name for n in names if n.startswith("parsers/catalogue/")}
    assert {p.name for p in (ROOT / "parsers" / "catalogue").glob("*.yaml")} <= catalogue  # read at every start
    assert not any("tests/" in n for n in names)
    metadata = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Requires-Dist: nvidia-ml-py" in text and "Requires-Dist: pynvml" not in text


def test_installed_wheel_runs_console_script_and_module(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    # Only the wheel is installed (into its own folder, ahead of the editable checkout on the path);
    # its dependencies come from the test environment.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    args = ["budget", "--model", "qwen2.5-7b", "--vram-gib", "24", "--util", "0.9", "--weights-gib", "14.2",
            "--overhead-gib", "1.6", "--max-model-len", "8192", "--json"]
    script = subprocess.run([str(target / "bin" / "deepinfer-agent"), *args], capture_output=True, text=True,
                            check=True, cwd=tmp_path, env=env)
    assert json.loads(script.stdout)["max_concurrency"] == 13
    helped = subprocess.run([str(target / "bin" / "deepinfer-agent"), "--help"], capture_output=True, text=True,
                            check=True, cwd=tmp_path, env={**env, "COLUMNS": "100"})
    assert helped.stdout.startswith("Usage: deepinfer-agent [OPTIONS] COMMAND") and "  scan " in helped.stdout
    module = subprocess.run([sys.executable, "-m", "agent", "--version"], capture_output=True, text=True,
                            check=True, cwd=tmp_path, env=env)
    assert module.stdout.startswith("deepinfer-agent ")
    probe = "import agent.config as c; print(c.__file__); print(c.shipped_rules_dir())"
    where = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                           cwd=tmp_path, env=env).stdout.split()
    assert where[0].startswith(str(target)), "the installed wheel, not the checkout, must be under test"
    assert where[1] == str(target / "agent" / "rules") and (target / "agent" / "rules" / "README.md").is_file()


def _compiler_here() -> bool:
    import shutil
    import sysconfig

    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which("cc") is not None and headers.is_file()


def test_wheel_carries_the_compiled_lane_where_a_compiler_is(wheel: Path) -> None:
    if not _compiler_here():
        pytest.skip("no C compiler or CPython headers: the wheel is pure Python here")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("parsers/_lane") and n.endswith(".so") for n in names)
    assert "-py3-none-any" not in wheel.name  # a wheel for this interpreter and platform


def test_wheel_without_a_compiler_is_pure_python_and_scans(tmp_path: Path) -> None:
    """No compiler on the PATH: the build hook warns and skips, the wheel is pure Python, `scan` works."""
    out = tmp_path / "wheel"
    bare = {**os.environ, "PATH": str(Path(sys.executable).parent), "CC": str(tmp_path / "no-such-cc")}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, env=bare)
    (built,) = out.glob("deepinfer_agent-*.whl")
    assert built.name.endswith("-py3-none-any.whl")
    assert not any("_lane" in n and n.endswith(".so") for n in zipfile.ZipFile(built).namelist())
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(built)],
                   check=True, capture_output=True)
    log = tmp_path / "vllm.log"
    log.write_text('(APIServer pid=1) INFO:     10.0.0.1:5 - "POST /v1/completions HTTP/1.1" 503 Service '
                   "Unavailable\n", encoding="utf-8")
    probe = "from agent.offline import plain_lane; print(plain_lane.built())"
    env = {**os.environ, "PYTHONPATH": str(target)}
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=tmp_path, env=env).stdout.strip() == "False"
    scanned = subprocess.run([str(target / "bin" / "deepinfer-agent"), "scan", str(log)], capture_output=True,
                             text=True, check=True, cwd=tmp_path, env=env)
    assert "http_503" in scanned.stdout
