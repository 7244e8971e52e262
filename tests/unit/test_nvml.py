"""The NVML source against real pynvml and a fake driver library (tests/fake_nvml/fakenvml.c).

Most tests load the fake in this process through `GpuPoller(library_path=…)`; the ones that need a
process without any NVML library run the poller in a child (tests/nvml_subprocess.py). No test sleeps:
back-off is stepped by passing `now`.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.records import EventKind, GpuProcessSample, GpuSample, Phase, Server, Severity
from agent.sources.nvml import SOURCE, GpuPoller
from parsers.xid import XID_MEANINGS, xid_severity
from tests.fake_nvml import (
    DRIVER_NOT_LOADED,
    FUNCTION_NOT_FOUND,
    LIB_RM_VERSION_MISMATCH,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeNvml,
)
from tests.nvml_subprocess import ROOT, PollerProcess

GIB = 1024**3
H100 = {
    "count": 2,
    "driver_version": "550.54.15",
    "gpu0.name": "NVIDIA H100 80GB HBM3",
    "gpu0.uuid": "GPU-6f4c2d1e-0000-1111-2222-333344445555",
    "gpu0.bus_id": "00000000:3B:00.0",
    "gpu0.memory_total": 80 * GIB,
    "gpu0.memory_reserved": GIB // 2,
    "gpu0.memory_free": 20 * GIB,
    "gpu0.memory_used": 80 * GIB - GIB // 2 - 20 * GIB,
    "gpu0.util_gpu": 87,
    "gpu0.util_memory": 40,
    "gpu0.temperature": 61,
    "gpu0.power_mw": 350_500,
    "gpu0.power_limit_mw": 700_000,
    "gpu0.procs": f"4242:{70 * GIB},77:{GIB}",
    "gpu1.name": "NVIDIA H100 80GB HBM3",
    "gpu1.uuid": "GPU-aaaaaaaa-0000-1111-2222-333344445555",
    "gpu1.bus_id": "00000000:86:00.0",
    "gpu1.memory_total": 80 * GIB,
    "gpu1.memory_free": 80 * GIB,
}


@pytest.fixture
def h100(fake_nvml: FakeNvml) -> FakeNvml:
    fake_nvml.set(H100)
    return fake_nvml


@pytest.fixture
def poller(fake_nvml: FakeNvml) -> Iterator[GpuPoller]:
    p = GpuPoller(library_path=str(fake_nvml.library), retry_initial_s=5.0, retry_max_s=60.0)
    yield p
    p.close()


def test_values_round_trip_through_pynvml(h100: FakeNvml, poller: GpuPoller) -> None:
    result = poller.poll(1000.0)

    assert poller.up and poller.hint is None and poller.errors_by_call == {}
    assert poller.driver_version == "550.54.15"
    assert result.gpus[0] == GpuSample(
        ts=1000.0, gpu=0, uuid="GPU-6f4c2d1e-0000-1111-2222-333344445555", name="NVIDIA H100 80GB HBM3",
        pci_bus_id="00000000:3B:00.0", memory_total_bytes=80 * GIB, memory_reserved_bytes=GIB // 2,
        memory_free_bytes=20 * GIB, memory_used_bytes=80 * GIB - GIB // 2 - 20 * GIB,
        utilization_gpu_ratio=0.87, utilization_memory_ratio=0.40, temperature_celsius=61.0,
        power_watts=350.5, power_limit_watts=700.0,
    )
    assert [g.gpu for g in result.gpus] == [0, 1]
    assert result.gpus[1].memory_free_bytes == 80 * GIB
    assert result.processes == (
        GpuProcessSample(ts=1000.0, gpu=0, uuid="GPU-6f4c2d1e-0000-1111-2222-333344445555", pid=4242,
                         used_memory_bytes=70 * GIB),
        GpuProcessSample(ts=1000.0, gpu=0, uuid="GPU-6f4c2d1e-0000-1111-2222-333344445555", pid=77,
                         used_memory_bytes=GIB),
    )
    assert result.events == ()


def test_values_change_between_polls(h100: FakeNvml, poller: GpuPoller) -> None:
    poller.poll(0.0)
    h100.set({"gpu0.memory_free": GIB, "gpu0.procs": "4242:1"})

    result = poller.poll(10.0)

    assert result.gpus[0].memory_free_bytes == GIB
    assert [(p.pid, p.used_memory_bytes) for p in result.processes] == [(4242, 1)]


def test_process_memory_the_driver_cannot_tell_is_none(h100: FakeNvml, poller: GpuPoller) -> None:
    h100.set({"gpu0.procs": f"4242:{2**64 - 1}"})  # NVML_VALUE_NOT_AVAILABLE

    assert poller.poll(0.0).processes[0].used_memory_bytes is None


def test_not_supported_fields_are_none_and_not_asked_again(h100: FakeNvml, poller: GpuPoller) -> None:
    h100.set({
        "gpu1.rc.nvmlDeviceGetPowerUsage": NOT_SUPPORTED,
        "gpu1.rc.nvmlDeviceGetEnforcedPowerLimit": NOT_SUPPORTED,
        "gpu1.rc.nvmlDeviceGetTemperatureV": NOT_SUPPORTED,
        "gpu1.rc.nvmlDeviceGetTemperature": NOT_SUPPORTED,
    })

    first = poller.poll(0.0)
    second = poller.poll(10.0)

    for result in (first, second):
        gpu1 = result.gpus[1]
        assert (gpu1.power_watts, gpu1.power_limit_watts, gpu1.temperature_celsius) == (None, None, None)
        assert result.gpus[0].power_watts == 350.5
    assert poller.up
    assert poller.errors_by_call == {
        "nvmlDeviceGetPowerUsage": 1, "nvmlDeviceGetEnforcedPowerLimit": 1,
        "nvmlDeviceGetTemperatureV": 1, "nvmlDeviceGetTemperature": 1,
    }


def test_memory_falls_back_to_the_v1_struct(h100: FakeNvml, poller: GpuPoller) -> None:
    h100.set({"gpu0.rc.nvmlDeviceGetMemoryInfo_v2": FUNCTION_NOT_FOUND})

    gpu0 = poller.poll(0.0).gpus[0]

    assert gpu0.memory_reserved_bytes is None
    assert gpu0.memory_used_bytes == 80 * GIB - 20 * GIB  # v1's used includes the reserved part
    assert (gpu0.memory_total_bytes, gpu0.memory_free_bytes) == (80 * GIB, 20 * GIB)


def test_temperature_falls_back_to_the_classic_call(h100: FakeNvml, poller: GpuPoller) -> None:
    h100.set({"gpu0.rc.nvmlDeviceGetTemperatureV": FUNCTION_NOT_FOUND})

    assert poller.poll(0.0).gpus[0].temperature_celsius == 61.0


def test_errors_are_counted_by_call_and_logged_once(
    h100: FakeNvml, poller: GpuPoller, caplog: pytest.LogCaptureFixture
) -> None:
    h100.set({"gpu0.rc.nvmlDeviceGetUtilizationRates": UNKNOWN})
    caplog.set_level(logging.INFO, logger="agent.sources.nvml")

    results = [poller.poll(float(t)) for t in range(3)]

    assert all(r.gpus[0].utilization_gpu_ratio is None for r in results)
    assert results[0].gpus[0].memory_total_bytes == 80 * GIB  # the rest of the sample is still there
    assert poller.errors_by_call == {"nvmlDeviceGetUtilizationRates": 3}
    assert poller.last_error == "nvmlDeviceGetUtilizationRates on GPU 0: Unknown Error"
    assert poller.up
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1

    h100.unset("gpu0.rc.nvmlDeviceGetUtilizationRates")
    assert poller.poll(3.0).gpus[0].utilization_gpu_ratio == 0.87
    assert poller.errors_by_call == {"nvmlDeviceGetUtilizationRates": 3}


def test_gpu_lost_gives_one_event_and_takes_the_source_down(h100: FakeNvml, poller: GpuPoller) -> None:
    poller.poll(0.0)
    h100.set({"gpu1.lost": 1})

    lost = poller.poll(10.0)
    again = poller.poll(11.0)

    assert [e.kind for e in lost.events] == [EventKind.GPU_LOST]
    event = lost.events[0]
    assert (event.source, event.server, event.severity, event.phase) == (
        SOURCE, Server.NVML, Severity.CRITICAL, Phase.RUNTIME)
    assert event.ts == 10.0
    assert event.fields["gpu"] == 1 and event.fields["uuid"] == "GPU-aaaaaaaa-0000-1111-2222-333344445555"
    assert event.fields["pci_bus"] == "00000000:86:00.0"
    assert again.events == ()  # one event per loss, not one per poll
    assert not poller.up and poller.lost_gpus == {1}
    assert poller.hint is not None and "reboot" in poller.hint
    assert [g.gpu for g in again.gpus] == [0]  # the healthy GPU is still watched
    assert poller.errors_by_call["nvmlDeviceGetMemoryInfo_v2"] == 1


def test_a_lost_gpu_is_reprobed_with_backoff_and_comes_back(h100: FakeNvml, poller: GpuPoller) -> None:
    poller.poll(0.0)
    h100.set({"gpu1.lost": 1})
    poller.poll(10.0)  # lost; re-probe due at 15, then 25
    poller.poll(15.0)
    probes = poller.errors_by_call["nvmlDeviceGetHandleByIndex"]
    poller.poll(24.0)
    assert poller.errors_by_call["nvmlDeviceGetHandleByIndex"] == probes  # not due yet
    h100.unset("gpu1.lost")

    back = poller.poll(25.0)

    assert poller.up and poller.lost_gpus == frozenset() and poller.hint is None
    assert [g.gpu for g in back.gpus] == [0, 1]


def test_a_gpu_lost_before_start_is_reported_at_init(h100: FakeNvml, poller: GpuPoller) -> None:
    h100.set({"gpu0.lost": 1})

    result = poller.poll(0.0)

    assert [(e.kind, e.fields["gpu"]) for e in result.events] == [(EventKind.GPU_LOST, 0)]
    assert [g.gpu for g in result.gpus] == [1]
    assert not poller.up


def test_init_failure_is_one_hint_then_backoff_then_up(
    h100: FakeNvml, poller: GpuPoller, caplog: pytest.LogCaptureFixture
) -> None:
    h100.set({"init_rc": DRIVER_NOT_LOADED})
    caplog.set_level(logging.INFO, logger="agent.sources.nvml")

    assert poller.poll(0.0).gpus == ()  # attempt 1 fails: next at 5
    poller.poll(4.0)
    assert poller.errors_by_call == {"nvmlInit": 1}
    poller.poll(5.0)  # attempt 2 fails: next at 15
    poller.poll(14.0)
    assert poller.errors_by_call == {"nvmlInit": 2}
    assert not poller.up
    assert poller.hint is not None and "modprobe nvidia" in poller.hint and "retried" in poller.hint
    assert poller.last_error == "nvmlInit: Driver Not Loaded"
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1

    h100.unset("init_rc")
    result = poller.poll(15.0)

    assert poller.up and poller.hint is None and len(result.gpus) == 2


def test_enumeration_failure_keeps_the_source_down(h100: FakeNvml, poller: GpuPoller) -> None:
    h100.set({"rc.nvmlDeviceGetCount_v2": UNKNOWN})

    poller.poll(0.0)

    assert not poller.up and poller.errors_by_call == {"nvmlDeviceGetCount": 1}
    assert poller.hint is not None and "nvidia-smi" in poller.hint


def test_driver_replaced_under_a_running_agent_restarts_nvml(h100: FakeNvml, poller: GpuPoller) -> None:
    poller.poll(0.0)
    h100.set({"gpu0.rc.nvmlDeviceGetMemoryInfo_v2": LIB_RM_VERSION_MISMATCH})

    poller.poll(10.0)  # down: NVML shut down, restart due at 15
    assert not poller.up
    assert poller.hint is not None and "reboot" in poller.hint and "differ in version" in poller.hint
    assert poller.errors_by_call == {"nvmlDeviceGetMemoryInfo_v2": 1}
    assert poller.poll(14.0).gpus == ()
    h100.unset("gpu0.rc.nvmlDeviceGetMemoryInfo_v2")

    assert len(poller.poll(15.0).gpus) == 2
    assert poller.up


def test_missing_library_file_then_present(h100: FakeNvml, tmp_path: Path) -> None:
    path = tmp_path / "driver" / "libnvidia-ml.so.1"
    poller = GpuPoller(library_path=str(path), retry_initial_s=5.0)

    poller.poll(0.0)
    assert not poller.up
    assert poller.hint is not None and "not found" in poller.hint and "driver" in poller.hint
    path.parent.mkdir()
    shutil.copy(h100.library, path)
    poller.poll(4.0)
    assert not poller.up  # back-off: not retried yet

    poller.poll(5.0)
    assert poller.up
    poller.close()


def test_xid_events_carry_code_meaning_and_gpu(h100: FakeNvml, poller: GpuPoller) -> None:
    poller.poll(0.0)
    h100.queue_xid(1, 79)
    h100.queue_xid(0, 13)
    h100.queue_xid(0, 4321)

    events = poller.poll(10.0).events

    assert [(e.kind, e.fields["gpu"], e.fields["xid"]) for e in events] == [
        (EventKind.XID, 1, 79), (EventKind.XID, 0, 13), (EventKind.XID, 0, 4321)]
    assert events[0].severity is Severity.CRITICAL
    assert events[0].fields["meaning"] == XID_MEANINGS[79]
    assert "GPU has fallen off the bus" in events[0].message and "00000000:86:00.0" in events[0].message
    assert events[1].severity is Severity.ERROR
    assert events[2].fields["meaning"] == ""  # unknown codes keep their number
    assert all(e.ts == 10.0 and e.path is None and e.offset is None for e in events)
    assert poller.poll(20.0).events == ()  # drained
    assert poller.errors_by_call == {}


def test_no_xid_events_where_registration_is_not_supported(h100: FakeNvml, poller: GpuPoller) -> None:
    h100.set({"gpu0.rc.nvmlDeviceRegisterEvents": NOT_SUPPORTED})

    result = poller.poll(0.0)

    assert poller.up and len(result.gpus) == 2
    assert poller.errors_by_call == {"nvmlDeviceRegisterEvents": 1}


def test_event_wait_errors_are_counted_and_sampling_goes_on(h100: FakeNvml, poller: GpuPoller) -> None:
    h100.set({"rc.nvmlEventSetWait_v2": UNKNOWN})

    result = poller.poll(0.0)
    poller.poll(1.0)

    assert len(result.gpus) == 2
    assert poller.errors_by_call == {"nvmlEventSetWait": 2}


def test_close_then_poll_initializes_again(h100: FakeNvml, poller: GpuPoller) -> None:
    poller.poll(0.0)
    poller.close()
    assert not poller.up

    assert len(poller.poll(1.0).gpus) == 2
    assert poller.up


def test_no_library_at_all_then_one_appears(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    """pynvml's own "library not found" path, in a process whose LD_LIBRARY_PATH holds no NVML yet."""
    fake_nvml.set(H100)
    libdir = tmp_path / "lib"
    libdir.mkdir()
    env = {**fake_nvml.env, "LD_LIBRARY_PATH": str(libdir)}

    with PollerProcess(env, retry_initial_s=5.0) as child:
        down = child.poll(0.0)
        shutil.copy(fake_nvml.library, libdir / "libnvidia-ml.so.1")
        still_down = child.poll(4.0)
        up = child.poll(5.0)
        log = child.close()

    assert not down["up"] and down["gpus"] == []
    assert down["errors_by_call"] == {"nvmlInit": 1}
    assert down["last_error"] == "nvmlInit: NVML Shared Library Not Found"
    assert "libnvidia-ml.so.1 not found" in down["hint"] and "NVIDIA Container Toolkit" in down["hint"]
    assert not still_down["up"] and still_down["errors_by_call"] == {"nvmlInit": 1}
    assert up["up"] and [g["gpu"] for g in up["gpus"]] == [0, 1]
    assert log.count("libnvidia-ml.so.1 not found") == 1


