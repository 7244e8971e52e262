"""The CLI as a user meets it: exit codes, JSON, text, and errors without tracebacks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app

ROOT = Path(__file__).parent.parent.parent
STARTUP = ROOT / "tests" / "data" / "startup"
CONFIGS = ROOT / "tests" / "data" / "config"
runner = CliRunner()

SEED = ["budget", "--model", "qwen2.5-7b", "--vram-gib", "24", "--util", "0.9", "--weights-gib", "14.2",
        "--overhead-gib", "1.6", "--max-model-len", "8192"]


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_done_when_example_reports_13() -> None:
    code, out, _ = run(*SEED, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["max_concurrency"] == 13
    assert data["kv_bytes_per_token"] == 57344
    assert data["usable_kv_bytes"] == int(0.9 * 24 * 2**30) - int(14.2 * 2**30) - int(1.6 * 2**30)
    assert data["origin"]["weights"] == "flag"


def test_text_shows_every_step_snippet_and_flags() -> None:
    code, out, _ = run(*SEED)
    assert code == 0
    for fragment in ("0.9 × 24.00 GiB = 21.60 GiB", "= usable KV cache    5.80 GiB",
                     "2 × 28 layers × 4 KV heads × 128 × 2 B = 56.00 KiB", "ceil(8192 / 16) = 512",
                     "floor(5.80 GiB / 448.00 MiB) = 13", "max_num_seqs: 13", "max_queue_size: 32",
                     "vllm serve Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs 13"):
        assert fragment in out, fragment


def test_target_concurrency_plan() -> None:
    code, out, _ = run(*SEED, "--target-concurrency", "60")
    assert code == 0
    assert re.search(r"1\. quantize weights.*→\s+33", out)
    assert re.search(r"2\. FP8 KV cache.*→\s+6\d .*✓", out)
    assert "Reached" in out


def test_target_out_of_reach_mentions_tensor_parallel() -> None:
    code, out, _ = run(*SEED, "--target-concurrency", "500", "--input-p95", "3000", "--max-output", "1000")
    assert code == 0
    assert "Not reached: out of reach on this card" in out
    assert "tensor parallel 2 (2 GPUs)" in out


def test_json_plan_and_engine_comparison() -> None:
    code, out, _ = run("budget", "--from-log", str(STARTUP / "vllm-0.6-v0-llama8b.log"), "--json",
                       "--target-concurrency", "20")
    assert code == 0
    data = json.loads(out)
    assert data["model"]["name"] == "llama-3.1-8b"
    assert data["origin"]["vram"] == "log" and data["origin"]["tokens"] == "log max_model_len"
    assert data["engine"]["max_concurrency"] == 11.12
    assert data["plan"]["target"] == 20 and data["plan"]["steps"][0]["action"] == "as configured"


def test_from_log_text_side_by_side() -> None:
    code, out, _ = run("budget", "--from-log", str(STARTUP / "vllm-0.6-v0-llama8b.log"), "--overhead-gib", "2")
    assert code == 0
    assert "Computed vs engine-reported:" in out
    assert re.search(r"usable KV cache\s+\S+ GiB\s+11\.12 GiB", out)
    assert "activation peak 9.37 GiB" in out


def test_from_log_inside_container_envelopes(tmp_path: Path) -> None:
    lines = (STARTUP / "vllm-0.10-v1-qwen3.log").read_text().splitlines()
    docker = tmp_path / "docker.log"
    docker.write_text("".join(json.dumps({"log": f"{line}\n", "stream": "stdout",
                                          "time": "2025-07-28T23:02:27.123456789Z"}) + "\n" for line in lines))
    cri = tmp_path / "cri.log"
    cri.write_text("".join(f"2025-07-28T23:02:27.123456789Z stdout F {line}\n" for line in lines))
    for log in (docker, cri):
        code, out, _ = run("budget", "--from-log", str(log), "--vram-gib", "24", "--json")
        assert code == 0
        data = json.loads(out)
        assert data["model"]["name"] == "qwen3-0.6b" and data["engine"]["max_concurrency"] == 21.51


def test_from_log_without_capacity_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("INFO hello\n")
    code, _, err = run("budget", "--from-log", str(log), "--vram-gib", "24")
    assert code == 1 and "no vLLM start-up capacity lines found" in err


def test_from_log_v1_needs_vram() -> None:
    code, _, err = run("budget", "--from-log", str(STARTUP / "vllm-0.10-v1-qwen3.log"))
    assert code == 1 and "pass --vram-gib" in err


def test_from_config_file() -> None:
    code, out, _ = run("budget", "--config", str(ROOT / "examples" / "config.yaml"), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["max_concurrency"] == 13 and data["origin"]["vram"] == "config"
    assert data["workload_tokens"] == 3000 + 1024


def test_flags_override_config() -> None:
    code, out, _ = run("budget", "--config", str(ROOT / "examples" / "config.yaml"), "--kv-dtype", "fp8", "--json")
    assert code == 0 and json.loads(out)["max_concurrency"] == 26


def test_explicit_shape_and_hf_config(tmp_path: Path) -> None:
    code, out, _ = run("budget", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--kv-dtype", "fp16",
                       "--vram-gib", "80", "--util", "1", "--weights-gib", "0", "--overhead-gib", "72",
                       "--max-model-len", "4096", "--json")
    assert code == 0 and json.loads(out)["max_concurrency"] == 16
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "hidden_size": 4096, "vocab_size": 32000}))
    code, out, _ = run("budget", "--model", str(tmp_path), "--vram-gib", "24", "--weights-gib", "13",
                       "--max-model-len", "4096", "--json")
    assert code == 0 and json.loads(out)["kv_bytes_per_token"] == 131072


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "qwen2.5-8b", "--vram-gib", "24"], "Closest: qwen2.5-7b"),
        (["--model", "qwen2.5-7b", "--vram-gib", "16", "--weights-gib", "14.2", "--overhead-gib", "1.6",
          "--util", "0.9", "--max-model-len", "8192"], "by 1.40 GiB"),
        (["--model", "qwen2.5-7b"], "pass --vram-gib"),
        (["--layers", "32", "--vram-gib", "24"], "must all be given"),
        (["--model", "qwen2.5-7b", "--layers", "3", "--kv-heads", "1", "--head-dim", "1"], "not both"),
        (["--model", "qwen2.5-7b", "--vram-gib", "24", "--tp", "3"], "does not divide"),
        (["--model", "nonexistent/config.json", "--vram-gib", "24"], "cannot read model config"),
        (["--vram-gib", "24"], "no model given"),
        (["--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--vram-gib", "24", "--weights-gib", "1"],
         "tokens per request unknown"),
        (["--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--vram-gib", "24", "--max-model-len", "9"],
         "pass --weights-gib or --params-b"),
    ],
)
def test_errors_are_one_clear_line(args: list[str], message: str) -> None:
    code, _, err = run("budget", *args)
    assert code == 1
    assert err.startswith("error: ") and message in err


def test_malformed_config_json_names_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_attention_heads": 32, "hidden_size": 4096}))
    code, _, err = run("budget", "--model", str(cfg), "--vram-gib", "24", "--weights-gib", "1")
    assert code == 1 and "num_hidden_layers" in err


def test_hybrid_model_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "jamba", "num_hidden_layers": 32, "num_attention_heads": 32}))
    code, _, err = run("budget", "--model", str(cfg), "--vram-gib", "80")
    assert code == 1 and "hybrid" in err


def test_check_valid_and_invalid() -> None:
    code, out, _ = run("check", "--config", str(CONFIGS / "valid-full.yaml"))
    assert code == 0 and out.count("\n") == 1 and "OK" in out
    code, _, err = run("check", "--config", str(CONFIGS / "bad-types.yaml"))
    assert code == 1 and "4 problem(s)" in err and err.count("bad-types.yaml:") == 5


def test_budget_with_bad_config_lists_problems() -> None:
    code, _, err = run("budget", "--config", str(CONFIGS / "bad-types.yaml"))
    assert code == 1 and "server.gpu_memory_fraction" in err and "metrics.port" in err


def test_models_lists_presets() -> None:
    code, out, _ = run("models")
    assert code == 0 and "qwen2.5-7b" in out and "56.00 KiB/token" in out and "deepseek-v3" in out


def test_every_command_is_documented_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    names = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]
    assert names
    for name in names:
        assert f"deepinfer-agent {name}" in readme, f"README does not document `deepinfer-agent {name}`"


def test_from_log_paper_overflow_says_which_inputs_to_pass() -> None:
    code, _, err = run("budget", "--from-log", str(STARTUP / "real-0.9-v1-qwen3-235b-fp8-tp4.log"),
                       "--model", "qwen3-235b-a22b", "--vram-gib", "80")
    assert code != 0 and "no memory left" in err and "--tp" in err and "did size a KV cache" in err
    code, _, err = run("budget", "--from-log", str(STARTUP / "real-0.7-v0-qwen7b-awq-no-memory.log"),
                       "--model", "qwen2.5-7b", "--weights-dtype", "awq")
    assert code != 0 and "did not start either" in err


def test_from_log_recommends_the_engines_figure_and_says_which_governs() -> None:
    # the engine printed 1.30x at 32,768 tokens; the paper (80 GiB, default overhead) says 8
    log = str(STARTUP / "real-0.11-v1-qwen3-14b.log")
    code, out, _ = run("budget", "--from-log", log, "--vram-gib", "80", "--model", "qwen3-14b")
    assert code == 0
    assert "max_num_seqs: 1" in out and "engine-reported 1.30x governs (paper budget: 8)" in out
    assert "--max-num-seqs 1 " in out and "Which governs: the engine's figure" in out
    assert "measure it with --from-log" not in out
    code, out, _ = run("budget", "--from-log", log, "--vram-gib", "80", "--model", "qwen3-14b", "--json")
    data = json.loads(out)
    assert data["recommended_max_num_seqs"] == 1 and data["capacity"]["governs"] == "engine"
    assert data["max_concurrency"] == 8  # the paper figure is still there, beside it
