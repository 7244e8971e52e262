"""YAML files read for validation: the data together with its node tree, so every problem names its line.

The config and the rule files both need "file:line: field: expected …" errors; this is the one reader that
keeps the line of every key and item (PyYAML's composed nodes carry their marks) and says why a file could
not be read at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agent.sources.bounded import read_small_text


class YamlReadError(Exception):
    """A file that could not be read or parsed; `line` and `column` are 1-based, 0 when unknown."""

    def __init__(self, problem: str, line: int = 0, column: int = 0) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line
        self.column = column


@dataclass(frozen=True)
class YamlDoc:
    """A parsed document (`data`) and its composed node tree (`node`; None for an empty file)."""

    data: Any
    node: yaml.Node | None

    def line_of(self, loc: Sequence[Any]) -> int:
        """The 1-based line of the deepest part of `loc` found in the document (a field's line is its
        key's); parts that are not in the document, such as pydantic's union tags, are skipped. 0 when the
        document is empty."""
        node = self.node
        if node is None:
            return 0
        line = node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                hit = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
                if hit is None:
                    break
                line, node = hit[0].start_mark.line + 1, hit[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
        return line


MAX_YAML_VALUES = 100_000  # a config or rule file has hundreds; aliases can make 9 lines a billion


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values `node` stands for once its aliases are expanded (each shared node counted once per
    use, computed once: linear in the document even when the expansion is exponential)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    sizes[id(node)] = min(size, MAX_YAML_VALUES + 1)
    return sizes[id(node)]


def read_yaml(path: Path) -> YamlDoc:
    """Read and parse one YAML file with the safe loader; YamlReadError says what stopped it."""
    try:
        text = read_small_text(path)
    except FileNotFoundError as exc:
        raise YamlReadError("file not found") from exc
    except OSError as exc:
        raise YamlReadError(f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise YamlReadError(f"cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None and (size := _expanded_size(node, {})) > MAX_YAML_VALUES:
            raise YamlReadError(f"expands to {size:,} values (YAML aliases), more than {MAX_YAML_VALUES:,}")
        data = yaml.safe_load(text)
    except RecursionError as exc:
        raise YamlReadError("nested too deeply to read") from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise YamlReadError(f"YAML syntax error: {exc.problem}", mark.line + 1 if mark else 0,
                            mark.column + 1 if mark else 0) from exc
    except yaml.YAMLError as exc:
        raise YamlReadError(f"YAML error: {exc}") from exc
    return YamlDoc(data, node)


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_data(path: Path) -> Any:
    """The data of one YAML file, parsed by libyaml when PyYAML has it (ten times the pure-Python loader's
    speed), without the node tree: for data read at every start (the parsers' catalogue). On any problem,
    `read_yaml` says where."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_FAST_LOADER)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return read_yaml(path).data
