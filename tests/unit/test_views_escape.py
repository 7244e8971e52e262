"""Human-facing output never passes a log line's control characters to the terminal (OSC/DCS/CSI, C1,
bidi overrides): one helper (agent/views/units.printable) used by every view; `scan` says path:LINE."""

from __future__ import annotations

import re
import time
from pathlib import Path

from typer.testing import CliRunner

from agent.cli import app
from agent.config import Config
from agent.daemon.status import StatusReport
from agent.inert import printable
from agent.records import Event, EventKind, Phase, Server, Severity
from agent.views.status import render

RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE = "\x1b]0;pwned\x07 \x1bP+q\x1b\\ \x9b31m \u202etxt.exe"
OOM = "(EngineCore_DP0 pid=990) ERROR 11-29 09:00:01 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "


def test_printable_escapes_every_control_but_the_views_newlines() -> None:
    assert printable("a\x1b[31mb\nc\x9b") == "a\\x1b[31mb\nc\\x9b"
    assert printable("a\nb", keep_newlines=False) == "a\\x0ab"
    assert not RAW_CONTROL.search(printable(HOSTILE))


def test_scan_text_escapes_log_text(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("INFO 11-29 09:00:00 [api.py:1] starting\nINFO 11-29 09:00:00 [api.py:1] more\n"
                   + OOM + HOSTILE + "\n")
    result = CliRunner().invoke(app, ["scan", str(log)])
    assert result.exit_code == 0, result.output
    assert not RAW_CONTROL.search(result.output)


def test_status_escapes_event_messages() -> None:
    event = Event(time.time(), "vllm", Server.VLLM, EventKind.OOM, Severity.ERROR, Phase.RUNTIME, "oom " + HOSTILE)
    text = render(StatusReport("http://127.0.0.1:1/metrics", None, events=[event]), Config(), None)
    assert "oom" in text and not RAW_CONTROL.search(text)


def test_scan_shows_capacities_in_human_units() -> None:
    from agent.views.units import fact

    assert fact("kv_cache_bytes", 5819498496.0) == "5.42 GiB (5,819,498,496 B)"
    assert fact("gpu_memory_utilization", 0.9) == "90%"
    assert fact("kv_cache_tokens", 106368.0) == "106,368"
