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
