"""The catalogue: the log statements of each engine, client and proxy that signal an event or a capacity fact.

The parsers grew excerpt by excerpt, so every new batch of real logs found new misses. The catalogue turns
that around: each engine's own logging calls, read in its source at the versions we claim, are written down
as data (one YAML file per engine, client or proxy, next to this module), and tests render every format with
realistic arguments behind every prefix the engine, Docker, CRI and journald put in front, and hold the
parsers to the kind each entry says. A new engine version is then a data change plus the tests it generates.

An entry records where the statement is (repository, file, function, the tag it was read at), the versions
that print it (`since`…`until`, `until` empty while it is current), its level and format string as written
in the source, what it signals (an event kind, `fact`, `stats`, or `benign` for a statement that shares an
incident's words but is none), and the fields the parsers must extract. A statement the parsers do not
recognise yet carries `gap`, the reason; the coverage report lists those (bench/catalogue_coverage.py).

Loading validates everything (`CatalogueError` names the file and entry); nothing here is on a parser's hot
path: `parsers.catalogued` builds signatures from the entries that carry a `pattern`, once, at import.

Every start of every command that parses reads the catalogue, and importing PyYAML and parsing the files took
most of that, so the files' data is also kept as JSON in the user's cache directory, named by the hash of the
files' bytes: a changed file is a new name, so the copy cannot be stale. The copy holds the sources as
validated when it was written, so a start reads them back without validating again; a copy cut short, of
another format or of other files is passed over for the YAML. A copy that cannot be read or written is only
slower.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.records import EventKind, Phase, Server
from parsers.cachedir import user_cache_dir, write_copy

HERE = Path(__file__).resolve().parent
CACHE_FORMAT = "2"  # part of the copy's name: raise it when what the copy holds changes
FIELD_VALUE = (str, int, float, bool)
SIGNALS = frozenset({k.value for k in EventKind} | {"request_failed", "fact", "stats", "benign"})
NOT_INCIDENTS = frozenset({"fact", "stats", "benign"})
STYLES = frozenset({"printf", "goprintf", "brace", "slog", "literal"})
_GO_VERB = re.compile(r"%(#?)(-?\d*)v")
ROLES = frozenset({"engine", "client", "proxy", "runtime"})  # runtime: what the OS, the shell or Python print
TIMEOUT_BY = frozenset({"client", "proxy", "engine"})
TIMEOUT_ON = frozenset({"queue", "generation", "rpc", "connect", "unknown"})
_BRACE = re.compile(r"\{\{|\}\}|\{[^{}]*\}")
_STATEMENT_KEYS = frozenset({"id", "since", "until", "file", "function", "ref", "level", "style", "format", "args",
                             "signals", "fields", "phase", "also", "gap", "near", "prefixes", "pattern", "note"})
_FILE_KEYS = frozenset({"engine", "role", "parser", "repo", "versions", "prefixes", "statements", "note"})


class CatalogueError(ValueError):
    """A catalogue file that does not follow the schema (the message names the file and the entry)."""


@dataclass(frozen=True)
class Prefix:
    """What an engine's logger (or its process wrapper) writes before the message in one era of its versions:
    a template with `{level}` and `{msg}` (`{json_msg}` in a JSON formatter's record)."""

    name: str
    template: str
    since: str
    until: str | None
    timed: bool = True  # the prefix carries a time (llama.cpp's bare lines and its time-since-start do not)
    explicit: bool = False  # only for the statements that name it (uvicorn's access lines, not the engine's)


@dataclass(frozen=True)
class Statement:
    """One logging call (or raised message) of one engine, over the versions that print it."""

    engine: str
    id: str
    since: str
    until: str | None
    file: str
    function: str
    ref: str
    level: str
    style: str
    format: str
    args: tuple[Any, ...]
    signals: str
    fields: Mapping[str, Any]
    phase: str | None = None
    also: tuple[str, ...] = ()  # other event kinds the same line rightly raises (a timeout that kills the engine)
    gap: str | None = None  # why the parsers do not recognise it yet
    near: str | None = None  # for a benign statement: the incident whose words it shares
    prefixes: tuple[str, ...] | None = None  # the prefix names that apply (None: every era that overlaps)
    pattern: str | None = None  # a regex the parsers take as a signature (parsers.catalogued)

    @property
    def key(self) -> str:
        return f"{self.engine}.{self.id}"

    @property
    def incident(self) -> bool:
        return self.signals not in NOT_INCIDENTS

    def message(self) -> str:
        """The format rendered with the entry's arguments, as the engine would print the message."""
        return render(self.style, self.format, self.args)

    def covers(self, version: str) -> bool:
        return version_key(self.since) <= version_key(version) and (
            self.until is None or version_key(version) <= version_key(self.until))


@dataclass(frozen=True)
class Source:
    """One catalogue file: an engine, a client or a proxy, the versions claimed, and its statements."""

    engine: str
    role: str
    parser: Server
    repo: str
    versions: tuple[str, ...]
    prefixes: tuple[Prefix, ...]
    statements: tuple[Statement, ...] = field(default=())

    def prefixes_for(self, statement: Statement) -> tuple[Prefix, ...]:
        """The prefix eras a statement is printed under: those named, else every era overlapping its range."""
        if statement.prefixes is not None:
            return tuple(p for p in self.prefixes if p.name in statement.prefixes)
        lo, hi = version_key(statement.since), version_key(statement.until) if statement.until else None
        return tuple(p for p in self.prefixes
                     if not p.explicit and (hi is None or version_key(p.since) <= hi)
                     and (p.until is None or lo <= version_key(p.until)))


def version_key(version: str) -> tuple[int, ...]:
    """A version's order: its numbers in turn (`0.10.1.1`, `b4500`, `v3.0.0` all compare as expected)."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


# C's conversions as Python's `%` takes them: its length modifiers dropped (`%zu`, `%lld`), `%u` as `%d`, and a
# pointer (`%p`) as the text the argument gives (`0x55b017570c40`, `(nil)`)
_C_CONVERSION = re.compile(r"%%|%([-+ #0]*\d*(?:\.\d+)?)(?:hh|h|ll|l|z|j|t|L)?([diouxXeEfgGcsp])")


def _python_conversion(m: re.Match[str]) -> str:
    if m.group(0) == "%%":
        return "%%"
    return "%" + m.group(1) + {"p": "s", "u": "d"}.get(m.group(2), m.group(2))


def render(style: str, fmt: str, args: tuple[Any, ...]) -> str:
    """A format string filled in as its language would: `printf` (C and Python %), `brace` (f-strings, Rust
    `format!`, Python `.format`: each placeholder in turn takes the next argument, already written as the
    engine prints it), `goprintf` (Go's fmt verbs), `slog` (Go's text handler: the message, then `key=value`
    pairs), `literal`."""
    if style == "printf":
        if args:
            return _C_CONVERSION.sub(_python_conversion, fmt) % args
        if "%" in fmt.replace("%%", ""):
            raise ValueError("a placeholder without an argument")
        return fmt.replace("%%", "%")
    if style == "brace":
        values = iter(args)

        def fill(m: re.Match[str]) -> str:
            token = m.group(0)
            return token[0] if token in ("{{", "}}") else str(next(values))
        try:
            out = _BRACE.sub(fill, fmt)
        except StopIteration:
            raise ValueError("fewer arguments than placeholders") from None
        if next(values, None) is not None:
            raise ValueError("more arguments than placeholders")
        return out
    if style == "goprintf":  # Go's fmt: %v is the value, %#v a quoted string; widths as C's
        return render("printf", _GO_VERB.sub(lambda m: '"%s"' if m.group(1) else f"%{m.group(2)}s", fmt), args)
    if style == "slog":
        pairs = [f"{k}={_slog_value(v)}" for k, v in zip(args[::2], args[1::2], strict=False)]
        return " ".join([f"msg={_slog_value(fmt)}", *pairs])
    return fmt


def _slog_value(value: Any) -> str:
    text = str(value)
    return f'"{text}"' if not text or any(c in text for c in ' ="') else text


def _require(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise CatalogueError(f"{where}: {what}")


def _statement(engine: str, raw: Any, where: str, prefix_names: set[str]) -> Statement:
    _require(isinstance(raw, dict), where, "an entry must be a mapping")
    unknown = set(raw) - _STATEMENT_KEYS
    _require(not unknown, where, f"unknown keys {sorted(unknown)}")
    for key in ("id", "since", "file", "function", "ref", "level", "format", "signals"):
        _require(isinstance(raw.get(key), str) and raw[key] != "", where, f"`{key}` must be a non-empty string")
    where = f"{where} ({raw['id']})"
    style = raw.get("style", "printf")
    _require(style in STYLES, where, f"style must be one of {sorted(STYLES)}")
    signals = raw["signals"]
    _require(signals in SIGNALS, where, f"signals `{signals}` is not an event kind, fact, stats or benign")
    args = raw.get("args", [])
    _require(isinstance(args, list), where, "`args` must be a list")
    fields = raw.get("fields", {})
    _require(isinstance(fields, dict) and all(isinstance(v, FIELD_VALUE) for v in fields.values()), where,
             "`fields` must map names to numbers, strings or booleans")
    phase = raw.get("phase")
    _require(phase is None or phase in {p.value for p in Phase}, where, f"phase `{phase}` is not a phase")
    also = tuple(raw.get("also", ()))
    _require(all(a in SIGNALS - NOT_INCIDENTS for a in also), where, "`also` must list event kinds")
    if signals == "deadline_exceeded":
        _require(fields.get("timeout_by") in TIMEOUT_BY, where, f"a timeout names `timeout_by` ({sorted(TIMEOUT_BY)})")
        _require(fields.get("timeout_on") in TIMEOUT_ON, where, f"a timeout names `timeout_on` ({sorted(TIMEOUT_ON)})")
    if signals == "benign":
        _require(isinstance(raw.get("near"), str), where, "a benign statement names the incident it is `near`")
    if signals == "fact":
        _require(bool(fields), where, "a fact names the facts it carries in `fields`")
    prefixes = raw.get("prefixes")
    _require(prefixes is None or (isinstance(prefixes, list) and set(prefixes) <= prefix_names), where,
             f"`prefixes` must name prefixes of this file ({sorted(prefix_names)})")
    gap = raw.get("gap")
    _require(gap is None or (isinstance(gap, str) and gap.strip() != ""), where, "`gap` must say why")
    pattern = raw.get("pattern")
    if pattern is not None:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise CatalogueError(f"{where}: pattern does not compile: {exc}") from None
    statement = Statement(
        engine=engine, id=raw["id"], since=raw["since"], until=raw.get("until"), file=raw["file"],
        function=raw["function"], ref=raw["ref"], level=raw["level"], style=style, format=raw["format"],
        args=tuple(args), signals=signals, fields=fields, phase=phase, also=also, gap=gap, near=raw.get("near"),
        prefixes=tuple(prefixes) if prefixes is not None else None, pattern=pattern)
    _require(statement.until is None or version_key(statement.since) <= version_key(statement.until), where,
             "`since` comes after `until`")
    try:
        message = statement.message()
    except (TypeError, ValueError) as exc:
        raise CatalogueError(f"{where}: the arguments do not fill the format: {exc}") from None
    if pattern is not None:
        _require(compiled.search(message) is not None, where, "the pattern does not match the rendered format")
    return statement


def load_file(path: Path, data: Any = None) -> Source:
    """One catalogue file, validated: its data read by libyaml (or given, as read before from the same
    bytes); only a file with a problem is read again with its node tree, so that the error names the line."""
    if data is not None:
        with contextlib.suppress(CatalogueError):  # the problem is found again below, with its line
            return _validate(path, data, lambda i: "")
    from agent.yamldoc import YamlReadError, read_data, read_yaml  # here: a start from the cached copy needs no YAML

    try:
        return _validate(path, read_data(path), lambda i: "")
    except (CatalogueError, YamlReadError):
        try:
            doc = read_yaml(path)
        except YamlReadError as exc:
            raise CatalogueError(f"{path.name}:{exc.line}: {exc.problem}") from None
        return _validate(path, doc.data, lambda i: f":{doc.line_of(['statements', i])}")


def _validate(path: Path, raw: Any, line: Callable[[int], str]) -> Source:
    where = path.name
    _require(isinstance(raw, dict), where, "the file must be a mapping")
    unknown = set(raw) - _FILE_KEYS
    _require(not unknown, where, f"unknown keys {sorted(unknown)}")
    engine, role = raw.get("engine"), raw.get("role")
    _require(isinstance(engine, str) and engine == path.stem, where, "`engine` must equal the file's name")
    _require(role in ROLES, where, f"`role` must be one of {sorted(ROLES)}")
    try:
        parser = Server(raw.get("parser", "auto"))
    except ValueError:
        raise CatalogueError(f"{where}: `parser` is not a server") from None
    versions = raw.get("versions")
    _require(isinstance(versions, list) and bool(versions) and all(isinstance(v, str) for v in versions), where,
             "`versions` lists the versions read, as strings")
    prefixes = tuple(Prefix(p["name"], p["template"], p["since"], p.get("until"), bool(p.get("timed", True)),
                            bool(p.get("explicit", False)))
                     for p in raw.get("prefixes", []))
    _require(all("{msg}" in p.template or "{json_msg}" in p.template for p in prefixes), where,
             "every prefix template holds `{msg}` (or `{json_msg}`, the message as a JSON string's inside)")
    names = {p.name for p in prefixes}
    statements = tuple(_statement(engine, s, f"{where}{line(i)}", names)
                       for i, s in enumerate(raw.get("statements") or []))
    ids = [s.id for s in statements]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    _require(not dupes, where, f"duplicate ids {dupes}")
    for s in statements:
        _require(s.near is None or s.near in ids, where, f"{s.id}: `near` names no entry of this file")
    return Source(engine, role, parser, raw.get("repo", ""), tuple(versions), prefixes, statements)


@functools.lru_cache(maxsize=1)
def load(directory: Path = HERE, cache_dir: Path | None = None) -> tuple[Source, ...]:
    """Every catalogue file, in name order: from the JSON copy in `cache_dir` (default: the user's cache
    directory) when there is one for these bytes, else from the YAML, validated, and then copied there."""
    paths = sorted(directory.glob("*.yaml"))
    cache_dir = cache_dir if cache_dir is not None else user_cache_dir()
    copy, digest = _copy_path(paths, cache_dir) if cache_dir is not None else (None, "")
    cached = _read_copy(copy, digest, [p.stem for p in paths]) if copy is not None else None
    if cached is not None:
        return cached
    from agent.yamldoc import read_data

    sources = tuple(load_file(p, read_data(p)) for p in paths)
    if copy is not None:
        _write_copy(copy, digest, sources)
    return sources


def _copy_path(paths: list[Path], cache_dir: Path) -> tuple[Path, str]:
    """The copy's name and the digest it holds: the hash of every file's name and bytes, so an edit, a new or a
    removed file is a new copy."""
    digest = hashlib.sha256(CACHE_FORMAT.encode())
    for path in paths:
        body = path.read_bytes()
        digest.update(f"\0{path.name}\0{len(body)}\0".encode())
        digest.update(body)
    hexdigest = digest.hexdigest()
    return cache_dir / f"catalogue-{hexdigest[:32]}.json", hexdigest


def _read_copy(copy: Path, digest: str, engines: list[str]) -> tuple[Source, ...] | None:
    """The catalogue as the copy holds it: the sources validated when it was written, so they are built as they
    are, without validating again (compiling and matching every pattern was most of reading the copy). None, and
    the YAML is read, when the copy is missing, cut short, of another format, of other files (its digest), or of
    any other shape than `_write_copy` gives."""
    try:
        held = json.loads(copy.read_text(encoding="utf-8"))
        if held["format"] != CACHE_FORMAT or held["digest"] != digest:
            return None
        sources = tuple(_source(raw) for raw in held["sources"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return sources if [s.engine for s in sources] == engines else None


def _source(raw: dict[str, Any]) -> Source:
    """One source from the copy's form of it (`dataclasses.asdict`, tuples written as JSON lists)."""
    return Source(
        engine=raw["engine"], role=raw["role"], parser=Server(raw["parser"]), repo=raw["repo"],
        versions=tuple(raw["versions"]), prefixes=tuple(Prefix(**p) for p in raw["prefixes"]),
        statements=tuple(Statement(**{**s, "args": tuple(s["args"]), "also": tuple(s["also"]),
                                      "prefixes": None if s["prefixes"] is None else tuple(s["prefixes"])})
                         for s in raw["statements"]))


def _write_copy(copy: Path, digest: str, sources: tuple[Source, ...]) -> None:
    """Keep the validated sources as JSON, written whole or not at all (a temporary file renamed), and only when
    reading it back gives exactly the same sources (YAML has types JSON lacks); older copies are removed."""
    from dataclasses import asdict

    try:
        text = json.dumps({"format": CACHE_FORMAT, "digest": digest, "sources": [asdict(s) for s in sources]},
                          ensure_ascii=False)
        if tuple(_source(raw) for raw in json.loads(text)["sources"]) != sources:
            return
    except (TypeError, ValueError):
        return
    write_copy(copy, text, "catalogue-*.json")


def statements(directory: Path = HERE) -> Iterator[tuple[Source, Statement]]:
    for source in load(directory):
        for s in source.statements:
            yield source, s
