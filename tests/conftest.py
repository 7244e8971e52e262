"""Shared test helpers: a tailer driven step by step into a real SQLite store, as the daemon drives it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.records import LogLine
from agent.store import Store
from agent.tailer import FileTailer, TailOptions


class Follow:
    """A FileTailer committing into a real store; `restart()` rebuilds it from the stored cursors."""

    def __init__(self, store: Store, pattern: str, options: TailOptions, name: str = "test") -> None:
        self.store = store
        self.pattern = pattern
        self.options = options
        self.name = name
        self.tailer = FileTailer(name, pattern, options, store.cursors(name))

    def step(self, now: float) -> list[LogLine]:
        """Poll until no backlog is left, committing each batch; return the lines read."""
        got: list[LogLine] = []
        while True:
            batch = self.tailer.poll(now)
            self.store.commit(batch.lines, batch.cursors, batch.expired)
            got.extend(batch.lines)
            if not batch.more:
                return got

    def restart(self) -> None:
        """What a crash does: drop the tailer without flushing anything, then resume from the store."""
        self.tailer = FileTailer(self.name, self.pattern, self.options, self.store.cursors(self.name))

    def texts(self) -> list[str]:
        return [line.text for line in self.store.lines(self.name)]


@pytest.fixture
def store() -> Store:
    return Store.open(":memory:")


FollowFactory = Callable[..., Follow]


@pytest.fixture
def follow(tmp_path: Path, store: Store) -> FollowFactory:
    """`follow(pattern, **TailOptions fields)`: a Follow on tmp_path, reading from the beginning."""
    def make(pattern: str = "*.log", **options: Any) -> Follow:
        opts = TailOptions(**{"start_at": "beginning", "rotate_wait_seconds": 0.0, **options})
        return Follow(store, str(tmp_path / pattern), opts)
    return make
