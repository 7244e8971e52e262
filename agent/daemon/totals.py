"""Restart-safe counters: what `/metrics` shows as `_total`, kept in SQLite so a restart continues them.

`rate()` in Prometheus sees no false reset after a restart, and no counter moves for a replayed line:
event counters move only for events the store reports as new.
"""

from __future__ import annotations

from collections.abc import Iterable

Key = tuple[str, tuple[str, ...]]


class Totals:
    """Counters that survive restarts: loaded from the store, moved here, written back each step.

    Two kinds of movement: `add` for things counted here (new events), and `observe` for counters a
    live object keeps from zero since it was made (a tailer's lines, NVML's errors): the value is
    the total when that object started plus what it has counted, so a restart continues, not resets.
    """

    def __init__(self, loaded: dict[Key, float]) -> None:
        self.values: dict[Key, float] = dict(loaded)
        self._base: dict[Key, float] = {}
        self.dirty: set[Key] = set()

    def add(self, key: Key, amount: float = 1.0) -> None:
        self.values[key] = self.values.get(key, 0.0) + amount
        self.dirty.add(key)

    def absorb(self, key: Key, amount: float) -> None:
        """A counter the store already moved in its own transaction: mirror it, do not write it again."""
        self.values[key] = self.values.get(key, 0.0) + amount

    def observe(self, key: Key, since_start: float) -> None:
        base = self._base.setdefault(key, self.values.get(key, 0.0))
        if self.values.get(key) != base + since_start:
            self.values[key] = base + since_start
            self.dirty.add(key)

    def rebase(self, metric_names: Iterable[str]) -> None:
        """The objects behind these counters were replaced (a reload): their new zero is today's total."""
        names = set(metric_names)
        for key in [k for k in self._base if k[0] in names]:
            del self._base[key]

    def take_dirty(self) -> dict[Key, float]:
        out = {k: self.values[k] for k in self.dirty}
        self.dirty.clear()
        return out
