"""The dependency rules of docs/architecture.md, checked on the import statements themselves.

Parsers import only the records and the standard library; each external library has one adapter;
the daemon never imports the tools; views never write.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p for package in ("agent", "parsers") for p in (ROOT / package).rglob("*.py"))

# library (top-level import name) → the only modules allowed to import it
ADAPTERS = {
    "pynvml": {"agent/sources/nvml.py"},
    "yaml": {"agent/yamldoc.py"},
    "sqlite_utils": {"agent/sinks/store.py"},
    "prometheus_client": {"agent/sinks/exporter.py", "agent/prom.py"},
    "aiohttp": {"agent/http.py", "agent/tools/sim_server.py"},  # the client; the simulator serves
    "inotify_simple": {"agent/sources/wake.py"},
    "jinja2": {"agent/views/report_html.py"},
    "rich": {"agent/views/report_text.py", "agent/tools/loadtest_cli.py",  # the report; the progress bars
             "agent/views/scan_progress.py"},
}


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("library", sorted(ADAPTERS))
def test_each_external_library_has_one_adapter(library: str) -> None:
    importers = {_rel(p) for p in MODULES if any(m.split(".")[0] == library for m in _imports(p))}
    assert importers <= ADAPTERS[library], f"{library} imported outside its adapter: {importers - ADAPTERS[library]}"


# The catalogue's loader reads its YAML through the project's one YAML reader (its errors name the line)
PARSER_EXCEPTIONS = {"parsers/catalogue/__init__.py": {"agent.yamldoc"}}


def test_parsers_import_only_the_records_and_the_standard_library() -> None:
    for path in (ROOT / "parsers").rglob("*.py"):
        for module in _imports(path):
            top = module.split(".")[0]
            assert module == "agent.records" or top == "parsers" or top in sys.stdlib_module_names or (
                module in PARSER_EXCEPTIONS.get(_rel(path), ())), f"{_rel(path)} imports {module}"


def test_the_daemon_never_imports_the_tools_and_views_never_write() -> None:
    for path in MODULES:
        rel, imported = _rel(path), set(_imports(path))
        if rel.startswith("agent/daemon/"):
            assert not any(m.startswith("agent.tools") for m in imported), f"{rel} imports a tool"
        if rel.startswith("agent/views/"):
            writers = {"agent.sinks.store", "agent.sinks.writer", "agent.daemon.loop", "agent.daemon.service"}
            assert not imported & writers, f"{rel} imports a writer: {imported & writers}"


# A module past WARN_MODULE_LINES may have taken on a second job: look, and split it by collaborator if so (not
# by size: one class spread over files through inheritance is harder to read than one long file). Past
# MAX_MODULE_LINES it has.
WARN_MODULE_LINES = 800
MAX_MODULE_LINES = 1600


def test_every_module_stays_small() -> None:
    import warnings

    sizes = {_rel(p): len(p.read_text().splitlines()) for p in MODULES}
    big = {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"
    if long := {path: n for path, n in sizes.items() if n > WARN_MODULE_LINES}:
        warnings.warn(f"modules over {WARN_MODULE_LINES} lines (one job still?): {long}", stacklevel=1)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules a module imports, at its top or inside a function (a cycle that waits until a call is
    still a cycle), not under `if TYPE_CHECKING:`. `from package import name` counts as importing the submodule
    `package.name` when there is one, else the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped = {id(n) for node in ast.walk(tree)
               if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    out = set()
    for module in found:
        while module and module not in known:
            module = module.rpartition(".")[0]
        if module and module != name:
            out.add(module)
    return out


def test_no_module_imports_one_that_imports_it_back() -> None:
    known = {_module_name(p) for p in MODULES}
    graph = {_module_name(p): _project_imports(p, _module_name(p), known) for p in MODULES}
    assert graph["agent.cli"] >= {"agent.app", "agent.commands.budget"}  # the walk sees imports at all
    assert _circle(graph) is None, f"import circle: {' → '.join(_circle(graph) or [])}"


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    import graphlib

    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_the_circle_check_finds_a_circle(tmp_path: Path) -> None:
    """The check above on two modules that import each other, one of them inside a function."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f() -> None:\n    from a import x\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n")
    graph = {p.stem: _project_imports(p, p.stem, {"a", "b", "c"}) for p in sorted(tmp_path.glob("*.py"))}
    assert graph == {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _circle(graph) in (["a", "b", "a"], ["b", "a", "b"])
