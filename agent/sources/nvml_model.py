"""The NVML source without the driver: what a poll returns, a GPU's identity, the Xid event, the hint for
each start failure, which errors mean "never ask again" or "start over", and the back-off between tries.

Kept apart from `nvml.py` (the one module that imports `pynvml`, and the only one that calls the driver) so
this part reads as tables and plain data and is tested without a driver. Errors are
named by their pynvml constant names; `nvml.py` turns the names into the library's values, which also
fails loudly at import if a future nvidia-ml-py renames one.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from agent.records import Event, EventKind, GpuProcessSample, GpuSample, Phase, Server
from parsers.xid import xid_meaning, xid_severity

SOURCE = "nvml"

# Cause and fix for each way NVML can fail to start; the key is pynvml's error constant's name.
INIT_HINTS: dict[str, str] = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": (
        "NVML library libnvidia-ml.so.1 not found: is the NVIDIA driver installed? Install the driver "
        "(nvidia-smi must work), or in a container run with the NVIDIA Container Toolkit (--gpus all)"
    ),
    "NVML_ERROR_DRIVER_NOT_LOADED": (
        "NVIDIA kernel driver not loaded: check with nvidia-smi; load it with modprobe nvidia, or "
        "reboot after a driver install"
    ),
    "NVML_ERROR_NO_PERMISSION": (
        "no permission to open the GPU devices (/dev/nvidiactl, /dev/nvidia*): run the agent as a user "
        "allowed to use them; under systemd use DevicePolicy=closed with DeviceAllow=/dev/nvidiactl rw "
        "and DeviceAllow=/dev/nvidia0 rw (one line per GPU), never PrivateDevices=yes"
    ),
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (
        "the NVML library and the loaded kernel driver differ in version (a driver upgrade without a "
        "reboot): reboot, or unload and reload the nvidia kernel modules"
    ),
    "NVML_ERROR_FUNCTION_NOT_FOUND": (
        "the NVML library is too old for nvidia-ml-py (nvmlInitWithFlags missing): upgrade the NVIDIA driver"
    ),
}
AFTER_HINT = "GPU metrics are off, everything else keeps running; NVML init is retried with back-off"

# Errors meaning "this driver or GPU cannot do this call": asking again before a re-init is pointless.
UNSUPPORTED = frozenset({
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
})
# Errors meaning the library's state is gone (driver unloaded or replaced under a running agent):
# nothing works until NVML is shut down and started again.
RESTART = frozenset({
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
})


class Backoff:
    """Exponential back-off on the caller's clock: due at once, then after initial, 2×, 4× … up to maximum."""

    def __init__(self, initial_s: float, maximum_s: float) -> None:
        self._maximum_s = maximum_s
        self._delay_s = initial_s
        self._next_at = float("-inf")

    def due(self, now: float) -> bool:
        return now >= self._next_at

    def failed(self, now: float) -> None:
        self._next_at = now + self._delay_s
        self._delay_s = min(self._delay_s * 2, self._maximum_s)


@dataclass(frozen=True)
class NvmlPoll:
    """What one poll saw: a sample per answering GPU, its compute processes, and new events."""

    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[GpuProcessSample, ...] = ()
    events: tuple[Event, ...] = ()
    health: tuple[GpuHealth, ...] = ()


# NVML's clocks-event (throttle) reason bits, by the name the exporter's `reason` label carries (nvml.h).
CLOCKS_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
    "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}


@dataclass(frozen=True)
class GpuHealth:
    """What NVML says about a card's clocks and memory health at one poll: shown, not stored (dcgm-exporter's
    fields for the same). Each group is None where the driver does not report it (a consumer card has no
    ECC, a card before Ampere no row remapping), and the exporter says so with a 0 in
    `deepinfer_gpu_field_up`.

    `clocks_event_reasons` is NVML's bitmask (CLOCKS_EVENT_REASONS); ECC counts are the aggregate
    (lifetime) volatile-and-persistent totals; `remapped_rows` is (correctable, uncorrectable, pending,
    failed) as nvmlDeviceGetRemappedRows returns them.
    """

    gpu: int
    sm_clock_hz: float | None = None
    memory_clock_hz: float | None = None
    clocks_event_reasons: int | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    remapped_rows: tuple[int, int, int, int] | None = None


def health_of(gpu: int, sm_mhz: Any, memory_mhz: Any, reasons: Any, ecc_corrected: Any, ecc_uncorrected: Any,
              rows: Any) -> GpuHealth:
    """GpuHealth from what the NVML calls returned (None for each the driver did not answer)."""
    def num(value: Any, scale: float = 1.0) -> float | None:
        return float(value) * scale if value is not None else None

    return GpuHealth(gpu, num(sm_mhz, 1e6), num(memory_mhz, 1e6), int(reasons) if reasons is not None else None,
                     int(ecc_corrected) if ecc_corrected is not None else None,
                     int(ecc_uncorrected) if ecc_uncorrected is not None else None,
                     (int(rows[0]), int(rows[1]), int(rows[2]), int(rows[3])) if rows is not None else None)


def address(handle: Any) -> int:
    """A device handle's pointer value: how an event's `device` is matched to a GPU."""
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def where(gpu: Gpu | None) -> str:
    """The words a log line uses for the GPU a call was about."""
    return "the system" if gpu is None else f"GPU {gpu.index}"


@dataclass(frozen=True)
class Gpu:
    """What does not change while NVML is up: the handle and the identity of one GPU."""

    index: int
    handle: Any
    uuid: str
    name: str
    pci_bus_id: str | None


def xid_event(gpu: Gpu | None, code: int, now: float) -> Event:
    """An Xid event as NVML reported it; the meaning and severity come from the table the kernel parser uses."""
    meaning = xid_meaning(code)
    where = f"GPU {gpu.index} ({gpu.name}, {gpu.pci_bus_id})" if gpu is not None else "unknown GPU"
    return Event(
        ts=now, source=SOURCE, server=Server.NVML, kind=EventKind.XID, severity=xid_severity(code),
        phase=Phase.RUNTIME, message=f"{where} Xid {code}: {meaning or 'see NVIDIA Xid catalog'}",
        fields={
            "gpu": gpu.index if gpu is not None else None,
            "uuid": gpu.uuid if gpu is not None else None,
            "pci_bus": gpu.pci_bus_id if gpu is not None else None,
            "xid": code,
            "meaning": meaning,
        },
    )
