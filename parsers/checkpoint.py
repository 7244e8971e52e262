"""A parser's state as a value: what `scan --jobs` compares and carries between the chunks of one file.

`scan --jobs` parses a file's later chunks with fresh parsers and keeps a chunk's records only where the true
state (carried from the chunk before) provably equals the worker's. For that it needs what a parser otherwise
keeps to itself, given by three public methods of `StreamParser` (parsers/base.py):

- `checkpoint()`: everything that decides the parser's future output, with line numbers taken relative to
  its current line, so two parsers that have read different amounts compare equal when they would go on alike;
- `note_new_incidents()`: from now on, note the first (time, line) at which each incident kind the parser
  did not remember was reported: where the true state's memory of that kind would have decided instead;
- `resume(lines_before, incidents, parse_errors)`: go on as if the lines before had been read first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Incidents = dict[str, tuple[float | None, int]]  # incident kind → (time, line) of its last report


@dataclass(frozen=True)
class Checkpoint:
    """A parser's state at one line: equal between two parsers exactly when their next records would be."""

    state: tuple[Any, ...]  # open blocks, queues, phase …: everything but line numbers, caches and counters
    incidents: Incidents  # kind → (time, lines ago) of its last report
    lines_seen: int
    parse_errors: int


class NewKinds(dict[str, tuple[float | None, int]]):
    """An incident table that notes, for each kind it did not hold, the first (time, line) it was asked
    about (a kind not held is always recorded as new, with exactly those): `first`."""

    def __init__(self, base: Incidents) -> None:
        super().__init__(base)
        self.first: dict[str, tuple[float | None, int] | None] = {}

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self and key not in self.first:
            self.first[key] = None
        return super().get(key, default)

    def __setitem__(self, key: str, value: tuple[float | None, int]) -> None:
        if key in self.first and self.first[key] is None:
            self.first[key] = value
        super().__setitem__(key, value)

    def __reduce__(self) -> tuple[type, tuple[Incidents]]:
        """Pickled (a worker's parser handed back), it is the plain table: the noting stays with the worker."""
        return dict, (dict(self),)
