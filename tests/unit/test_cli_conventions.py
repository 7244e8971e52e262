"""Bad input gives one clear line and a documented exit code; the conventions a CLI user expects hold."""

from __future__ import annotations

import json
from datetime import timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent import __version__
from agent.cli import NOT_RUNNING, app

runner = CliRunner()
MODEL = ["budget", "--model", "qwen2.5-7b", "--vram-gib", "24", "--max-model-len", "8192"]


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--vram-gib", "nan"], "--vram-gib nan"),
    (["--vram-gib", "inf"], "--vram-gib inf"),
    (["--vram-gib", "1e30"], "--vram-gib 1e+30"),
    (["--weights-gib", "nan"], "--weights-gib nan"),
    (["--overhead-gib", "inf"], "--overhead-gib inf"),
    (["--block-size", "7"], "--block-size 7"),
    (["--target-concurrency", "0"], "--target-concurrency 0"),
    (["--input-p95", "1000"], "--input-p95 and --max-output go together"),
])
def test_bad_budget_input_is_one_line_and_exit_1(args: list[str], message: str) -> None:
    code, out, err = run(*MODEL, *args)
    assert code == 1, out
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_length_that_never_fits_suggests_no_max_num_seqs() -> None:
    code, out, _ = run(*MODEL[:-1], "10000000")
    assert code == 0
    assert "--max-num-seqs 1" not in out and "not one request of 10000000 tokens fits" in out


def test_an_unreadable_log_is_exit_1_not_a_usage_box(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.log", tmp_path):
        code, out, err = run(*MODEL, "--from-log", str(path))
        assert code == 1 and "Usage" not in out + err and err.startswith("error: ")


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(body)
    return path


def test_check_refuses_an_infinite_card_and_an_unknown_preset(tmp_path: Path) -> None:
    code, _, err = run("check", "-c", str(_config(tmp_path, "gpu: {vram_gib: .inf}\n")))
    assert code == 1 and "gpu.vram_gib" in err
    code, _, err = run("check", "-c", str(_config(tmp_path, "model: {preset: no-such-model}\n")))
    assert code == 1 and "unknown model preset" in err


def test_check_warns_about_sources_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "dangling.log").symlink_to(tmp_path / "nowhere")
    (tmp_path / "state").mkdir()
    config = _config(tmp_path, f"""
sources:
  - {{path: {tmp_path}/missing.log, name: missing}}
  - {{path: {tmp_path}/adir, name: adir}}
  - {{path: {tmp_path}/dangling.log, name: dangling}}
  - {{path: {tmp_path}/state/*, name: self}}
  - {{path: {tmp_path}/nodir/*.log, name: nodir}}
store: {{path: {tmp_path}/state/agent.db}}
""")
    (tmp_path / "state" / "agent.db").write_bytes(b"")
    code, out, err = run("check", "-c", str(config))
    assert code == 0, err
    for name, words in (("missing", "does not exist"), ("adir", "is a directory"), ("dangling", "dangling symlink"),
                        ("self", "the agent's own store"), ("nodir", "does not exist")):
        assert any(line.startswith(f"warning: source {name}:") and words in line for line in err.splitlines()), name
    code, out, _ = run("check", "--json", "-c", str(config))
    body = json.loads(out)
    assert body["ok"] is True and len(body["warnings"]) == 5


def test_status_exits_3_when_the_agent_is_not_running_and_says_nvml_is_disabled(tmp_path: Path) -> None:
    config = _config(tmp_path, f"nvml: {{enabled: false}}\nmetrics: {{port: 1}}\nstore: {{path: {tmp_path}/a.db}}\n")
    code, out, _ = run("status", "-c", str(config))
    assert code == NOT_RUNNING == 3
    assert "NVML disabled" in out and "NVML DOWN" not in out
    code, out, _ = run("status", "--json", "-c", str(config))
    assert code == 3 and json.loads(out)["running"] is False and json.loads(out)["nvml"] == "disabled"


def test_help_version_completion_and_json() -> None:
    code, out, _ = run("-h")
    assert code == 0 and "--install-completion" in out
    for flag in ("-V", "--version"):
        code, out, _ = run(flag)
        assert code == 0 and __version__ in out
    code, out, _ = run("run", "--help")
    assert "<bool>" not in out and "--once" in out
    code, out, _ = run("models", "--json")
    assert code == 0 and any(m["name"] == "qwen2.5-7b" for m in json.loads(out))


def test_the_version_is_written_once() -> None:
    """`--version` and the installed package's metadata agree: pyproject reads the version from agent/__init__.py.

    A second, static version in pyproject.toml would drift; the metadata pip records would then differ from what
    `--version` and the build_info metric print.
    """
    from importlib.metadata import version

    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject
    assert version("deepinfer-agent") == __version__


@pytest.mark.parametrize("jobs", [1, 2])
def test_scan_progress_reports_every_byte(tmp_path: Path, jobs: int) -> None:
    """The bar is told the bytes read as `scan` reads them (per refill with one job, per chunk with two),
    ending at the file's size."""
    from agent.offline.parallel import scan_path
    from agent.records import Server
    from agent.views.summary import SummaryBuilder

    log = tmp_path / "big.log"
    data = b"".join(b"line %d\n" % n for n in range(200_000))  # 1.4 MB: more than one 1 MiB refill
    log.write_bytes(data)
    summary = SummaryBuilder()
    seen: list[int] = []
    scan_path(log, lambda records, _server: summary.add(records), Server.AUTO, timezone.utc, jobs, None, summary,
              min_bytes=1, progress=seen.append)
    assert seen[-1] == len(data) and len(seen) > 1 and seen == sorted(seen)


def test_the_remaining_file_arguments_read_standard_input(tmp_path: Path) -> None:
    # budget --from-log, check --config and loadtest --payload take `-` as every file argument does
    import subprocess
    import sys

    log = (Path(__file__).resolve().parents[1] / "data" / "real" / "engines" / "vllm-0.32.0" / "preemption"
           / "engine.log").read_bytes()
    done = subprocess.run([sys.executable, "-m", "agent", "budget", "--layers", "2", "--kv-heads", "2", "--head-dim",
                           "32", "--vram-gib", "1", "--weights-gib", "0.001", "--overhead-gib", "0", "--from-log", "-"],
                          input=log, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"KV cache tokens" in done.stdout and b"1,024" in done.stdout  # the engine's 32 blocks x 32 tokens
    done = subprocess.run([sys.executable, "-m", "agent", "check", "--config", "-"], input=b"{sources: []}\n",
                          capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(b"-: OK"), done.stderr
    done = subprocess.run([sys.executable, "-m", "agent", "check", "--config", "-"], input=b"", capture_output=True,
                          timeout=60)
    assert done.returncode == 1 and b"error:" in done.stderr and b"empty" in done.stderr
