"""What `scan` costs before it reads a line: the modules it imports, the one-command app the console script
runs, and the catalogue's cached copy.

Start-up was most of a small `scan`'s time (bench/README.md, "Start-up"): every engine's parser compiled its
signatures, PyYAML parsed the catalogue, and the store, the exporter and the judge came along. These tests
hold the import structure, not a time: a heavy module that `scan` of a plain vLLM file does not use must not
be imported, and the catalogue read from its copy must be the catalogue read from the YAML.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.app import app_for
from agent.cli import app
from parsers import catalogue

ROOT = Path(__file__).resolve().parents[2]
STATS_LINE = ("INFO 11-29 09:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
              "throughput: 10.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache "
              "hit rate: 0.0%\n")
# What `scan` of a plain vLLM log in text mode has no use for: the store, the exporter, the judge, typer's
# rich rendering, the other engines' parsers, and (from the catalogue's copy) PyYAML.
NOT_FOR_SCAN = ("sqlite_utils", "sqlite3", "prometheus_client", "rich", "agent.judge", "agent.sinks", "agent.daemon",
                "agent.tools", "parsers.sglang", "parsers.tgi", "parsers.llamacpp", "parsers.generic", "yaml",
                "pydantic")


def _imported(args: list[str], cache: Path, log: Path) -> tuple[set[str], str]:
    """The modules a run of `python -X importtime ARGS` imported (its stderr's report), and its stdout."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "DEEPINFER_DEBUG": "1"}
    done = subprocess.run([sys.executable, "-X", "importtime", *args, str(log)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120, check=True)
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return modules, done.stdout


COMMANDS = [c.name or c.callback.__name__ for c in app.registered_commands if c.callback is not None]
# each command's help and a usage mistake, the app's own options after the command, and what needs the whole app
ARGS = [[command, "--help"] for command in COMMANDS] + [
    ["scan"], ["scan", "--bogus", "x"], ["scan", "--jobs", "0", "x"], ["scan", "--version"], ["models"],
    ["--help"], [], ["--version"], ["rules"], ["rules", "check", "--help"], ["sacn", "x"]]


@pytest.mark.parametrize("args", ARGS, ids=" ".join)
def test_the_app_run_for_a_command_answers_as_the_whole_app(args: list[str]) -> None:
    runner = CliRunner()
    whole = runner.invoke(app, args, prog_name="deepinfer-agent", env={"COLUMNS": "100"})
    for_args = runner.invoke(app_for(app, args), args, prog_name="deepinfer-agent", env={"COLUMNS": "100"})
    assert (for_args.exit_code, for_args.output) == (whole.exit_code, whole.output)
    assert whole.output.strip()


def test_only_a_command_gets_an_app_of_its_own() -> None:
    assert app_for(app, ["--help"]) is app and app_for(app, ["rules", "check"]) is app and app_for(app, []) is app
    one = app_for(app, ["scan", "x"])
    assert [c.callback.__name__ for c in one.registered_commands if c.callback is not None] == ["scan"]
    assert len(COMMANDS) >= 10 and "scan" in COMMANDS  # the parametrization above covers them all


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "one.log"
    path.write_text(STATS_LINE)
    return path


def test_scan_of_a_plain_vllm_file_imports_none_of_what_it_does_not_use(tmp_path: Path, log: Path) -> None:
    cache = tmp_path / "cache"
    first, out = _imported(["-m", "agent", "scan", "--jobs", "1"], cache, log)
    assert "read as vllm" in out and "peak KV usage  1.0%" in out
    assert "yaml" in first  # no copy yet: the catalogue is read from its YAML, and the copy written
    assert list((cache / "deepinfer-agent").glob("catalogue-*.json"))
    second, again = _imported(["-m", "agent", "scan", "--jobs", "1"], cache, log)
    assert again == out
    assert "parsers.vllm" in second and "agent.offline.saved" in second  # the report is really there
    heavy = sorted(m for m in second if m in NOT_FOR_SCAN or any(m.startswith(f"{n}.") for n in NOT_FOR_SCAN))
    assert heavy == []


def test_the_check_above_sees_a_heavy_import(tmp_path: Path, log: Path) -> None:
    """The same report for a command that does use the store and the judge (`advise --log`): the check above
    can fail."""
    modules, out = _imported(["-m", "agent", "advise", "--log"], tmp_path / "cache", log)
    assert "Judged 1 engine(s)" in out
    assert {"sqlite_utils", "agent.judge", "yaml"} <= modules


def test_the_catalogue_from_its_copy_is_the_catalogue_from_the_yaml(tmp_path: Path) -> None:
    catalogue.load.cache_clear()
    try:
        from_yaml = catalogue.load(catalogue.HERE, tmp_path)
        (copy,) = tmp_path.glob("catalogue-*.json")
        catalogue.load.cache_clear()
        from_copy = catalogue.load(catalogue.HERE, tmp_path)
        assert from_copy == from_yaml and len(from_yaml) == len(list(catalogue.HERE.glob("*.yaml")))
        copy.write_text("[1, 2")  # cut short: read from the YAML again, and written whole again
        catalogue.load.cache_clear()
        assert catalogue.load(catalogue.HERE, tmp_path) == from_yaml
        assert copy.read_text().startswith('{"format": ')
    finally:
        catalogue.load.cache_clear()


# copies a start must not trust, each a change `_write_copy` never makes
FOREIGN = {
    "another format": lambda held: {**held, "format": "0"},
    "other files' digest": lambda held: {**held, "digest": "0" * 64},
    "a file left out": lambda held: {**held, "sources": held["sources"][1:]},
    "a field it does not know": lambda held: {**held, "sources": [
        {**held["sources"][0], "statements": [{**held["sources"][0]["statements"][0], "bogus": 1}]},
        *held["sources"][1:]]},
    "a field missing": lambda held: {**held, "sources": [
        {k: v for k, v in held["sources"][0].items() if k != "prefixes"}, *held["sources"][1:]]},
    "not a mapping": lambda held: held["sources"],
}


@pytest.mark.parametrize("change", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_copy_not_written_for_these_files_is_passed_over_for_the_yaml(
        tmp_path: Path, change: Callable[[Any], Any]) -> None:
    """The copy is read back without validating its sources again (they were validated when it was written), so
    a copy of another format, of other files or of another shape must be told apart and the YAML read."""
    catalogue.load.cache_clear()
    try:
        from_yaml = catalogue.load(catalogue.HERE, tmp_path)
        (copy,) = tmp_path.glob("catalogue-*.json")
        written = copy.read_text()
        copy.write_text(json.dumps(change(json.loads(written))))
        catalogue.load.cache_clear()
        assert catalogue.load(catalogue.HERE, tmp_path) == from_yaml
        assert copy.read_text() == written  # not trusted: read from the YAML and written whole again
    finally:
        catalogue.load.cache_clear()


def test_an_edited_catalogue_file_is_read_from_its_yaml_not_from_the_old_copy(tmp_path: Path) -> None:
    directory = tmp_path / "catalogue"
    directory.mkdir()
    source = (catalogue.HERE / "curl.yaml").read_text()
    (directory / "curl.yaml").write_text(source)
    cache = tmp_path / "cache"
    catalogue.load.cache_clear()
    try:
        before = catalogue.load(directory, cache)
        (old,) = cache.glob("catalogue-*.json")
        (directory / "curl.yaml").write_text(source.replace("repo: ", "repo: edited-", 1))
        catalogue.load.cache_clear()
        after = catalogue.load(directory, cache)
        (new,) = cache.glob("catalogue-*.json")  # the old copy removed
        assert new != old and not old.exists()
        assert after[0].repo.startswith("edited-") and not before[0].repo.startswith("edited-")
    finally:
        catalogue.load.cache_clear()


def test_an_unwritable_cache_directory_only_costs_the_copy(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    catalogue.load.cache_clear()
    try:
        assert catalogue.load(catalogue.HERE, blocked / "cache") == catalogue.load.__wrapped__(catalogue.HERE,
                                                                                                 tmp_path / "other")
    finally:
        catalogue.load.cache_clear()


# A second process must take what the first derived (each signature's literals, each pre-filter's trie) from the
# copy, and take it right: the regex parser is made to fail in it, so any derivation it still made would show.
_DERIVE_NOTHING = """
import parsers.needles, parsers.signature
class Refuse:
    def parse(self, *args, **kwargs):
        raise AssertionError("derived again")
    def __call__(self, *args, **kwargs):
        raise AssertionError("derived again")
if REFUSE:
    parsers.needles._sre_parse = parsers.signature._trie_pattern = Refuse()
from parsers import make_parser
from agent.records import Server
parser = make_parser(Server.AUTO)
print(len(parser.feed(LINE)) + len(parser.flush()))
"""


def _run(cache: Path, refuse: bool) -> subprocess.CompletedProcess[str]:
    """A process that reads one refusal line with a fresh parser; with `refuse`, any derivation fails it."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    code = f"LINE = {REFUSAL!r}\nREFUSE = {refuse}\n" + _DERIVE_NOTHING
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)


REFUSAL = '(APIServer pid=1) INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable'


def test_what_the_parsers_derive_at_start_is_derived_once_and_read_back_the_same(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _run(cache, refuse=True)
    assert first.returncode != 0 and "derived again" in first.stderr  # nothing to read yet: it derives
    warm = _run(cache, refuse=False)
    assert warm.returncode == 0 and warm.stdout.strip() == "1", warm.stderr
    (copy,) = (cache / "deepinfer-agent").glob("derived-*.json")
    held = json.loads(copy.read_text())
    # every signature's literals, and the tries of the pre-filters the line met (each built on its first search)
    assert len(held["needles"]) > 200 and len(held["trie"]) >= 2
    again = _run(cache, refuse=True)
    assert again.returncode == 0 and again.stdout.strip() == "1", again.stderr  # one event, nothing derived
    # and each held value is what deriving it now gives
    from parsers import needles, signature

    for key, value in held["needles"].items():
        flags, text = key.split(":", 1)
        parsed = needles._sre_parse.parse(text, int(flags))
        fresh = None if parsed.state.flags & 2 else needles._sequence(list(parsed))
        assert (None if value is None else tuple(value)) == (tuple(sorted(fresh)) if fresh else None), text
    for key, value in held["trie"].items():
        assert value == signature._trie_pattern(signature._trie(key[2:].split("\0")), key[0] == "1")


def test_a_damaged_copy_of_what_was_derived_is_derived_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert _run(cache, refuse=False).returncode == 0
    (copy,) = (cache / "deepinfer-agent").glob("derived-*.json")
    for damage in ('{"needles": [1, 2]', '["a list"]', '{"needles": 7}', "\x00\xff",
                   '{"needles": {"0:Engine iteration timed out": 5}, "trie": {"0:NVRM": 7}}'):
        copy.write_text(damage)
        done = _run(cache, refuse=False)
        assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr
        assert len(json.loads(copy.read_text())["needles"]) > 200  # written whole again
