"""The HTML report in a real headless Chromium: the charts draw, and a `<script>` planted in a log never runs.

The page writes each chart's canvas size into `#chart-sizes` after drawing; `--dump-dom` returns the DOM
after `--virtual-time-budget`, so the test reads what the browser actually laid out.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from tests.report_scenarios import build

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def dump_dom(page: Path, profile: Path) -> str:
    """The DOM of `page` after its scripts ran, from Debian's chromium binary (root needs --no-sandbox)."""
    assert CHROMIUM is not None
    result = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-extensions", f"--user-data-dir={profile}", "--window-size=1200,1600",
         "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True)
    return result.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_charts_draw_and_a_planted_script_never_runs(tmp_path: Path) -> None:
    db = build(tmp_path / "oom.db", "oom_storm")
    page = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", "--db", str(db), "--format", "html", "--output", str(page)])
    assert result.exit_code == 0, result.output
    dom = dump_dom(page, tmp_path / "profile")
    sizes_text = re.search(r'<pre id="chart-sizes"[^>]*>(.*?)</pre>', dom, re.S)
    assert sizes_text is not None, "the chart script did not run"
    sizes = {s["chart"]: s for s in json.loads(html.unescape(sizes_text.group(1)))}
    assert set(sizes) == {"memory", "kv", "load", "events"}
    for chart in sizes.values():
        assert "error" not in chart
        assert chart["width"] > 300 and chart["height"] > 100 and chart["pixels"] > 0, chart
    assert 'data-charts-drawn="4"' in dom
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title is not None and html.unescape(title.group(1)).startswith("deepinfer-agent report: KV cache exhausted")
    assert "pwned" not in html.unescape(title.group(1))
    # The planted tag is text in the table, not an element.
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom
    assert "<script>document.title" not in dom
