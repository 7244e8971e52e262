"""Shared fixtures: a tailer driven step by step into a real SQLite store, and the fake NVML driver."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from agent.bookkeeping import SourceBatch
from agent.records import LogLine
from agent.sinks.store import Store
from agent.sources.tailer import FileTailer, TailOptions
from tests.fake_nvml import FakeNvml, build

# CI machines are shared and slow at moments: a property test is about correctness, never about how
# long one example took, so no per-example deadline (a flaky "DeadlineExceeded" proves nothing).
settings.register_profile("deepinfer", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("deepinfer")


class Follow:
    """A FileTailer committing its cursors into a real store and its lines into `delivered`, the in-test
    sink; `restart()` rebuilds it from the stored cursors.

    The sink keys lines by (file_key, offset) as the store keys the records made from them: a line read
    again after a restart (the cursor waits at a runtime-split piece held back) is stored once, but the
    same key with other text is a bug and fails at once. A step commits a batch's cursors and adds its
    lines with nothing in between, as the daemon's one transaction does; a crash (`restart`) only
    happens between steps, so the two never disagree."""

    def __init__(self, store: Store, pattern: str, options: TailOptions, name: str = "test") -> None:
        self.store = store
        self.pattern = pattern
        self.options = options
        self.name = name
        self.tailer = FileTailer(name, pattern, options, store.cursors(name))
        self._sink: dict[tuple[str, int], LogLine] = {}

    def commit(self, batch: SourceBatch) -> None:
        """Commit one batch: its cursors to the store, its lines to `delivered`."""
        self.store.commit([], batch.cursors, batch.expired)
        for line in batch.lines:
            known = self._sink.setdefault((line.file_key, line.offset), line)
            assert known.text == line.text, f"two lines at {line.file_key}@{line.offset}: {known} / {line}"

    @property
    def delivered(self) -> list[LogLine]:
        """Every line committed, once per (file_key, offset), in the order first committed."""
        return list(self._sink.values())

    def step(self, now: float) -> list[LogLine]:
        """Poll until no backlog is left, committing each batch; return the lines read."""
        got: list[LogLine] = []
        while True:
            batch = self.tailer.poll(now)
            self.commit(batch)
            got.extend(batch.lines)
            if not batch.more:
                return got

    def restart(self) -> None:
        """What a crash does: drop the tailer without flushing anything, then resume from the store."""
        self.tailer = FileTailer(self.name, self.pattern, self.options, self.store.cursors(self.name))

    def texts(self) -> list[str]:
        """Every line delivered, in order, as often as it was delivered."""
        return [line.text for line in self.delivered]


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


@pytest.fixture(scope="session")
def fake_nvml_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvidia-ml.so.1, compiled once per test session."""
    return build(tmp_path_factory.mktemp("fake_nvml"))


@pytest.fixture
def fake_nvml(fake_nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """A fresh, empty config for the fake driver, pointed to by this process's FAKE_NVML_CONFIG."""
    fake = FakeNvml(tmp_path / "nvml.conf", fake_nvml_library)
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(fake.config))
    return fake
