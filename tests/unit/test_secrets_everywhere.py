"""No credential reaches any output: every shape of the catalogue (tests/unit/secret_shapes.py) planted in
lines of several event kinds — an OOM, a CUDA error, a refusal whose route holds it, an engine death, the
start-up model line — and looked for in the daemon's SQLite file, its /metrics, its own log, `status`,
`scan` (text and jsonl), `advise` (text and JSON) and `report` in every format."""

from __future__ import annotations

import logging
import sqlite3
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.config import load_config
from agent.daemon.loop import Daemon
from agent.sinks.exporter import MetricsServer, Snapshot

from . import secret_shapes

KINDS = [
    "(EngineCore_DP0 pid=990) ERROR 11-29 09:00:{s:02d} [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB. {secret}",
    "(EngineCore_DP0 pid=990) ERROR 11-29 09:01:{s:02d} [core.py:710] RuntimeError: CUDA error: an illegal memory "
    "access was encountered {secret}",
    "(APIServer pid=851) ERROR 11-29 09:02:{s:02d} [core_client.py:597] Engine core proc EngineCore_DP0 died "
    "unexpectedly, shutting down client. {secret}",
    "(APIServer pid=851) WARNING 11-29 09:03:{s:02d} [serving.py:1] request timed out after 30 s {secret}",
]
ROUTE = ('(APIServer pid=851) INFO:     127.0.0.1:40000 - "POST /v1/{secret}/completions HTTP/1.1" 429 Too Many '
         "Requests")
MODEL = "(APIServer pid=851) INFO 11-29 08:59:00 [api_server.py:1] █  model   https://admin:zq7model@hub.internal/q"


def _log_text() -> str:
    lines = [MODEL]
    for i, (name, shape) in enumerate(sorted(secret_shapes.SHAPES.items())):
        for form in ("bare", "in_json", "in_url_path"):
            lines.append(KINDS[i % len(KINDS)].format(s=i, secret=secret_shapes.FORMS[form].format(s=shape)))
        if name in secret_shapes.PATH_SAFE:
            lines.append(ROUTE.format(secret=shape))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("secrets")
    log = tmp / "vllm.log"
    log.write_text(_log_text(), encoding="utf-8")
    config = tmp / "config.yaml"
    config.write_text(f"sources: [{{path: {log}, server: vllm, name: vllm, start_at: beginning}}]\n"
                      f"nvml: {{enabled: false}}\nstore: {{path: {tmp / 'agent.db'}}}\n"
                      "metrics: {listen: 127.0.0.1, port: 1}\n")
    return {"log": log, "config": config, "db": tmp / "agent.db", "tmp": tmp}


def _run_daemon(node: dict[str, Path]) -> Snapshot:
    """Two steps of the real daemon (the second after the open tracebacks' quiet time), on today's clock."""
    now = time.time()
    daemon = Daemon(load_config(node["config"]))
    daemon.start(now)
    daemon.run_once(now)
    daemon.run_once(now + 5)
    snap = daemon.snapshot()
    daemon.close(now + 6)
    return snap


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return str(result.output)


def test_the_daemon_stores_publishes_and_logs_no_credential(node: dict[str, Path],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    snap = _run_daemon(node)
    assert snap.totals[("events_total", ("vllm", "vllm", "oom"))] >= 1
    assert snap.totals[("events_total", ("vllm", "vllm", "http_429"))] >= 1
    server = MetricsServer(lambda: snap, "127.0.0.1", 0)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
            metrics = response.read().decode()
    finally:
        server.close()
    assert 'kind="oom"' in metrics and not secret_shapes.leaks(metrics)
    with sqlite3.connect(node["db"]) as conn:
        dump = "\n".join(conn.iterdump())
        kinds = {k for (k,) in conn.execute("SELECT DISTINCT kind FROM events")}
    assert {"oom", "cuda_error", "engine_dead", "http_429"} <= kinds, kinds
    assert "oom" in dump and not secret_shapes.leaks(dump)
    for path in node["tmp"].glob("agent.db*"):  # the file itself, and its journal: no stray page keeps one
        assert secret_shapes.MARKER.encode() not in path.read_bytes().lower(), path
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert not secret_shapes.leaks(logged)


@pytest.mark.parametrize("args", [["scan"], ["scan", "--format", "jsonl"], ["advise", "--log"],
                                  ["advise", "--json", "--log"], *(["report", "--format", f, "--log"]
                                                                   for f in ("text", "md", "html", "json"))],
                         ids=lambda a: "-".join(a))
def test_no_credential_in_any_command_output(node: dict[str, Path], args: list[str]) -> None:
    out = _cli(*args, str(node["log"]))
    assert "oom" in out.lower() or "finding" in out.lower() or "engine" in out.lower()
    assert not secret_shapes.leaks(out), [line for line in out.splitlines() if secret_shapes.leaks(line)][:3]


def test_no_credential_in_status_or_a_report_of_the_store(node: dict[str, Path],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    if not node["db"].exists():
        _run_daemon(node)
    for args in (["status", "--config", str(node["config"])], ["status", "--json", "--config", str(node["config"])],
                 ["report", "--db", str(node["db"]), "--from", "0", "--format", "json"]):
        out = _cli(*args)
        assert "oom" in out.lower(), out[:500]
        assert not secret_shapes.leaks(out), [line for line in out.splitlines() if secret_shapes.leaks(line)][:3]
