"""The NVML source: GPU memory, utilization, temperature, power, clocks, health, processes, Xid events.

This is the only module that imports `pynvml` (from the `nvidia-ml-py` package; the PyPI `pynvml` shim
is deprecated and warns on import). Every call into the driver goes through one choke-point,
`GpuPoller._call`, which turns driver errors into policy, so the rest of the agent never sees an
`NVMLError`:

- no library / no driver / no permission at init: the source is down with one hint that says the
  cause and the fix, logged once; init is retried with exponential back-off driven by `now` (no
  sleeping), and log tailing never notices;
- `NotSupported` (and a call the driver lacks): the field is None, and the call is not made again on
  that GPU until the next init, so a consumer card without power readings costs one error, not one
  per poll;
- `GpuIsLost`: one `gpu_lost` event, the GPU is skipped and re-probed with back-off, the source is
  down until it answers again;
- `Uninitialized`, `DriverNotLoaded` or a library/driver version mismatch on a running NVML (the
  driver was unloaded or replaced under the agent): NVML is shut down and the source is down, with the
  same hint and back-off as at start;
- anything else: the field is None for this poll.

Every error is counted by call name (`errors_by_call`, read by the metrics module) and a failure
repeated every poll is logged once, until the call succeeds again.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Mapping
from typing import Any

import pynvml

from agent.records import Event, EventKind, GpuProcessSample, GpuSample, Phase, Server, Severity
from agent.sources import nvml_model as policy
from agent.sources.nvml_model import SOURCE, Backoff, Gpu, GpuHealth, NvmlPoll, address, health_of, where, xid_event

log = logging.getLogger(__name__)

# The policy tables, resolved to this pynvml's error values.
_INIT_HINTS: dict[int, str] = {getattr(pynvml, name): hint for name, hint in policy.INIT_HINTS.items()}
_UNSUPPORTED = frozenset(getattr(pynvml, name) for name in policy.UNSUPPORTED)
_RESTART = frozenset(getattr(pynvml, name) for name in policy.RESTART)


class _RestartError(Exception):
    """Raised by the choke-point when NVML must be restarted; `poll` shuts it down and backs off."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class GpuLostError(Exception):
    """Raised inside a poll when a call on a GPU said `GpuIsLost`; caught by the per-GPU loop."""

    def __init__(self, call: str) -> None:
        super().__init__(call)
        self.call = call


