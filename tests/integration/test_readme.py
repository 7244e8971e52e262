"""The README, executed: every command of the quick start and the tour runs, and its output still matches
the sample printed under it (times, ages, paths and the port normalised; `...` lines and a line cut with
`…` are elisions). A sample is a fenced block with no language right after a ```sh block."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.test_daemon import Agent, free_port, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLI = ".venv/bin/deepinfer-agent"


@dataclass(frozen=True)
class Example:
    commands: list[str]
    sample: list[str]


def examples() -> list[Example]:
    """Each ```sh block with the sample block that follows it (before the next ```sh block), if any."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    out: list[Example] = []
    for i, (lang, body) in enumerate(blocks):
        if lang != "sh":
            continue
        sample = blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "" else ""
        commands = [line for line in body.splitlines() if line and not line.startswith("#")]
        out.append(Example(commands, sample.splitlines()))
    return out


def normalise(line: str, port: int | None = None) -> str:
    line = line.rstrip().replace(str(ROOT) + "/", "")
    if port is not None:
        line = line.replace(f":{port}", ":9842")
    line = re.sub(r"\b\d+(?:\.\d+)?[smhd] ago\b", "<age> ago", line)
    line = re.sub(r"\bup \d+[smhd]\b", "up <t>", line)
    line = re.sub(r"done in \d+ s\. Report: \S+", "done in <t> s. Report: <path>", line)
    return line


def assert_matches(sample: list[str], output: str, port: int | None = None, skip: re.Pattern[str] | None = None) -> int:
    """Every sample line, in order, is a line of the output (`…` in a line stands for the rest of a message,
    as the views cut it); a `...` line elides lines. Returns how many lines were compared."""
    lines = [normalise(x, port) for x in output.splitlines()]
    at, compared = 0, 0
    for want in (normalise(x) for x in sample):
        if not want.strip() or want.strip() in ("...", "…") or (skip is not None and skip.search(want)):
            continue
        head, cut, tail = want.partition("…")  # `…` stands for the rest of a long message
        for j in range(at, len(lines)):
            if (lines[j].startswith(head.rstrip()) and lines[j].endswith(tail.strip()) if cut else lines[j] == want):
                at, compared = j + 1, compared + 1
                break
        else:
            pytest.fail(f"README sample line not in the output (in order):\n  {want}\noutput:\n{output}")
    return compared


def agent_argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == CLI, command
    return [sys.executable, "-m", "agent", *words[1:]]


def test_the_readme_shows_the_commands_this_test_runs() -> None:
    commands = [c for e in examples() for c in e.commands]
    assert any("deepinfer-agent demo" in c for c in commands)
    for sub in ("budget", "scan", "run", "status", "advise"):
        assert any(c.startswith(f"{CLI} {sub} ") for c in commands), sub
    assert any(c.startswith("curl ") for c in commands)


@pytest.mark.parametrize("sub", ["budget", "scan", "advise"])
def test_offline_commands_print_what_the_readme_shows(sub: str) -> None:
    (example,) = [e for e in examples() if e.commands and e.commands[0].startswith(f"{CLI} {sub} ")]
    done = subprocess.run(agent_argv(example.commands[0]), cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert assert_matches(example.sample, done.stdout) >= 5


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path, int]]:
    """`run --config examples/quickstart.yaml`, with the store in a temporary folder and a free port (the
    README's 9842 may be taken on a test machine), so the repository stays clean."""
    tmp = tmp_path_factory.mktemp("quickstart")
    port = free_port()
    text = (ROOT / "examples" / "quickstart.yaml").read_text()
    text = text.replace("port: 9842", f"port: {port}").replace("path: quickstart.db", f"path: {tmp}/agent.db")
    text = text.replace("path: logs/*.log", f"path: {ROOT}/examples/logs/*.log")
    config = tmp / "quickstart.yaml"
    config.write_text(text)
    agent = Agent(config, {**os.environ, "PYTHONUNBUFFERED": "1"}, 0).start()
    try:
        yield agent, config, port
    finally:
        agent.kill()


def test_run_then_curl_shows_the_readme_counters(quickstart: tuple[Agent, Path, int]) -> None:
    _, _, port = quickstart
    (example,) = [e for e in examples() if e.commands and e.commands[0].startswith("curl ")]
    assert example.commands == ["curl -s http://127.0.0.1:9842/metrics | grep '^deepinfer_events_total' | "
                                "grep -v ' 0.0$'"]

    def counters() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
        return "\n".join(x for x in body.splitlines() if x.startswith("deepinfer_events_total")
                         and not x.endswith(" 0.0"))

    wait_for("the four events", lambda: counters().count("\n") == 3, timeout=30)
    assert assert_matches(example.sample, counters()) == 4
    assert len(counters().splitlines()) == 4, "the README shows every counter above 0"


def test_status_prints_what_the_readme_shows(quickstart: tuple[Agent, Path, int]) -> None:
    _, config, port = quickstart
    (example,) = [e for e in examples() if e.commands and e.commands[0].startswith(f"{CLI} status ")]
    argv = [*agent_argv(example.commands[0])]
    argv[argv.index("examples/quickstart.yaml")] = str(config)

    def status() -> str:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
        return done.stdout if done.returncode == 0 and "findings (active)" in done.stdout else ""

    out = wait_for("status with the finding", status, timeout=30)
    out = out.replace(str(config.parent / "agent.db"), "quickstart.db")
    assert assert_matches(example.sample, out, port) >= 12


def test_the_demo_prints_what_the_readme_shows(tmp_path: Path) -> None:
    """The quick start's first command; the load test's rows carry measured rates, so only the levels that
    decide the verdict are compared by their first columns."""
    (example,) = [e for e in examples() if e.commands and "deepinfer-agent demo" in e.commands[0]]
    done = subprocess.run([sys.executable, "-m", "agent", "demo", "--workdir", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = re.compile(r"^\s+\d+\s+\d+\s+\d+\s+[\d.]+\s")
    assert assert_matches(example.sample, done.stdout, skip=rows) >= 8
    for want in (x for x in example.sample if rows.search(x)):
        level, reqs, ok = want.split()[:3]
        assert re.search(rf"^\s+{level}\s+{reqs}\s+{ok}\s", done.stdout, re.MULTILINE), want
