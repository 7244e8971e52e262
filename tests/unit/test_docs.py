"""The README and docs/: every `docs/….md` the code cites exists, links resolve, the README stays short and
carries CI's exact test command, and every exported metric is in docs/metrics.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.test_metrics import FULL, exposition

ROOT = Path(__file__).parent.parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CITING_TREES = ("agent", "parsers", "tests", "rules", "examples", "bench", "grafana", "systemd")
# A page under docs/ named in the text, not preceded by a path character (another tree's docs/ folder).
CITATION = re.compile(r"(?<![\w./-])docs/([\w.-]+\.md)\b")
# A relative Markdown link's target, without its #anchor: `[text](target)`.
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)#\s]+)(?:#[^)\s]*)?\)")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def citations() -> dict[str, list[str]]:
    """docs/ page name → the files (and lines) that cite it."""
    found: dict[str, list[str]] = {}
    for tree in CITING_TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if not path.is_file() or path.suffix not in {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".c"}:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                for name in CITATION.findall(line):
                    found.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{number}")
    return found


def test_the_code_cites_docs_pages() -> None:
    assert citations(), "no docs/….md citation found: is the pattern still right?"


@pytest.mark.parametrize("name", sorted(citations()))
def test_every_cited_docs_page_exists(name: str) -> None:
    assert (DOCS / name).is_file(), f"docs/{name} is cited by {citations()[name]} but does not exist"


def test_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move reference material to docs/"


def test_readme_carries_cis_test_command_verbatim_in_a_code_block() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line for line in ci if line.startswith("python3 -m venv")]
    assert len(commands) == 1, commands
    readme = README.read_text()
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", readme, flags=re.M | re.S)
    assert any(commands[0] in block.splitlines() for block in blocks), "README lacks CI's test command line"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name if p.parent == DOCS else "README")
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # code blocks hold no links
    for target in LINK.findall(text):
        assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to missing {target}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name if p.parent == DOCS else "README")
def test_the_method_is_called_the_budget_method(page: Path) -> None:
    assert not re.search(r"\bseeds?\b", page.read_text(), flags=re.I), f"{page.name}: say 'the budget method'"


def test_every_exported_metric_is_in_docs_metrics() -> None:
    documented = (DOCS / "metrics.md").read_text()
    text = exposition(FULL)
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
    names |= {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    for name in sorted(names):
        base = name.removesuffix("_created")
        assert any(f"`{base}{suffix}`" in documented for suffix in ("", "_total", "_info")), name


# A repository path written in backticks: one of the top-level trees, then a file with an extension.
REPO_PATH = re.compile(r"`((?:agent|parsers|tests|rules|examples|bench|grafana|prometheus|systemd|docs|\.ci)/"
                       r"[\w./-]*\w\.\w+)`")
# Files outside the repository that a reader cannot open: the docs must not send them there.
OUTSIDE = re.compile(r"DESIGN\.md|STYLE\.md|design notes|shared/reference|server-formats\.md|\.\./shared|\.\./\.\./")
# Paths the docs name as what the agent makes or expects on a node, not files of this repository.
NOT_IN_REPO = re.compile(r"\{|<|\*|^tests/data/real/")


def cited_paths() -> list[tuple[str, str]]:
    """(page:line, path) for every repository path the README, docs/ and the folders' READMEs cite."""
    found = []
    readmes = [p for p in ROOT.glob("*/README.md") if p.parent.name != ".venv"]
    for page in [*pages(), *sorted(readmes)]:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for path in REPO_PATH.findall(line):
                if not NOT_IN_REPO.search(path):
                    found.append((f"{page.relative_to(ROOT)}:{number}", path))
    return found


def test_the_docs_cite_paths_of_this_repository() -> None:
    assert len(cited_paths()) > 40  # the docs do cite the code: the pattern finds them


def test_every_path_the_docs_cite_exists() -> None:
    missing = [f"{where}: {path}" for where, path in cited_paths() if not (ROOT / path).exists()]
    assert missing == [], "docs cite files that are not in the repository"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name if p.parent == DOCS else "README")
def test_no_page_cites_a_file_outside_the_repository(page: Path) -> None:
    hits = [f"{page.name}:{n}: {line.strip()}" for n, line in enumerate(page.read_text().splitlines(), 1)
            if OUTSIDE.search(line)]
    assert hits == []