class GpuPoller:
    """Polls NVML on the caller's clock; never raises for a driver problem, reports it as state instead.

    `library_path` names the NVML library file to load (e.g. WSL's /usr/lib/wsl/lib/libnvidia-ml.so.1,
    or the fake one in tests); None lets pynvml find `libnvidia-ml.so.1` the usual way. glibc matches
    an already loaded library by its SONAME, so pynvml then uses the file named here. `retry_*`
    set the back-off for init and for re-probing a lost GPU.
    """

    def __init__(
        self,
        *,
        library_path: str | None = None,
        retry_initial_s: float = 5.0,
        retry_max_s: float = 300.0,
        max_events_per_poll: int = 256,
    ) -> None:
        self._library_path = library_path
        self._retry = (retry_initial_s, retry_max_s)
        self._max_events = max_events_per_poll
        self._init_backoff = Backoff(*self._retry)
        self._initialized = False
        self._gpus: dict[int, Gpu] = {}
        self._lost: dict[int, Backoff] = {}
        self._event_set: Any = None
        self._unsupported: set[tuple[str, int]] = set()
        self._failing: set[tuple[str, int]] = set()
        self._errors: dict[str, int] = {}
        self._last_error: str | None = None
        self._hint: str | None = None
        self._driver_version: str | None = None

    # -- state the metrics and status read -------------------------------------------------------

    @property
    def up(self) -> bool:
        """True while NVML is initialized and every GPU it enumerated answers."""
        return self._initialized and not self._lost

    @property
    def errors_by_call(self) -> Mapping[str, int]:
        """Errors so far, by NVML call name (`nvmlInit`, `nvmlDeviceGetPowerUsage`, …): a copy."""
        return dict(self._errors)

    @property
    def last_error(self) -> str | None:
        """The most recent error as `call: text`, kept after recovery so an operator can see what it was."""
        return self._last_error

    @property
    def hint(self) -> str | None:
        """Why the source is down and how to fix it; None while it is up."""
        return None if self.up else self._hint

    @property
    def driver_version(self) -> str | None:
        return self._driver_version

    @property
    def lost_gpus(self) -> frozenset[int]:
        """Indexes of GPUs that said `GpuIsLost` and have not answered since."""
        return frozenset(self._lost)

    # -- the loop --------------------------------------------------------------------------------

    def poll(self, now: float) -> NvmlPoll:
        """Sample every GPU once and drain pending Xid events (without waiting); `now` is epoch seconds."""
        events: list[Event] = []
        try:
            return self._poll(now, events)
        except _RestartError as restart:
            self.close()
            self._init_failed(now, restart.code, restart.detail)
            return NvmlPoll(events=tuple(events))

    def _poll(self, now: float, events: list[Event]) -> NvmlPoll:
        if not self._initialized and (not self._init_backoff.due(now) or not self._init(now, events)):
            return NvmlPoll(events=tuple(events))
        gpus: list[GpuSample] = []
        processes: list[GpuProcessSample] = []
        health: list[GpuHealth] = []
        for index in list(self._gpus):
            if index in self._lost and not self._reprobe(index, now):
                continue
            gpu = self._gpus[index]
            try:
                gpus.append(self._sample(gpu, now))
                processes.extend(self._processes(gpu, now))
                health.append(self._health(gpu))
            except GpuLostError as lost:
                events.append(self._mark_lost(gpu, lost.call, now))
        events.extend(self._drain_events(now))
        return NvmlPoll(tuple(gpus), tuple(processes), tuple(events), tuple(health))

    def _health(self, gpu: Gpu) -> GpuHealth:
        """Clocks, throttle reasons, ECC and row remapping: each None where the driver does not say."""
        n, h = pynvml, gpu.handle
        sm, mem = (self._call("nvmlDeviceGetClockInfo", gpu, n.nvmlDeviceGetClockInfo, h, k)
                   for k in (n.NVML_CLOCK_SM, n.NVML_CLOCK_MEM))
        fixed, lost = (self._call("nvmlDeviceGetTotalEccErrors", gpu, n.nvmlDeviceGetTotalEccErrors, h, k,
                                  n.NVML_AGGREGATE_ECC)
                       for k in (n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED))
        reasons = self._call("nvmlDeviceGetCurrentClocksEventReasons", gpu, n.nvmlDeviceGetCurrentClocksEventReasons, h)
        return health_of(gpu.index, sm, mem, reasons, fixed, lost,
                         self._call("nvmlDeviceGetRemappedRows", gpu, n.nvmlDeviceGetRemappedRows, h))

    def close(self) -> None:
        """Free the event set and shut NVML down; the poller can be polled again afterwards (re-init)."""
        if not self._initialized:
            return
        self._initialized = False  # first: a failing shutdown call must not ask for another restart
        if self._event_set is not None:
            self._call("nvmlEventSetFree", None, pynvml.nvmlEventSetFree, self._event_set)
            self._event_set = None
        self._call("nvmlShutdown", None, pynvml.nvmlShutdown)
        self._gpus.clear()
        self._lost.clear()
        self._unsupported.clear()
        self._failing.clear()
        self._init_backoff = Backoff(*self._retry)

    # -- the choke-point -------------------------------------------------------------------------

    def _call(self, call: str, gpu: Gpu | None, fn: Callable[..., Any], *args: Any) -> Any:
        """Call into NVML; every `NVMLError` becomes policy here (see the module docstring).

        Returns None for a failed call. Raises `GpuLostError` when a GPU-scoped call said the GPU is gone,
        and `_RestartError` when a call on a started NVML says the library must start again.
        """
        key = (call, gpu.index if gpu is not None else -1)
        if key in self._unsupported:
            return None
        try:
            result = fn(*args)
        except pynvml.NVMLError as err:
            self._count(call, gpu, err)
            if err.value == pynvml.NVML_ERROR_GPU_IS_LOST and gpu is not None:
                raise GpuLostError(call) from err
            if err.value in _RESTART and self._initialized:
                raise _RestartError(int(err.value), f"{call}: {err}") from err
            if err.value in _UNSUPPORTED:
                self._unsupported.add(key)
                log.debug("NVML %s not supported on %s: %s", call, where(gpu), err)
            elif key not in self._failing:
                self._failing.add(key)
                log.warning("NVML %s failed on %s: %s (logged once until it succeeds)", call, where(gpu), err)
            return None
        if key in self._failing:
            self._failing.discard(key)
            log.info("NVML %s works again on %s", call, where(gpu))
        return result

    def _count(self, call: str, gpu: Gpu | None, err: Exception) -> None:
        self._errors[call] = self._errors.get(call, 0) + 1
        self._last_error = f"{call}: {err}" if gpu is None else f"{call} on GPU {gpu.index}: {err}"

    # -- init ------------------------------------------------------------------------------------

    def _init(self, now: float, events: list[Event]) -> bool:
        """Load and initialize NVML and enumerate the GPUs; on failure set the hint and back off."""
        code, detail = self._load_and_init()
        if code is not None:
            self._init_failed(now, code, detail)
            return False
        self._driver_version = self._call("nvmlSystemGetDriverVersion", None, pynvml.nvmlSystemGetDriverVersion)
        count = self._call("nvmlDeviceGetCount", None, pynvml.nvmlDeviceGetCount)
        if count is None:
            self._call("nvmlShutdown", None, pynvml.nvmlShutdown)
            self._init_failed(now, None, self._last_error or "nvmlDeviceGetCount failed")
            return False
        self._initialized = True
        self._hint = None
        self._event_set = self._call("nvmlEventSetCreate", None, pynvml.nvmlEventSetCreate)
        for index in range(count):
            self._open(index, now, events)
        log.info("NVML up: %d GPU(s), driver %s", len(self._gpus), self._driver_version)
        return True

    def _load_and_init(self) -> tuple[int | None, str]:
        """Run nvmlInit (after loading `library_path`, if given); the error value and text, or (None, "")."""
        if self._library_path is not None:
            try:
                ctypes.CDLL(self._library_path)
            except OSError as err:
                self._count("nvmlInit", None, err)
                return pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, f"cannot load {self._library_path}: {err}"
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            self._count("nvmlInit", None, err)
            return int(err.value), str(err)
        return None, ""

    def _init_failed(self, now: float, code: int | None, detail: str) -> None:
        hint = _INIT_HINTS.get(code, "") if code is not None else ""
        if not hint:
            hint = f"NVML init failed ({detail}): check that nvidia-smi works"
        hint = f"{hint}. {policy.AFTER_HINT}."
        if hint != self._hint:
            log.error("%s [%s]", hint, detail)
        self._hint = hint
        self._init_backoff.failed(now)

    def _open(self, index: int, now: float, events: list[Event]) -> None:
        """Add GPU `index`; a lost one is kept (and re-probed later), one that fails otherwise is skipped."""
        placeholder = Gpu(index, handle=None, uuid="", name="", pci_bus_id=None)
        try:
            gpu = self._identity(placeholder)
        except GpuLostError as lost:
            self._gpus[index] = placeholder
            events.append(self._mark_lost(placeholder, lost.call, now))
            return
        if gpu is not None:
            self._gpus[index] = gpu

    def _identity(self, gpu: Gpu) -> Gpu | None:
        """Handle, UUID, name and PCI bus id, registered for Xid events; None when there is no handle."""
        handle = self._call("nvmlDeviceGetHandleByIndex", gpu, pynvml.nvmlDeviceGetHandleByIndex, gpu.index)
        if handle is None:
            return None
        uuid = self._call("nvmlDeviceGetUUID", gpu, pynvml.nvmlDeviceGetUUID, handle)
        name = self._call("nvmlDeviceGetName", gpu, pynvml.nvmlDeviceGetName, handle)
        pci = self._call("nvmlDeviceGetPciInfo", gpu, pynvml.nvmlDeviceGetPciInfo, handle)
        full = Gpu(gpu.index, handle, uuid or "", name or "", pci.busId if pci is not None else None)
        if self._event_set is not None:
            self._call("nvmlDeviceRegisterEvents", full, pynvml.nvmlDeviceRegisterEvents, handle,
                       pynvml.nvmlEventTypeXidCriticalError, self._event_set)
        return full

    # -- lost GPUs -------------------------------------------------------------------------------

    def _mark_lost(self, gpu: Gpu, call: str, now: float) -> Event:
        backoff = self._lost.setdefault(gpu.index, Backoff(*self._retry))
        backoff.failed(now)
        self._hint = (
            f"GPU {gpu.index} ({gpu.name or 'unknown'}, {gpu.uuid or 'no uuid'}) is lost (NVML {call}): it fell "
            f"off the bus or stopped answering; drain the node and reboot it, or reset the GPU (nvidia-smi -r)"
        )
        log.error("%s", self._hint)
        return Event(
            ts=now, source=SOURCE, server=Server.NVML, kind=EventKind.GPU_LOST, severity=Severity.CRITICAL,
            phase=Phase.RUNTIME, message=self._hint,
            fields={"gpu": gpu.index, "uuid": gpu.uuid, "pci_bus": gpu.pci_bus_id, "call": call},
        )

    def _reprobe(self, index: int, now: float) -> bool:
        """Ask a lost GPU again once its back-off is due; True (and no longer lost) when it answers."""
        backoff = self._lost[index]
        if not backoff.due(now):
            return False
        try:
            gpu = self._identity(self._gpus[index])
        except GpuLostError:
            gpu = None
        if gpu is None:
            backoff.failed(now)
            return False
        self._gpus[index] = gpu
        del self._lost[index]
        log.info("GPU %d answers again", index)
        return True

    # -- sampling --------------------------------------------------------------------------------

    def _sample(self, gpu: Gpu, now: float) -> GpuSample:
        total, reserved, free, used = self._memory(gpu)
        util = self._call("nvmlDeviceGetUtilizationRates", gpu, pynvml.nvmlDeviceGetUtilizationRates, gpu.handle)
        power_mw = self._call("nvmlDeviceGetPowerUsage", gpu, pynvml.nvmlDeviceGetPowerUsage, gpu.handle)
        limit_mw = self._call("nvmlDeviceGetEnforcedPowerLimit", gpu, pynvml.nvmlDeviceGetEnforcedPowerLimit,
                              gpu.handle)
        return GpuSample(
            ts=now, gpu=gpu.index, uuid=gpu.uuid, name=gpu.name, pci_bus_id=gpu.pci_bus_id,
            memory_total_bytes=total, memory_reserved_bytes=reserved, memory_free_bytes=free,
            memory_used_bytes=used,
            utilization_gpu_ratio=util.gpu / 100 if util is not None else None,
            utilization_memory_ratio=util.memory / 100 if util is not None else None,
            temperature_celsius=self._temperature(gpu),
            power_watts=power_mw / 1000 if power_mw is not None else None,
            power_limit_watts=limit_mw / 1000 if limit_mw is not None else None,
        )

    def _memory(self, gpu: Gpu) -> tuple[int | None, int | None, int | None, int | None]:
        """(total, reserved, free, used) bytes: the v2 struct where the driver has it, else v1 (no reserved)."""
        v2 = self._call("nvmlDeviceGetMemoryInfo_v2", gpu, pynvml.nvmlDeviceGetMemoryInfo, gpu.handle,
                        pynvml.nvmlMemory_v2)
        if v2 is not None:
            return int(v2.total), int(v2.reserved), int(v2.free), int(v2.used)
        if ("nvmlDeviceGetMemoryInfo_v2", gpu.index) not in self._unsupported:
            return None, None, None, None
        v1 = self._call("nvmlDeviceGetMemoryInfo", gpu, pynvml.nvmlDeviceGetMemoryInfo, gpu.handle)
        if v1 is None:
            return None, None, None, None
        return int(v1.total), None, int(v1.free), int(v1.used)

    def _temperature(self, gpu: Gpu) -> float | None:
        """GPU core °C: `nvmlDeviceGetTemperatureV` (the classic call is deprecated), else the classic one."""
        value = self._call("nvmlDeviceGetTemperatureV", gpu, pynvml.nvmlDeviceGetTemperatureV, gpu.handle,
                           pynvml.NVML_TEMPERATURE_GPU)
        if value is None and ("nvmlDeviceGetTemperatureV", gpu.index) in self._unsupported:
            value = self._call("nvmlDeviceGetTemperature", gpu, pynvml.nvmlDeviceGetTemperature, gpu.handle,
                               pynvml.NVML_TEMPERATURE_GPU)
        return float(value) if value is not None else None

    def _processes(self, gpu: Gpu, now: float) -> list[GpuProcessSample]:
        procs = self._call("nvmlDeviceGetComputeRunningProcesses", gpu,
                           pynvml.nvmlDeviceGetComputeRunningProcesses, gpu.handle)
        return [
            GpuProcessSample(ts=now, gpu=gpu.index, uuid=gpu.uuid, pid=int(p.pid),
                             used_memory_bytes=int(p.usedGpuMemory) if p.usedGpuMemory is not None else None)
            for p in procs or ()
        ]

    # -- events ----------------------------------------------------------------------------------

    def _drain_events(self, now: float) -> list[Event]:
        """Read the Xid events already queued (timeout 0: never waits), at most `max_events_per_poll`."""
        if self._event_set is None:
            return []
        by_address = {address(g.handle): g for g in self._gpus.values() if g.handle is not None}
        events: list[Event] = []
        for _ in range(self._max_events):
            data = self._call("nvmlEventSetWait", None, _wait_without_blocking, self._event_set)
            if data is None:
                break
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                events.append(xid_event(by_address.get(address(data.device)), int(data.eventData), now))
        return events


def _wait_without_blocking(event_set: Any) -> Any:
    """The next queued event, or None when there is none: NVML says Timeout for "none", which is no error."""
    try:
        return pynvml.nvmlEventSetWait_v2(event_set, 0)
    except pynvml.NVMLError_Timeout:
        return None

