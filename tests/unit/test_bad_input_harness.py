"""Every command × a catalogue of bad inputs: nonexistent files, directories, /dev/zero, FIFOs without a
writer, unreadable files, huge numbers, NaN and infinity, impossible zones, malformed URLs, YAML nested
deep or expanding by aliases, malformed rule files. Each gives a non-zero exit and stderr that starts with
one `error:` line — no traceback, no hang (a subprocess timeout) and no unbounded memory (an address-space
limit) — the real CLI in a subprocess, as a user runs it. DEEPINFER_DEBUG=1 brings tracebacks back."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

CAP = 1 << 30  # address space per command: the CLI needs a few hundred MiB at most
TIMEOUT = 60.0

LOG = "(EngineCore_DP0 pid=1) ERROR 11-29 09:00:01 [core.py:710] torch.OutOfMemoryError: CUDA out of memory.\n"


def _deep_yaml(path: Path) -> None:
    path.write_text("sources: " + "[" * 20_000 + "]" * 20_000 + "\n")


def _alias_bomb(path: Path) -> None:
    rows = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    rows += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path.write_text("\n".join(rows) + "\nsources: *a9\n")


def _unreadable(path: Path) -> None:
    path.write_text(LOG)
    path.chmod(0)


KINDS: dict[str, Callable[[Path], None]] = {
    "missing": lambda p: None,
    "directory": lambda p: p.mkdir(),
    "fifo": lambda p: os.mkfifo(p),
    "unreadable": _unreadable,
    "deep_yaml": _deep_yaml,
    "alias_bomb": _alias_bomb,
    "not_yaml": lambda p: p.write_text("sources: [unclosed\n  - : :\n\t- tab\n"),
    "garbage": lambda p: p.write_bytes(os.urandom(4096)),
    "empty": lambda p: p.write_text(""),
}


def _path(tmp_path: Path, kind: str) -> str:
    if kind == "dev_zero":
        return "/dev/zero"
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / f"input-{kind}"
    KINDS[kind](path)
    if kind == "unreadable" and os.access(path, os.R_OK):
        pytest.skip("running as root: a file made unreadable is still readable")
    return str(path)


FILE_COMMANDS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    # command → (argv with {} for the path, the kinds of bad input it must refuse)
    "check": (["check", "--config", "{}"], ("missing", "directory", "fifo", "unreadable", "deep_yaml", "alias_bomb",
                                            "not_yaml", "garbage", "empty", "dev_zero")),
    "run": (["run", "--once", "--config", "{}"], ("missing", "directory", "fifo", "deep_yaml", "not_yaml", "empty",
                                                 "dev_zero")),
    "status": (["status", "--config", "{}"], ("missing", "directory", "fifo", "deep_yaml", "empty", "dev_zero")),
    "scan": (["scan", "{}"], ("missing", "directory", "unreadable", "dev_zero")),
    "advise_log": (["advise", "--log", "{}"], ("missing", "directory", "unreadable", "dev_zero")),
    "advise_db": (["advise", "--db", "{}"], ("missing", "directory", "garbage", "dev_zero", "fifo")),
    "report_log": (["report", "--log", "{}"], ("missing", "directory", "unreadable", "dev_zero")),
    "report_db": (["report", "--db", "{}"], ("missing", "directory", "garbage", "dev_zero", "fifo")),
    "budget_config": (["budget", "--config", "{}"], ("missing", "directory", "fifo", "deep_yaml", "dev_zero")),
    "budget_model_json": (["budget", "--model", "{}", "--vram-gib", "24"], ("directory", "fifo", "garbage",
                                                                          "deep_yaml", "dev_zero")),
    "budget_from_log": (["budget", "--model", "qwen2.5-7b", "--vram-gib", "24", "--from-log", "{}"],
                        ("missing", "directory", "dev_zero")),
    "rules_check": (["rules", "check", "{}"], ("missing", "fifo", "deep_yaml", "alias_bomb", "not_yaml", "garbage",
                                               "dev_zero")),
    "loadtest_payload": (["loadtest", "http://127.0.0.1:1/v1/completions", "--payload", "{}"],
                         ("missing", "directory", "fifo", "garbage", "dev_zero")),
}

FILE_CASES = [(name, kind) for name, (_, kinds) in FILE_COMMANDS.items() for kind in kinds]

BUDGET = ["budget", "--model", "qwen2.5-7b", "--vram-gib", "24"]
VALUE_CASES: dict[str, list[str]] = {
    "budget_vram_nan": ["budget", "--model", "qwen2.5-7b", "--vram-gib", "nan"],
    "budget_vram_inf": ["budget", "--model", "qwen2.5-7b", "--vram-gib", "inf"],
    "budget_len_huge": [*BUDGET, "--max-model-len", str(10**30)],
    "budget_len_negative": [*BUDGET, "--max-model-len", "-5"],
    "budget_tp_huge": [*BUDGET, "--tp", str(10**12)],
    "budget_util_nan": [*BUDGET, "--util", "nan"],
    "budget_layers_huge": ["budget", "--layers", str(10**15), "--kv-heads", "8", "--head-dim", "128",
                           "--vram-gib", "24"],
    "scan_tz": ["scan", "--tz", "+99:00", "{log}"],
    "scan_tz_name": ["scan", "--tz", "Mars/Olympus_Mons", "{log}"],
    "advise_tz": ["advise", "--tz", "+99:00", "--log", "{log}"],
    "report_from_nan": ["report", "--log", "{log}", "--from", "nan"],
    "report_from_inf": ["report", "--log", "{log}", "--from", "inf"],
    "report_to_huge": ["report", "--log", "{log}", "--from", "0", "--to", "1e400"],
    "report_since_huge": ["report", "--log", "{log}", "--since", "99999999999999999999d"],
    "report_since_garbage": ["report", "--log", "{log}", "--since", "soon"],
    "report_around_huge": ["report", "--log", "{log}", "--around", str(10**30)],
    "report_around_negative": ["report", "--log", "{log}", "--around", "-1"],
    "advise_since_huge": ["advise", "--db", "{db}", "--since", "99999999999999999999d"],
    "loadtest_timeout_inf": ["loadtest", "http://127.0.0.1:1/v1/completions", "--timeout", "inf"],
    "loadtest_timeout_nan": ["loadtest", "http://127.0.0.1:1/v1/completions", "--timeout", "nan"],
    "loadtest_tokens_float": ["loadtest", "http://127.0.0.1:1/v1/completions", "--input-tokens", "1e12"],
    "loadtest_tokens_huge": ["loadtest", "http://127.0.0.1:1/v1/completions", "--input-tokens", str(10**12)],
    "loadtest_url_bracket": ["loadtest", "http://[::1/v1"],
    "loadtest_url_scheme": ["loadtest", "ftp://127.0.0.1/v1/completions"],
    "loadtest_url_port": ["loadtest", "http://127.0.0.1:99999/v1/completions"],
    "loadtest_levels": ["loadtest", "http://127.0.0.1:1/v1/completions", "--levels", "0,1e9"],
    "loadtest_requests_huge": ["loadtest", "http://127.0.0.1:1/v1/completions", "--requests-per-level",
                               str(10**18)],
    "simulate_port": ["simulate", "--port", "70000"],
    "simulate_vram_nan": ["simulate", "--port", "0", "--vram-gib", "nan"],
    "simulate_speed_zero": ["simulate", "--port", "0", "--speed", "0"],
    "simulate_blocks_huge": ["simulate", "--port", "0", "--kv-blocks", str(10**18)],
    "simulate_duration_nan": ["simulate", "--port", "0", "--duration", "nan"],
    "no_such_command": ["frobnicate"],
    "no_such_option": ["scan", "--frobnicate", "{log}"],
}


def _cli(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    return subprocess.run([sys.executable, "-m", "agent", *argv], capture_output=True, text=True, timeout=TIMEOUT,
                          preexec_fn=limit, check=False, env={**os.environ, **(env or {}), "COLUMNS": "120"},
                          stdin=subprocess.DEVNULL)


LISTING = ("check", "rules")  # validators: their report is the list of problems, one a line, then exit 1


def _assert_one_clear_error(done: subprocess.CompletedProcess[str], argv: list[str]) -> None:
    assert done.returncode not in (0, None), (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    if argv[0] in LISTING:
        assert done.returncode == 1 and "problem" in done.stdout + done.stderr, (done.stdout, done.stderr)
    else:
        assert done.stderr.startswith("error: "), done.stderr[-2000:]
    assert "out of memory" not in done.stderr and "MemoryError" not in done.stderr, done.stderr[-500:]


@pytest.mark.parametrize(("command", "kind"), FILE_CASES, ids=[f"{c}-{k}" for c, k in FILE_CASES])
def test_a_bad_file_is_one_clear_error(tmp_path: Path, command: str, kind: str) -> None:
    argv = [a.replace("{}", _path(tmp_path, kind)) for a in FILE_COMMANDS[command][0]]
    _assert_one_clear_error(_cli(argv), argv)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("inputs")
    (tmp / "vllm.log").write_text(LOG)
    from agent.sinks.store import Store

    Store.open(tmp / "agent.db").close()
    return {"log": str(tmp / "vllm.log"), "db": str(tmp / "agent.db")}


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_a_bad_value_is_one_clear_error(inputs: dict[str, str], case: str) -> None:
    argv = [a.format(**inputs) for a in VALUE_CASES[case]]
    _assert_one_clear_error(_cli(argv), argv)


def test_the_debug_variable_brings_the_traceback_back(tmp_path: Path) -> None:
    """The one-line guard hides only the unforeseen: with DEEPINFER_DEBUG=1 that shows where it came from."""
    script = tmp_path / "boom.py"
    script.write_text("import sys\nfrom agent import cli\n"
                      "@cli.app.command()\ndef boom() -> None:\n    raise RuntimeError('kaboom')\n"
                      "from agent.launch import guarded\nsys.exit(guarded())\n")
    quiet = subprocess.run([sys.executable, str(script), "boom"], capture_output=True, text=True, timeout=TIMEOUT,
                           check=False, cwd=Path(__file__).parents[2])
    assert quiet.returncode == 1
    assert quiet.stderr.startswith("error: RuntimeError: kaboom") and quiet.stderr.count("\n") == 1, quiet.stderr
    loud = subprocess.run([sys.executable, str(script), "boom"], capture_output=True, text=True, timeout=TIMEOUT,
                          check=False, cwd=Path(__file__).parents[2], env={**os.environ, "DEEPINFER_DEBUG": "1"})
    assert "Traceback" in loud.stderr and "kaboom" in loud.stderr
