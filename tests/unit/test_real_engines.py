"""The agent on output recorded from REAL engines (tests/data/real/engines/, made by tests/engines/record.py against
vLLM 0.32 on the CPU and llama.cpp `llama-server`): for every incident caused on purpose, `scan`'s count equals the
engine's own counter, or the agent says the log cannot show it. The same checks run live in tests/engines/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engines.expect import CHECKS, read_log

RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "real" / "engines"
INCIDENTS = sorted(p.parent for p in RECORDINGS.glob("*/*/truth.json"))


def test_every_incident_has_a_recording_and_a_check() -> None:
    recorded = {(json.loads((d / "truth.json").read_text())["engine"], d.name) for d in INCIDENTS}
    assert recorded == set(CHECKS)


@pytest.mark.parametrize("incident", INCIDENTS, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_the_agent_reads_the_real_engine_as_its_counters_say(incident: Path) -> None:
    meta = json.loads((incident / "truth.json").read_text())
    CHECKS[(meta["engine"], incident.name)](read_log((incident / "engine.log").read_text()), meta["truth"])


def test_the_engine_install_script_is_shellcheck_clean() -> None:
    import shutil
    import subprocess

    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (CI installs it)")
    script = Path(__file__).resolve().parents[1] / "engines" / "install.sh"
    result = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
