"""Every terminal and document output is inert: a log (and its file name) planted with every kind of
control sequence — OSC 52 (clipboard), OSC 0 (title), OSC 8 (disguised link), DCS, CSI, their one-byte C1
forms, bidi overrides, isolates and marks, BEL, BS, CR, DEL — is read through every view (scan text and
jsonl, report in all four formats, advise text and JSON, status text and JSON, /metrics) and none of those
characters comes out, neither in the bytes nor in a JSON value decoded from them."""

from __future__ import annotations

import json
import re
import sqlite3
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.inert import inert, printable
from agent.offline.load import load_logs
from agent.sinks.exporter import MetricsServer, Snapshot
from agent.sinks.store import Store

# Written out by hand from ECMA-48 and Unicode's bidi controls, not taken from the code under test.
SEQUENCES = {
    "osc52": "\x1b]52;c;cHduZWQ=\x07",
    "osc0": "\x1b]0;pwned\x07",
    "osc8": "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "dcs": "\x1bP+q544e\x1b\\",
    "csi": "\x1b[2J\x1b[31m",
    "c1_csi": "\x9b31m",
    "c1_osc": "\x9d0;title\x9c",
    "c1_dcs": "\x90qpayload\x9c",
    "rlo": "\u202egnp.exe",
    "lri": "\u2066x\u2069",
    "rlm": "\u200f",
    "bel_bs_cr_del": "a\x07b\x08c\rd\x7f",
}
FORBIDDEN = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
ALL = "".join(SEQUENCES.values())
OOM = "(EngineCore_DP0 pid=990) ERROR 11-29 09:00:01 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
STATS = ("(APIServer pid=851) INFO 11-29 09:00:{s:02d} [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 "
         "tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: {w} reqs, GPU KV cache "
         "usage: 99.0%, Prefix cache hit rate: 0.0%")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def assert_inert(name: str, text: str, *, json_lines: bool = False, json_doc: bool = False) -> None:
    assert not FORBIDDEN.search(text), f"{name}: {FORBIDDEN.search(text)!r} in {text[:400]!r}"
    docs = [json.loads(line) for line in text.splitlines() if line.strip()] if json_lines else \
        [json.loads(text)] if json_doc else []
    for doc in docs:
        bad = [s for s in _strings(doc) if FORBIDDEN.search(s)]
        assert not bad, f"{name}: a decoded JSON value holds a control: {bad[:3]!r}"


@pytest.fixture
def hostile_log(tmp_path: Path) -> Path:
    log = tmp_path / f"vllm{SEQUENCES['osc0']}{SEQUENCES['rlo']}.log"
    lines = [STATS.format(s=s, w=40) for s in range(0, 50, 2)]
    for label, seq in SEQUENCES.items():
        lines.append(OOM + f"{label} {seq} end")
        lines.append(f'(APIServer pid=851) INFO:     127.0.0.1:40000 - "POST /v1/{label}{seq} HTTP/1.1" '
                     "429 Too Many Requests")
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return log


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return str(result.output)


def test_printable_and_inert_leave_no_control_and_keep_the_text() -> None:
    shown = printable(ALL)
    assert not FORBIDDEN.search(shown)
    assert "\\x1b]52;c;cHduZWQ=\\x07" in shown and "\\u202egnp.exe" in shown and "\\x9b31m" in shown
    data = inert({"k\x1b": [ALL, ("\x9b", 1)], "n": 1.5})
    assert data == {"k\\x1b": [printable(ALL), ("\\x9b", 1)], "n": 1.5}


def test_scan_text_and_jsonl_are_inert(hostile_log: Path) -> None:
    text = _cli("scan", str(hostile_log))
    assert "OutOfMemoryError" in text
    assert_inert("scan text", text)
    lines = _cli("scan", "--format", "jsonl", str(hostile_log))
    assert '"oom"' in lines
    assert_inert("scan jsonl", lines, json_lines=True)


@pytest.mark.parametrize("fmt", ["text", "md", "html", "json"])
def test_report_is_inert_in_every_format(hostile_log: Path, fmt: str) -> None:
    out = _cli("report", "--log", str(hostile_log), "--format", fmt)
    assert "oom" in out.lower()
    assert_inert(f"report {fmt}", out, json_doc=fmt == "json")


def test_advise_is_inert(hostile_log: Path) -> None:
    assert_inert("advise text", _cli("advise", "--log", str(hostile_log)))
    assert_inert("advise json", _cli("advise", "--log", str(hostile_log), "--json"), json_doc=True)


def test_status_is_inert(hostile_log: Path, tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with Store.open(db) as store:
        load_logs([hostile_log], store)
    with sqlite3.connect(db) as conn:  # the store keeps what was logged; only the outputs are made inert
        assert conn.execute("SELECT count(*) FROM events WHERE message LIKE '%' || char(27) || ']52%'").fetchone()[0]
    config = tmp_path / "config.yaml"
    config.write_text(f"store: {{path: {db}}}\nmetrics: {{listen: 127.0.0.1, port: 1}}\n"
                      f"sources: [{{path: {json.dumps(str(hostile_log))}, server: vllm}}]\n")
    text = _cli("status", "--config", str(config))
    assert "oom" in text
    assert_inert("status text", text)
    assert_inert("status json", _cli("status", "--config", str(config), "--json"), json_doc=True)


def test_metrics_label_values_are_inert() -> None:
    source = f"vllm/vllm{SEQUENCES['osc8']}{SEQUENCES['c1_csi']}{SEQUENCES['rlo']}.log"
    snap = Snapshot(version="1", started_at=1.0, totals={("events_total", (source, "vllm", "oom")): 2.0})
    server = MetricsServer(lambda: snap, "127.0.0.1", 0)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
            body = response.read().decode()
    finally:
        server.close()
    assert 'kind="oom"' in body and "vllm/vllm" in body
    assert_inert("/metrics", body)
