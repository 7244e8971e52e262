"""`deepinfer-agent scan`: plain, Docker and CRI inputs, stdin, text and JSONL output, exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from agent.cli import app

from .conftest import LOGS, REF_TIME

runner = CliRunner()


def _pin_mtime(path: Path) -> None:
    os.utime(path, (REF_TIME, REF_TIME))


def test_text_summary_names_counts_facts_peaks_and_notable_events(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_bytes((LOGS / "vllm/v1_0.10.log").read_bytes())
    _pin_mtime(log)
    result = runner.invoke(app, ["scan", str(log)])
    assert result.exit_code == 0  # problems found are the report, not a failure
    out = result.output
    assert "read as vllm" in out and "plain" in out
    assert "oom" in out and "engine_dead" in out and "pending" in out
    assert "kv_cache_tokens" in out and "154,256" in out
    assert "peak KV usage  81.0%" in out and "peak waiting   29" in out
    assert "Notable events:" in out and "CUDA out of memory" in out


def test_an_engine_without_a_parser_is_named_and_still_read(tmp_path: Path) -> None:
    # TensorRT-LLM's KV cache manager and its executor worker (parsers/catalogue/tensorrt-llm.yaml), pasted bare
    log = tmp_path / "trtllm.log"
    log.write_text("[TensorRT-LLM][INFO] [MemUsageChange] Allocated 26.91 GiB for max tokens in paged KV cache "
                   "(220480).\n[07/08/2025-19:47:15] [TRT-LLM] [RANK 0] [E] Failed to initialize executor on rank 0: "
                   "Executor creation failed due to insufficient GPU memory.\n", encoding="utf-8")
    result = runner.invoke(app, ["scan", str(log)])
    assert result.exit_code == 0
    assert "2 lines, plain, read as tensorrt-llm" in result.output
    assert "engine_dead" in result.output and "220,480" in result.output
    result = runner.invoke(app, ["scan", "--format", "jsonl", str(log)])
    assert {json.loads(line)["server"] for line in result.output.splitlines()} == {"tensorrt-llm"}


def test_jsonl_has_one_typed_object_per_record() -> None:
    result = runner.invoke(app, ["scan", "--format", "jsonl", str(LOGS / "sglang/0.5.cri.log")])
    assert result.exit_code == 0
    objects = [json.loads(line) for line in result.output.splitlines()]
    types = {o["type"] for o in objects}
    assert types == {"event", "stats", "fact"}
    assert all("kind" in o for o in objects if o["type"] == "event")
    assert all({"name", "value"} <= o.keys() for o in objects if o["type"] == "fact")
    assert {o["kind"] for o in objects if o["type"] == "event"} >= {"preemption", "http_503", "pending"}


def test_docker_input_is_unwrapped_and_rejoined() -> None:
    result = runner.invoke(app, ["scan", "--format", "jsonl", str(LOGS / "vllm/v1_0.10.docker.log")])
    events = [json.loads(line) for line in result.output.splitlines()]
    oom = next(o for o in events if o.get("kind") == "oom")
    assert oom["fields"]["requested_bytes"] == 2 * 1024**3  # the OOM line was split in two by the runtime
    assert oom["ts"] is not None


def test_stdin_and_server_override() -> None:
    text = (LOGS / "tgi/v3.log").read_text(encoding="utf-8")
    result = runner.invoke(app, ["scan", "--server", "tgi", "-"], input=text)
    assert result.exit_code == 0
    assert "-: 25 lines, plain, read as tgi" in result.output
    assert "queue_full" in result.output


def test_clean_log_reports_no_events(tmp_path: Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("INFO 01-01 00:00:00 [x.py:1] nothing to see\n", encoding="utf-8")
    result = runner.invoke(app, ["scan", str(log)])
    assert result.exit_code == 0 and "Events: none" in result.output


def test_unreadable_file_is_exit_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["scan", str(tmp_path / "missing.log")])
    assert result.exit_code == 1
    assert "cannot read" in result.output


def test_tz_shifts_local_stamps_and_bad_zone_is_exit_1(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_text("[2026-04-05 20:00:21] max_total_num_tokens=433102, context_len=40960\n", encoding="utf-8")
    utc = json.loads(runner.invoke(app, ["scan", "--format", "jsonl", str(log)]).output.splitlines()[0])
    east = json.loads(runner.invoke(app, ["scan", "--format", "jsonl", "--tz", "+08:00", str(log)])
                      .output.splitlines()[0])
    named = json.loads(runner.invoke(app, ["scan", "--format", "jsonl", "--tz", "Asia/Shanghai", str(log)])
                       .output.splitlines()[0])
    assert utc["ts"] - east["ts"] == 8 * 3600 == utc["ts"] - named["ts"]
    bad = runner.invoke(app, ["scan", "--tz", "Mars/Olympus", str(log)])
    assert bad.exit_code == 1 and "expected UTC" in bad.output
