"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_nvml import FakeNvml, build


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
