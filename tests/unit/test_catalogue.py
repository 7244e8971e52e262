"""The catalogue of engine log statements: its schema, its renderer, and every statement held to the parsers.

Each entry is rendered with its arguments behind every prefix era of its engine and inside every envelope
(plain, Docker json-file, CRI, journald in six locales and its other output formats) and read by scan's own
path; it must classify as the entry says, and a benign near miss must raise nothing (bench/catalogue.py does the
rendering and the check)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agent.records import Event, Server
from parsers import catalogue
from parsers.catalogue import CatalogueError, load_file, render

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("catalogue_bench", ROOT / "bench" / "catalogue.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["catalogue_bench"] = module
    spec.loader.exec_module(module)
    return module


B = _bench()
ENTRIES = [(source, s) for source in catalogue.load() for s in source.statements]


# ---- the schema -----------------------------------------------------------------------------------
def test_every_engine_is_catalogued_with_its_versions() -> None:
    by_engine = {s.engine: s for s in catalogue.load()}
    assert {"vllm", "llamacpp", "sglang", "tgi", "ollama", "openai-python", "litellm", "nginx", "envoy",
            "go-net-http", "httpx", "aiohttp", "requests", "curl"} <= set(by_engine)
    vllm = by_engine["vllm"]
    assert {"0.4.3", "0.8.5", "0.10.2", "0.33.0"} <= set(vllm.versions)
    # every claimed vLLM version has incident statements, V0 and V1 alike
    for v in vllm.versions:
        assert sum(s.incident and s.covers(v) for s in vllm.statements) >= 7, v


def test_v1_stats_before_0_12_carry_no_preemption_field() -> None:
    vllm = next(s for s in catalogue.load() if s.engine == "vllm")
    for s in vllm.statements:
        if s.signals == "stats" and s.covers("0.10.2"):
            assert "Preemptions" not in s.format and "preemptions" not in s.fields, s.id


def _write(tmp_path: Path, body: str, name: str = "demo") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(body, encoding="utf-8")
    return path


HEAD = "engine: demo\nrole: engine\nparser: vllm\nversions: ['1.0']\nstatements:\n"
GOOD = ("  - {id: a, since: '1.0', file: f.py, function: g, ref: v1.0, level: ERROR, format: 'boom %d', "
        "args: [3], signals: engine_dead}\n")


def test_a_valid_file_loads(tmp_path: Path) -> None:
    source = load_file(_write(tmp_path, HEAD + GOOD))
    (s,) = source.statements
    assert (s.key, s.message(), s.incident) == ("demo.a", "boom 3", True)


@pytest.mark.parametrize(("entry", "complaint"), [
    (GOOD.replace("signals: engine_dead", "signals: exploded"), "is not an event kind"),
    (GOOD.replace("args: [3]", "args: []"), "do not fill the format"),
    (GOOD.replace("level: ERROR,", "level: ERROR, colour: red,"), "unknown keys ['colour']"),
    (GOOD.replace("signals: engine_dead", "signals: deadline_exceeded"), "timeout_by"),
    (GOOD.replace("signals: engine_dead", "signals: benign"), "near"),
    (GOOD.replace("signals: engine_dead", "signals: engine_dead, pattern: 'bang'"), "does not match"),
    (GOOD.replace("signals: engine_dead", "signals: engine_dead, pattern: '(unclosed'"), "does not compile"),
    (GOOD.replace("since: '1.0'", "since: '2.0', until: '1.0'"), "`since` comes after `until`"),
    (GOOD + GOOD, "duplicate ids ['a']"),
])
def test_a_bad_entry_is_named(tmp_path: Path, entry: str, complaint: str) -> None:
    with pytest.raises(CatalogueError) as caught:
        load_file(_write(tmp_path, HEAD + entry))
    assert complaint in str(caught.value)
    assert str(caught.value).startswith("demo.yaml:")


def test_an_entry_is_named_by_its_line(tmp_path: Path) -> None:
    bad = GOOD.replace("signals: engine_dead", "signals: exploded")
    with pytest.raises(CatalogueError) as caught:
        load_file(_write(tmp_path, HEAD + GOOD.replace("id: a", "id: b") + bad))
    assert str(caught.value).startswith("demo.yaml:7 (a): ")  # the second entry, on the file's seventh line


def test_not_yaml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match=r"^demo\.yaml:2: YAML syntax error"):
        load_file(_write(tmp_path, "engine: demo\nrole: engine: x\n"))


def test_the_file_name_is_the_engine(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match="the file's name"):
        load_file(_write(tmp_path, HEAD + GOOD, name="other"))


@pytest.mark.parametrize(("style", "fmt", "args", "expected"), [
    ("printf", "Running: %d reqs, GPU KV cache usage: %.1f%%", (3, 91.25),
     "Running: 3 reqs, GPU KV cache usage: 91.2%"),
    ("printf", "usage: 50%%", (), "usage: 50%"),
    ("brace", "Engine {:03d}: max seq len ({max_model_len}) {{x}}", ("000", 8192),
     "Engine 000: max seq len (8192) {x}"),
    ("slog", "model weights", ("device", "CUDA0", "size", "4.1 GiB"),
     'msg="model weights" device=CUDA0 size="4.1 GiB"'),
    ("literal", "100% done", (), "100% done"),
    ("goprintf", "[GIN] %v |%s %3d %s| %13v | %15s |%s %-7s %s %#v",
     ("2025/12/14 - 03:11:15", "", 503, "", "12.5µs", "10.0.0.1", "", "POST", "", "/api/chat"),
     '[GIN] 2025/12/14 - 03:11:15 | 503 |        12.5µs |        10.0.0.1 | POST     "/api/chat"'),
])
def test_render(style: str, fmt: str, args: tuple[object, ...], expected: str) -> None:
    assert render(style, fmt, args) == expected


def test_brace_counts_its_arguments() -> None:
    with pytest.raises(ValueError, match="fewer"):
        render("brace", "{} and {}", ("one",))
    with pytest.raises(ValueError, match="more"):
        render("brace", "{}", ("one", "two"))


# ---- every statement against the parsers ------------------------------------------------------------
@pytest.mark.parametrize(("source", "statement"), ENTRIES, ids=[s.key for _, s in ENTRIES])
def test_statement_classifies_as_catalogued(source: catalogue.Source, statement: catalogue.Statement) -> None:
    outcome = B.check(source, statement)
    if statement.gap is None:
        assert outcome.recognised, "\n".join(outcome.failures[:6])
    else:  # not recognised yet: it must at least not be taken for something else
        assert not [f for f in outcome.failures if "also classified as" in f or "false alarm" in f], outcome.failures


@pytest.mark.parametrize(("source", "statement"), ENTRIES, ids=[s.key for _, s in ENTRIES])
def test_statement_read_with_the_server_unknown_is_never_something_else(source: catalogue.Source,
                                                                        statement: catalogue.Statement) -> None:
    """`scan`'s default (`--server auto`) on the line alone, as a pasted excerpt is read: the engine may not be
    recognised from one line, so a miss is allowed here, but no false alarm and no other kind."""
    allowed = {statement.signals, *statement.also}
    if statement.signals == "stats":  # a load sample also says when a queue formed, and how many were preempted
        allowed = {"pending", "preemption"}
    for label, line in B.lines_of(source, statement):
        if label.endswith("/plain"):
            kinds = {r.kind.value for r in B.classify(line, Server.AUTO) if isinstance(r, Event)}
            assert kinds <= allowed if statement.signals != "benign" else not kinds, (label, kinds)


def test_every_benign_statement_shares_words_with_its_incident() -> None:
    for source in catalogue.load():
        by_id = {s.id: s for s in source.statements}
        for s in source.statements:
            if s.signals == "benign":
                assert by_id[s.near].incident, s.key


def test_rendered_lines_cover_prefixes_and_envelopes() -> None:
    vllm = next(s for s in catalogue.load() if s.engine == "vllm")
    stmt = next(s for s in vllm.statements if s.id == "v0-preempted")
    labels = {label for label, _ in B.lines_of(vllm, stmt)}
    assert {"plain-0.4/plain", "plain-0.4/docker", "plain-0.4/cri", "plain-0.4/journald-zh",
            "tagged-0.10/journald-de"} <= labels
    line = dict(B.lines_of(vllm, stmt))["plain-0.4/journald-fr"]
    assert line.startswith("déc. 14 03:11:15 gpu7 engine[1234]: WARNING 09-14 03:11:15 scheduler.py:1141] Sequence")


# 2025-12-14 03:11:15 UTC, as each prefix writes it; short-monotonic counts from boot and says no time at all.
# The yearless syslog forms (short, short-precise, whose fraction the reader drops) fall after the reference
# time the lines are read at (2025-12-13), so they are the year before's: 2024-12-14 03:11:15 UTC
YEAR_BEFORE = 1734145875.0


@pytest.mark.parametrize(("envelope", "expected"), [
    ("journald-short-iso", 1765681875.0), ("journald-short-iso-precise", 1765681875.123456),
    ("journald-short-precise", YEAR_BEFORE), ("journald-short-unix", 1765681875.123456),
    ("journald-short-monotonic", None), ("journald-de", YEAR_BEFORE), ("journald-zh", YEAR_BEFORE),
    ("timestamps", 1765681875.123456789), ("kubectl", 1765681875.123456789),
])
@pytest.mark.parametrize("key", ["process.go-cgo-signal", "sglang.rank-scheduler-dead", "vllm.v1-workerproc-failed"])
def test_a_prefix_gives_its_time_to_a_line_without_one(envelope: str, expected: float | None, key: str) -> None:
    """The engines' own times win where the line has one (vLLM's, SGLang's); these lines are taken without
    theirs, as a crash tail or a bare stderr line arrives."""
    statement = next(s for _, s in ENTRIES if s.key == key)
    physical = dict(B.envelopes(statement.message()))[envelope]
    (event,) = [r for r in B.classify(physical, Server.AUTO) if isinstance(r, Event)]
    assert event.kind.value == statement.signals
    assert event.ts == pytest.approx(expected) if expected is not None else event.ts is None


# ---- the generated documents --------------------------------------------------------------------------
def test_coverage_report_is_current() -> None:
    assert (ROOT / "docs" / "catalogue-coverage.md").read_text(encoding="utf-8") == B.report(B.outcomes()) + "\n", \
        "run .venv/bin/python bench/catalogue.py --write"


def test_parsers_doc_lists_engines_from_the_catalogue() -> None:
    text = (ROOT / "docs" / "parsers.md").read_text(encoding="utf-8")
    assert B.engines_list() in text, "run .venv/bin/python bench/catalogue.py --write"
