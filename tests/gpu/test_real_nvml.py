"""The NVML source against a real driver: run by hand on a GPU machine, never required by CI.

    DEEPINFER_REAL_GPU=1 .venv/bin/pytest tests/gpu

Without DEEPINFER_REAL_GPU=1 the module still runs when a real NVML answers, and skips otherwise.
The poller runs in a child process so that the fake library the unit tests load into this process can
never stand in for the driver here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.nvml_subprocess import PollerProcess

pytestmark = pytest.mark.gpu

ASKED = os.environ.get("DEEPINFER_REAL_GPU") == "1"
PCI_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


@pytest.fixture(scope="module")
def polls() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Two polls of the real driver, 10 s apart on the poller's clock (no waiting in between)."""
    with PollerProcess({}) as child:
        first = child.poll(1000.0)
        if not first["up"]:
            message = f"no real NVML here: {first['hint']}"
            if ASKED:
                pytest.fail(f"DEEPINFER_REAL_GPU=1 but {message}")
            pytest.skip(message)
        second = child.poll(1010.0)
        yield first, second


def test_nvml_is_up_and_names_the_driver(polls: tuple[dict[str, Any], dict[str, Any]]) -> None:
    first, second = polls

    assert first["up"] and second["up"] and first["hint"] is None
    assert re.match(r"^\d+\.\d+", first["driver_version"])
    assert "nvmlInit" not in first["errors_by_call"]


def test_every_gpu_has_an_identity_and_consistent_memory(polls: tuple[dict[str, Any], dict[str, Any]]) -> None:
    gpus = polls[0]["gpus"]

    assert gpus and [g["gpu"] for g in gpus] == list(range(len(gpus)))
    for g in gpus:
        assert g["uuid"].startswith(("GPU-", "MIG-")) and g["name"]
        assert g["pci_bus_id"] is None or PCI_BUS_ID.match(g["pci_bus_id"]), g["pci_bus_id"]
        total, free, used = g["memory_total_bytes"], g["memory_free_bytes"], g["memory_used_bytes"]
        assert total > 0 and 0 <= free <= total and 0 <= used <= total
        reserved = g["memory_reserved_bytes"]
        assert reserved is None or 0 <= reserved + free + used <= total


def test_readings_are_in_their_units_or_none(polls: tuple[dict[str, Any], dict[str, Any]]) -> None:
    for g in polls[0]["gpus"] + polls[1]["gpus"]:
        for ratio in (g["utilization_gpu_ratio"], g["utilization_memory_ratio"]):
            assert ratio is None or 0.0 <= ratio <= 1.0
        assert g["temperature_celsius"] is None or 0 < g["temperature_celsius"] < 130
        assert g["power_watts"] is None or 0 <= g["power_watts"] < 5000
        assert g["power_limit_watts"] is None or 0 < g["power_limit_watts"] < 5000


def test_processes_belong_to_sampled_gpus(polls: tuple[dict[str, Any], dict[str, Any]]) -> None:
    first = polls[0]
    indexes = {g["gpu"] for g in first["gpus"]}

    for p in first["processes"]:
        assert p["gpu"] in indexes and p["pid"] > 0
        assert p["used_memory_bytes"] is None or p["used_memory_bytes"] >= 0


def test_a_second_poll_adds_no_errors(polls: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Unsupported calls are not asked again, so on a healthy GPU the error counts stand still."""
    first, second = polls

    assert second["errors_by_call"] == first["errors_by_call"], second["last_error"]


def test_events_are_xid_or_gpu_lost(polls: tuple[dict[str, Any], dict[str, Any]]) -> None:
    for e in polls[0]["events"] + polls[1]["events"]:
        assert e["kind"] in ("xid", "gpu_lost") and e["source"] == "nvml"
