"""A `together` group's tests (agent/judge/rules.py): signals from different streams — an event and a stats
sample, a scrape and a log line, an OOM and NVML — checked point by point, each at its stream's point nearest
the moment the first test holds (agent/judge/advisor.py pairs them). Also the `where` filter every events test
shares, so both modules validate it one way."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.judge.vocabulary import POINT_SIGNALS, REFERENCES, SIGNALS, WHERE_KEYS
from agent.records import Knob, Phase


def known_where(v: dict[str, str]) -> dict[str, str]:
    """An events filter names only the keys (and knob and phase values) the vocabulary has."""
    for key, value in v.items():
        if key not in WHERE_KEYS:
            raise ValueError(f"unknown filter {key!r} (expected one of: {', '.join(WHERE_KEYS)})")
        if key == "knob" and value not in {k.value for k in Knob}:
            raise ValueError(f"unknown knob {value!r} (expected one of: {', '.join(k.value for k in Knob)})")
        if key == "phase" and value not in {p.value for p in Phase}:
            raise ValueError(f"unknown phase {value!r} (expected one of: {', '.join(p.value for p in Phase)})")
    return v


def known_ref(v: str | None) -> str | None:
    """A reference names a capacity or config value the vocabulary has."""
    if v is not None and v not in REFERENCES:
        raise ValueError(f"unknown reference {v!r} (expected one of: {', '.join(REFERENCES)})")
    return v


class TogetherTest(BaseModel):
    """One test inside a `together` group, checked point by point: a per-sample signal (or NVML's
    `gpu_memory_used_ratio`) compared with a number or `factor` × a reference, or events (`events.<kind>`,
    or a list of kinds, optionally filtered by `where`) that hold wherever such an event was logged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: str | list[str]
    where: dict[str, str] = Field(default_factory=dict)
    op: Literal[">", ">=", "<", "<=", "==", "!="] | None = None
    value: float | None = None
    ref: str | None = None
    factor: float = 1.0
    as_: str | None = Field(None, alias="as", pattern=r"^[a-z][a-z0-9_]{0,31}$",
                            description="the test's evidence name (default: the signal, and the where values)")

    @field_validator("signal")
    @classmethod
    def _point_signal(cls, v: str | list[str]) -> str | list[str]:
        names = v if isinstance(v, list) else [v]
        if not names:
            raise ValueError("expected a signal, or a non-empty list of events.<kind>")
        for name in names:
            event = name.startswith("events.") and name in SIGNALS
            if not event and (isinstance(v, list) or name not in POINT_SIGNALS):
                raise ValueError(f"{name!r} is not a signal with a time per value (expected one of: "
                                 f"{', '.join(POINT_SIGNALS)}, or events.<kind>; a list takes events only)")
        return v

    @field_validator("where")
    @classmethod
    def _known_where(cls, v: dict[str, str]) -> dict[str, str]:
        return known_where(v)

    @field_validator("ref")
    @classmethod
    def _known_ref(cls, v: str | None) -> str | None:
        return known_ref(v)

    @model_validator(mode="after")
    def _shape(self) -> TogetherTest:
        compared = self.op is not None or self.value is not None or self.ref is not None
        if self.is_event:
            if compared:
                raise ValueError("events hold wherever such an event was logged: give no op, value or ref "
                                 "(use where to filter)")
            if isinstance(self.signal, list) and self.as_ is None:
                raise ValueError("a list of events needs `as` (its name in the evidence)")
        else:
            if self.where:
                raise ValueError(f"where applies to events.* signals, not {self.signal}")
            if self.op is None or (self.value is None) == (self.ref is None):
                raise ValueError("give op and exactly one of value (a number) or ref (a capacity/config value)")
        return self

    @property
    def kinds(self) -> list[str]:
        """The event kinds an event test names (empty for a series test)."""
        names = self.signal if isinstance(self.signal, list) else [self.signal]
        return [n.removeprefix("events.") for n in names if n.startswith("events.")]

    @property
    def is_event(self) -> bool:
        return bool(self.kinds)

    @property
    def key(self) -> str:
        """The test's name in the evidence: `as`, else the signal without `events.`, then its where values."""
        if self.as_:
            return self.as_
        assert isinstance(self.signal, str)  # a list has `as` (validated)
        return self.signal.removeprefix("events.") + "".join(f"_{v}" for v in self.where.values())