def test_import_emits_no_warning() -> None:
    """The deprecated `pynvml` PyPI shim warns on import; nvidia-ml-py must be what is installed."""
    done = subprocess.run([sys.executable, "-W", "error", "-c", "import agent.sources.nvml"], cwd=ROOT,
                          capture_output=True, text=True)

    assert (done.returncode, done.stderr) == (0, "")


def test_only_the_adapter_imports_pynvml() -> None:
    importers = [
        p.relative_to(ROOT).as_posix()
        for package in ("agent", "parsers")
        for p in sorted((ROOT / package).rglob("*.py"))
        if any(line.split()[:2] in (["import", "pynvml"], ["from", "pynvml"]) for line in p.read_text().splitlines())
    ]

    assert importers == ["agent/sources/nvml.py"]


def test_xid_table_covers_the_common_codes() -> None:
    common = {13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 154}

    assert common <= set(XID_MEANINGS) and all(XID_MEANINGS[c] for c in common)
    assert xid_severity(79) is Severity.CRITICAL
    assert xid_severity(45) is Severity.WARNING
    assert xid_severity(31) is Severity.ERROR


def test_clocks_throttle_reasons_ecc_and_remapped_rows_and_what_a_card_lacks(h100: FakeNvml,
                                                                              poller: GpuPoller) -> None:
    """GPU 0 answers every field; GPU 1 is a card without ECC or row remapping (NotSupported from the driver),
    which the exporter must say with `deepinfer_gpu_field_up 0`, not with a missing sample."""
    from prometheus_client import CollectorRegistry, generate_latest

    from agent.prom import exposition_samples
    from agent.sinks.exporter import Snapshot, SnapshotCollector

    h100.set({**H100, "gpu0.sm_clock_mhz": 1980, "gpu0.mem_clock_mhz": 2619,
              "gpu0.clocks_event_reasons": 0x4 | 0x40,  # sw_power_cap and hw_thermal_slowdown
              "gpu0.ecc_corrected": 3, "gpu0.ecc_uncorrected": 1, "gpu0.remapped_correctable": 2,
              "gpu0.remapped_uncorrectable": 1, "gpu0.remap_pending": 1,
              "gpu1.rc.nvmlDeviceGetTotalEccErrors": NOT_SUPPORTED, "gpu1.rc.nvmlDeviceGetRemappedRows": NOT_SUPPORTED})
    result = poller.poll(1000.0)
    registry = CollectorRegistry(auto_describe=False)
    snapshot = Snapshot(version="t", started_at=0.0, gpus=result.gpus, gpu_health=result.health)
    registry.register(SnapshotCollector(lambda: snapshot))
    samples = exposition_samples(generate_latest(registry).decode())

    def by(name: str, *labels: str) -> dict[tuple[str, ...], float]:
        return {tuple(s[k] for k in labels): v for s, v in samples[name]}

    assert by("deepinfer_gpu_clock_hertz", "gpu", "clock") == {
        ("0", "sm"): 1980e6, ("0", "memory"): 2619e6, ("1", "sm"): 0.0, ("1", "memory"): 0.0}
    throttled = {r for (gpu, r), v in by("deepinfer_gpu_clocks_event_reason", "gpu", "reason").items()
                 if gpu == "0" and v == 1}
    assert throttled == {"sw_power_cap", "hw_thermal_slowdown"}
    assert by("deepinfer_gpu_ecc_errors", "gpu", "type") == {("0", "corrected"): 3.0, ("0", "uncorrected"): 1.0}
    assert by("deepinfer_gpu_remapped_rows", "gpu", "cause") == {("0", "correctable"): 2.0,
                                                                  ("0", "uncorrectable"): 1.0}
    assert by("deepinfer_gpu_row_remap_pending", "gpu") == {("0",): 1.0}
    assert by("deepinfer_gpu_field_up", "gpu", "field") == {
        ("0", "clocks"): 1.0, ("0", "clocks_event_reasons"): 1.0, ("0", "ecc"): 1.0, ("0", "remapped_rows"): 1.0,
        ("1", "clocks"): 1.0, ("1", "clocks_event_reasons"): 1.0, ("1", "ecc"): 0.0, ("1", "remapped_rows"): 0.0}
    info = by("deepinfer_gpu_info", "gpu", "uuid", "pci_bus_id")
    assert ("0", "GPU-6f4c2d1e-0000-1111-2222-333344445555", "00000000:3B:00.0") in info
