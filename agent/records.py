"""Records that cross module boundaries. Frozen, typed, `None` for missing, units in the field names.

Only the records the current modules exchange live here; the tailer, parsers and sinks add theirs as
they arrive, so nothing here is unused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum


class Server(str, Enum):
    """Inference servers the parsers understand; `auto` detects from the first lines."""

    AUTO = "auto"
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    NVML = "nvml"  # the NVIDIA driver library (GPU samples, Xid events), not an inference server


# The closed vocabulary of capacity facts an engine reports at start-up. Sizes in bytes, ratios 0–1.
FACT_NAMES = frozenset({
    "model", "quantization", "kv_cache_dtype", "block_size", "tensor_parallel_size", "max_model_len",
    "max_num_seqs", "gpu_memory_utilization", "total_gpu_memory_bytes", "requested_memory_bytes",
    "weights_bytes", "activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes", "non_kv_cache_bytes",
    "kv_cache_bytes", "kv_cache_tokens", "gpu_blocks", "cpu_blocks", "max_concurrency", "tokens_per_request",
    "required_kv_bytes", "estimated_max_model_len",
})


@dataclass(frozen=True)
class CapacityFact:
    """One start-up number an engine printed, e.g. `kv_cache_tokens = 176240`.

    `ts` is epoch seconds when the line carried a usable time (None otherwise); `source` names where
    the line came from (a path, a unit, `-` for stdin).
    """

    ts: float | None
    source: str
    name: str
    value: float | str

    def __post_init__(self) -> None:
        if self.name not in FACT_NAMES:
            raise ValueError(f"unknown capacity fact {self.name!r}")


class EventKind(str, Enum):
    """The closed vocabulary of things that happened (DESIGN.md §Event kinds); values are the stored strings."""

    OOM = "oom"
    PREEMPTION = "preemption"
    PENDING = "pending"
    QUEUE_FULL = "queue_full"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    HTTP_429 = "http_429"
    HTTP_503 = "http_503"
    ENGINE_DEAD = "engine_dead"
    CUDA_ERROR = "cuda_error"
    NCCL_TIMEOUT = "nccl_timeout"
    XID = "xid"
    GPU_LOST = "gpu_lost"


class Severity(str, Enum):
    """How loud an event is: `critical` means the server (or the GPU) stopped serving."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


class Phase(str, Enum):
    """Where in a request's or the server's life an event happened.

    `startup`: before the server served; `admission`: rejected at the door; `queue`: accepted but
    waiting for a slot; `generation`: after work began; `runtime`: while serving, stage not known.
    """

    STARTUP = "startup"
    ADMISSION = "admission"
    QUEUE = "queue"
    GENERATION = "generation"
    RUNTIME = "runtime"


FieldValue = float | int | str | bool | None


@dataclass(frozen=True)
class Event:
    """One occurrence of a classified problem (a log line, a traceback, an NVML event).

    `fields` holds the numbers the occurrence carried (e.g. `xid`, `gpu`). `path` and `offset` locate
    the first line of a logged occurrence so the store can key on them; events that come from no file
    (NVML) leave them None.
    """

    ts: float | None
    source: str
    server: Server
    kind: EventKind
    severity: Severity
    phase: Phase
    message: str
    fields: Mapping[str, FieldValue] = field(default_factory=dict)
    path: str | None = None
    offset: int | None = None


@dataclass(frozen=True)
class GpuSample:
    """One GPU's state at one poll, read from NVML.

    `gpu` is NVML's index (what `CUDA_VISIBLE_DEVICES` counts when the order is `PCI_BUS_ID`); `uuid`
    is the stable identity across reboots; `pci_bus_id` joins it with the kernel's `NVRM: Xid (PCI:…)`
    lines. Memory comes from NVML's v2 struct where the driver has it: `used` then excludes the
    driver-reserved part, which is reported on its own; with the v1 struct `reserved` is None and `used`
    includes it. Any value the GPU does not report (NotSupported, or an error) is None.
    """

    ts: float
    gpu: int
    uuid: str
    name: str
    pci_bus_id: str | None
    memory_total_bytes: int | None
    memory_reserved_bytes: int | None
    memory_free_bytes: int | None
    memory_used_bytes: int | None
    utilization_gpu_ratio: float | None
    utilization_memory_ratio: float | None
    temperature_celsius: float | None
    power_watts: float | None
    power_limit_watts: float | None


@dataclass(frozen=True)
class GpuProcessSample:
    """One compute process on one GPU at one poll: how much of the card the engine itself holds.

    `pid` is data for joining with the engine's process, never a metric label. `used_memory_bytes` is
    None where the driver cannot tell (e.g. Windows WDDM, some MIG set-ups).
    """

    ts: float
    gpu: int
    uuid: str
    pid: int
    used_memory_bytes: int | None
