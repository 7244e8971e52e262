"""Rule files: a closed, validated vocabulary (not a language), loaded from YAML with one-line errors.

A rule says: over a window, when these aggregates of named signals compare so with numbers or with
capacity/config values (`all`/`any`; `same_sample`: true together in one stats sample; `together` …
`within`: true within so many seconds of each other across streams), turn this knob
this way, to the value a named built-in computes, and say so with a message that may name only evidence
values. Every name a rule may use is listed (agent/judge/vocabulary.py, `builtins.BUILTINS`); anything
else is an error naming the file,
the rule, the field and what was expected. A later file overrides an earlier rule of the same name, so
an operator's `rules.dirs` can retune a shipped rule without copying the rest. docs/rules.md is the
reference.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from agent.errors import AgentError
from agent.judge.builtins import BUILTINS
from agent.judge.together import TogetherTest, known_ref, known_where
from agent.judge.vocabulary import REFERENCES, SAMPLE_SIGNALS, SIGNALS, ref_key, seconds
from agent.records import Knob, Severity
from agent.verdicts import Direction
from agent.yamldoc import YamlDoc, YamlReadError, read_yaml


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Aggregate(_Model):
    """`<agg>(<signal>[.field] where …)`: one number from a window; the evidence key is `as` or derived."""

    signal: str
    agg: Literal["p50", "p95", "p99", "max", "min", "mean", "last", "sum", "count", "rate", "growth"]
    where: dict[str, str] = Field(default_factory=dict)
    field: str | None = None
    as_: str | None = Field(None, alias="as")

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, v: str) -> str:
        if v not in SIGNALS and v not in REFERENCES:
            raise ValueError(f"unknown signal {v!r} (expected one of: {', '.join(SIGNALS)}; or a reference: "
                             f"{', '.join(REFERENCES)})")
        return v

    @field_validator("where")
    @classmethod
    def _known_where(cls, v: dict[str, str]) -> dict[str, str]:
        return known_where(v)

    @model_validator(mode="after")
    def _series_only(self) -> Aggregate:
        if (self.where or self.field) and not self.signal.startswith("events."):
            raise ValueError(f"where/field apply to events.* signals, not {self.signal}")
        if self.signal in REFERENCES and self.agg != "last":
            raise ValueError(f"{self.signal} is one value, not a series: use agg last")
        return self

    @property
    def key(self) -> str:
        """The evidence name of this aggregate: `as`, else `<signal>[.<field>]_<agg>` with dots as `_`."""
        if self.as_:
            return self.as_
        if self.signal in REFERENCES:
            return ref_key(self.signal)
        base = self.signal.replace("events.", "") + (f"_{self.field}" if self.field else "")
        suffix = "".join(f"_{v}" for v in self.where.values())
        return f"{base}{suffix}_{self.agg}"


class _Comparison(_Model):
    """The right-hand side both kinds of condition share: a number (`value`) or `factor` × a capacity/config
    value (`ref`), exactly one of them."""

    op: Literal[">", ">=", "<", "<=", "==", "!="]
    value: float | None = None
    ref: str | None = None
    factor: float = 1.0

    @field_validator("ref")
    @classmethod
    def _known_ref(cls, v: str | None) -> str | None:
        return known_ref(v)

    @model_validator(mode="after")
    def _one_rhs(self) -> _Comparison:
        if (self.value is None) == (self.ref is None):
            raise ValueError("give exactly one of value (a number) or ref (a capacity/config value)")
        return self


class Condition(_Comparison, Aggregate):
    """An aggregate compared with a number (`value`) or with `factor` × a capacity/config value (`ref`)."""


class SampleCondition(_Comparison):
    """One test inside a `same_sample` group: a per-sample signal compared with a number or `factor` × a
    reference, checked sample by sample (no window aggregate)."""

    signal: str

    @field_validator("signal")
    @classmethod
    def _sample_signal(cls, v: str) -> str:
        if v not in SAMPLE_SIGNALS:
            raise ValueError(f"{v!r} is not a per-sample signal (expected one of: {', '.join(SAMPLE_SIGNALS)})")
        return v


def _kind(item: Any) -> str:
    """A mapping with `all`/`any`/`same_sample`/`together` is a group, anything else a condition: errors
    then name one."""
    if isinstance(item, dict) and ("all" in item or "any" in item or "same_sample" in item or "together" in item):
        return "Group"
    return "Condition"


Item = Annotated[Annotated["Condition", Tag("Condition")] | Annotated["Group", Tag("Group")], Discriminator(_kind)]


class Group(_Model):
    """`all` / `any` of conditions and groups; `same_sample`: tests that must hold in one engine stats
    sample together, in at least `at_least` samples of the window (what the method means by "at the same
    time": a queue *while* every slot runs *and* KV has room, not each of those at some moment); or
    `together` … `within`: tests on different streams (an event and a stats sample, a scrape and a log
    line) that must hold at the same moment — at a point where the first test holds, every other test
    holds at its own stream's nearest point, no more than `within` seconds away; at `at_least` such points
    (an event counts its occurrences)."""

    all: list[Item] | None = None
    any: list[Item] | None = None
    same_sample: list[SampleCondition] | None = None
    together: list[TogetherTest] | None = None
    within: float | None = Field(None, description="together: how far apart (seconds) the tests' points may be")
    at_least: int = Field(1, ge=1, description="same_sample / together: samples (points) where every test held")
    as_: str = Field("joint", alias="as", pattern=r"^[a-z][a-z0-9_]{0,31}$",
                     description="same_sample / together: the evidence prefix (<as>_samples or <as>_matches, "
                                 "<as>_<signal>_max/min)")

    @field_validator("within", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float | None:
        return None if v is None else seconds(v)

    @model_validator(mode="after")
    def _one_list(self) -> Group:
        lists = [x for x in (self.all, self.any, self.same_sample, self.together) if x is not None]
        if len(lists) != 1 or not lists[0]:
            raise ValueError("a group takes exactly one non-empty list: all, any, same_sample or together")
        if (self.together is None) != (self.within is None):
            raise ValueError("within goes with together (and together needs within: 30s, 2m …)")
        if self.together is not None and len(self.together) < 2:
            raise ValueError("together needs at least two tests (one alone is a condition)")
        return self

    def conditions(self) -> Iterable[Condition]:
        for item in self.all or self.any or []:
            if isinstance(item, Group):
                yield from item.conditions()
            else:
                yield item

    def groups(self) -> Iterable[Group]:
        """This group and every group inside it."""
        yield self
        for item in self.all or self.any or []:
            if isinstance(item, Group):
                yield from item.groups()

    def joint_keys(self) -> list[str]:
        """The evidence a `same_sample` or `together` group adds: the samples (points) that matched, each
        signal's range in them; an event test adds the occurrences that took part (`<as>_<key>_count`)."""
        if self.same_sample is not None:
            keys = [f"{self.as_}_samples"]
            for c in self.same_sample:
                keys += [f"{self.as_}_{c.signal}_max", f"{self.as_}_{c.signal}_min"]
            return keys
        if self.together is not None:
            keys = [f"{self.as_}_matches"]
            for t in self.together:
                keys += [f"{self.as_}_{t.key}_count"] if t.is_event else [f"{self.as_}_{t.key}_max",
                                                                            f"{self.as_}_{t.key}_min"]
            return keys
        return []


class Action(_Model):
    knob: Knob
    direction: Direction
    to: str | None = None
    factor: float = Field(1.0, gt=0, description="scale_current / observed_plus_margin: the multiplier")
    of: str | None = Field(None, description="observed_plus_margin: the evidence value to start from")

    @field_validator("to")
    @classmethod
    def _known_builtin(cls, v: str | None) -> str | None:
        if v is not None and v not in BUILTINS:
            raise ValueError(f"unknown built-in {v!r} (expected one of: {', '.join(BUILTINS)})")
        return v


class Rule(_Model):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{2,63}$")
    description: str = ""
    severity: Severity = Severity.WARNING
    category: Literal["kv_exhausted", "activation_peak", "startup", "node_full", "queueing", "rejections",
                      "timeouts", "config", "engine"] = Field(
        "config", description="what kind of incident a firing means: the headline every surface shows")
    window: float = 600.0
    min_samples: int = Field(1, ge=0)
    static: bool = Field(False, description="judged from capacity/config alone (no window data needed)")
    when: Group
    observe: list[Aggregate] = Field(default_factory=list, description="more aggregates for the evidence only")
    action: Action
    message: str
    clear_after: int = Field(2, ge=1, description="evaluations in a row without a match before it clears")
    cooldown: float = Field(0.0, ge=0, description="seconds after clearing before it may fire again")

    @field_validator("window", "cooldown", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        return seconds(v)

    @model_validator(mode="after")
    def _message_names_evidence(self) -> Rule:
        allowed = {c.key for c in self.when.conditions()} | {o.key for o in self.observe}
        allowed |= {k for g in self.when.groups() for k in g.joint_keys()}
        allowed |= {"from", "to", "engine", "knob", "flag", "governs"}
        allowed |= {ref_key(r) for r in REFERENCES}
        if self.action.of is not None and self.action.of not in allowed:
            raise ValueError(f"action.of names {self.action.of!r}, not an evidence value (expected one of: "
                             f"{', '.join(sorted(allowed))})")
        for _, name, _, _ in string.Formatter().parse(self.message):
            if name is not None and name.split(":")[0] not in allowed:
                raise ValueError(f"message names {{{name}}}, not an evidence value (expected one of: "
                                 f"{', '.join(sorted(allowed))})")
        return self


class RuleFile(_Model):
    rules: list[Rule]


class RuleError(AgentError):
    """Rule files with problems; `problems` holds one line each: file:line: rule: field: expected …"""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class RuleSet:
    """The rules in force, by name, and where each came from."""

    rules: tuple[Rule, ...] = ()
    origin: dict[str, str] = field(default_factory=dict)


def _known_fields(parent: tuple[Any, ...]) -> list[str]:
    """The field names valid where an unknown one was found (`parent` is its location inside a rule)."""
    tags = [p for p in parent if p in ("Condition", "Group")]
    model: type[BaseModel] = Rule
    if "same_sample" in parent[-2:]:
        model = SampleCondition
    elif "together" in parent[-2:]:
        model = TogetherTest
    elif tags:
        model = Condition if tags[-1] == "Condition" else Group
    elif parent[:1] == ("action",):
        model = Action
    elif parent[:1] == ("observe",):
        model = Aggregate
    return [f.alias or name for name, f in model.model_fields.items()]


def _problem(path: Path, doc: YamlDoc, error: Any) -> str:
    loc: tuple[Any, ...] = tuple(error["loc"])
    line = doc.line_of(loc)
    rule = "-"
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
        try:
            rule = str(doc.data["rules"][loc[1]].get("name", f"rules[{loc[1]}]"))
        except (KeyError, IndexError, TypeError, AttributeError):
            rule = f"rules[{loc[1]}]"
        loc = loc[2:]
    where = ""
    for p in loc:
        if isinstance(p, int):
            where += f"[{p}]"
        elif p[:1].islower():
            where += f".{p}" if where else p
    msg = str(error["msg"]).replace("Value error, ", "").replace("Input should be", "expected")
    for field_name in ("message", "action.of"):
        if msg.startswith(f"{field_name} names"):
            where = field_name
            line = doc.line_of((*tuple(error["loc"]), *field_name.split(".")))
    where = where or "(rule)"
    if error["type"] == "extra_forbidden":
        msg = f"unknown field (expected one of: {', '.join(_known_fields(loc[:-1]))})"
    elif error["type"] == "missing":
        msg = "required field is missing"
    elif error["type"] == "string_pattern_mismatch":
        msg = "expected 3–64 lowercase letters, digits or _, starting with a letter"
    return f"{path}:{line}: {rule}: {where}: {msg}"


def load_file(path: Path) -> list[Rule]:
    """Parse and validate one rule file; RuleError lists every problem, one line each."""
    try:
        doc = read_yaml(path)
    except YamlReadError as exc:
        raise RuleError([f"{path}:{exc.line}: -: {exc.problem}" if exc.line else f"{path}: {exc.problem}"]) from exc
    data = doc.data
    if not isinstance(data, dict):
        raise RuleError([f"{path}:1: -: (file): expected a mapping with a `rules:` list"])
    try:
        parsed = RuleFile.model_validate(data)
    except ValidationError as exc:
        seen: list[str] = []
        for error in exc.errors():
            # A union member's errors repeat for Condition and Group: keep the ones naming the field.
            text = _problem(path, doc, error)
            if text not in seen:
                seen.append(text)
        raise RuleError(seen) from exc
    names = [r.name for r in parsed.rules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RuleError([f"{path}:1: {n}: name: defined twice in one file" for n in dupes])
    return parsed.rules


def rule_files(dirs: Sequence[Path]) -> list[Path]:
    """Every `*.yaml` / `*.yml` in `dirs`, each folder sorted by name, folders in the order given."""
    out: list[Path] = []
    for d in dirs:
        if d.is_file():
            out.append(d)
        elif d.is_dir():
            out.extend(sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml")))
        else:
            raise RuleError([f"{d}: -: (dir): rule directory not found"])
    return out


def load_rules(dirs: Sequence[Path]) -> RuleSet:
    """Load every rule file in order; a later rule replaces an earlier one of the same name.

    All problems across all files are collected before raising, so `rules check` prints them all."""
    problems: list[str] = []
    by_name: dict[str, Rule] = {}
    origin: dict[str, str] = {}
    try:
        files = rule_files(dirs)
    except RuleError as exc:
        problems.extend(exc.problems)
        files = [p for d in dirs if d.exists() for p in rule_files([d])]
    for path in files:
        try:
            for rule in load_file(path):
                by_name[rule.name] = rule
                origin[rule.name] = str(path)
        except RuleError as exc:
            problems.extend(exc.problems)
    if problems:
        raise RuleError(problems)
    return RuleSet(tuple(by_name.values()), origin)
