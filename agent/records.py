"""Records that cross module boundaries. Frozen, typed, `None` for missing, units in the field names.

Only the records the current modules exchange live here; the tailer, parsers and sinks add theirs as
they arrive, so nothing here is unused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, NamedTuple


class Server(str, Enum):
    """Inference servers the parsers understand; `auto` detects from the first lines."""

    AUTO = "auto"
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    # engines with no parser of their own: named when auto-detection sees their own statements, read by the
    # generic path (their catalogued statements and the server-independent signatures)
    TENSORRT_LLM = "tensorrt-llm"
    VLLM_RS = "vllm-rs"
    LLAMA_BOX = "llama-box"
    KERNEL = "kernel"  # the kernel log (NVRM Xid lines), not an inference server
    NVML = "nvml"  # the NVIDIA driver library (GPU samples, Xid events), not an inference server


class KvDtype(str, Enum):
    """KV-cache element type; `auto` follows the model's activation dtype (16-bit for every preset)."""

    AUTO = "auto"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"

    @property
    def bytes(self) -> int:
        return 1 if self is KvDtype.FP8 else 2

    @classmethod
    def parse(cls, text: str) -> KvDtype:
        """Accept vLLM's spellings too (`bfloat16`, `float16`, `fp8_e4m3`, `fp8_e5m2`)."""
        t = text.strip().lower()
        aliases = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
                   "fp8_inc": "fp8"}
        return cls(aliases.get(t, t))


class WeightsDtype(str, Enum):
    """How the weights are stored; 4-bit schemes keep embeddings and LM head in 16 bit."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    AWQ = "awq"
    GPTQ = "gptq"

    @property
    def bytes_per_param(self) -> float:
        """Bytes per quantized parameter: 4-bit + one fp16 scale and 4-bit zero per 128-weight group."""
        return {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}.get(self.value, 0.5 + 2.5 / 128)

    @property
    def is_4bit(self) -> bool:
        return self in (WeightsDtype.AWQ, WeightsDtype.GPTQ)


# The closed vocabulary of capacity facts an engine reports at start-up. Sizes in bytes, ratios 0–1.
FACT_NAMES = frozenset({
    "model", "quantization", "kv_cache_dtype", "block_size", "tensor_parallel_size", "max_model_len",
    "max_num_seqs", "gpu_memory_utilization", "total_gpu_memory_bytes", "requested_memory_bytes",
    "weights_bytes", "activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes", "non_kv_cache_bytes",
    "kv_cache_bytes", "kv_cache_tokens", "gpu_blocks", "cpu_blocks", "max_concurrency", "tokens_per_request",
    "required_kv_bytes", "estimated_max_model_len", "max_concurrent_requests", "max_batch_prefill_tokens",
    "peak_torch_bytes", "cuda_graph_estimate_bytes", "hybrid_block_size", "dcp_world_size",
    "pipeline_parallel_size", "num_gpu_blocks_override", "engine_version", "engine_core",
    # the device's free memory before the weights load (llama.cpp, SGLang) and after the KV pool (SGLang);
    # llama.cpp's failed start-up buffers
    "device_free_bytes", "free_after_kv_bytes", "kv_buffer_failed_bytes", "compute_buffer_failed_bytes",
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
    REQUEST_FAILED = "request_failed"  # answered with another error status (500 after a death, context exceeded, 4xx)
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
    """Where in a request's or the server's life an event happened — the budget method's distinctions hinge on it.

    `startup`: before the server served (KV cache could not be allocated); `admission`: rejected at the
    door, no token produced; `queue`: accepted but waiting for a slot; `generation`: after work began
    (tokens produced); `runtime`: while serving, stage not known from the line.
    """

    STARTUP = "startup"
    ADMISSION = "admission"
    QUEUE = "queue"
    GENERATION = "generation"
    RUNTIME = "runtime"


FieldValue = float | int | str | bool | None


@dataclass(frozen=True)
class Event:
    """One occurrence of a classified problem: a multi-line traceback is one Event, not one per line.

    `message` is already redacted (parsers/redact.py); `fields` holds the numbers the line carried
    (e.g. `requested_bytes`, `free_bytes`, `total_preemptions`, `status`, `route`, `xid`). `path` and
    `offset` locate the first line of the occurrence, so the store can key on them (exactly once);
    events that come from no file (NVML) leave them None.
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
    file_key: str | None = None  # the identity of the file incarnation (LogLine.file_key): with offset, the key
    line: int | None = None  # 1-based line number of the first line in the file (`scan` sets it; the daemon does not)


class ServerStats(NamedTuple):
    """One periodic load sample an engine printed (vLLM stats line, SGLang batch line).

    Counts are requests; `*_tps` tokens per second; ratios 0–1; `preemptions` is the count the line
    reports for its interval (vLLM V1 0.12+), not a running total. Missing values are None.

    A NamedTuple rather than a frozen dataclass on purpose: it is as immutable and as typed, and one is
    built for most lines of a busy vLLM log, where a frozen dataclass's `__init__` (one
    `object.__setattr__` per field) cost a quarter of the classification time. `as_dict` reads both.
    """

    ts: float | None
    source: str
    server: Server
    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    kv_usage_ratio: float | None = None
    prompt_tps: float | None = None
    gen_tps: float | None = None
    prefix_hit_ratio: float | None = None
    preemptions: int | None = None
    kv_used_tokens: int | None = None
    path: str | None = None
    offset: int | None = None
    file_key: str | None = None
    line: int | None = None  # as Event.line


# What a scraped histogram measures, by signal name (docs/rules.md): the engines' histograms per request.
HISTOGRAM_SIGNALS = ("ttft_seconds", "queue_time_seconds", "e2e_latency_seconds", "inference_time_seconds",
                     "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class HistogramWindow:
    """The requests one engine finished between two scrapes, as a histogram of one quantity (`signal`).

    `bounds` are the bucket upper bounds, ascending, the last +Inf; `counts` the cumulative number of
    requests at each bound *in this window* (the difference of two scrapes, agent/histograms.py);
    `sum` the sum of their values. Seconds for `*_seconds` signals, tokens for `*_tokens`.
    """

    ts: float
    source: str
    server: Server
    signal: str
    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float

    def __post_init__(self) -> None:
        if self.signal not in HISTOGRAM_SIGNALS:
            raise ValueError(f"unknown histogram signal {self.signal!r}")
        if len(self.bounds) != len(self.counts) or not self.bounds:
            raise ValueError("a histogram needs one count per bound")

    @property
    def count(self) -> float:
        return self.counts[-1]


class RequestSample(NamedTuple):
    """How long one request took, as an access line (a proxy's, the engine's) or the engine's per-request
    line printed it: the durations of the requests that *finished*, which the timeout rules compare with the
    deadline (docs/rules.md). Only the number, the status and where the line was: never the route's query,
    the body or the client. A NamedTuple, as `ServerStats`: a busy proxy prints one per request."""

    ts: float | None
    source: str
    server: Server
    duration_s: float
    status: int | None = None
    path: str | None = None
    offset: int | None = None
    file_key: str | None = None
    line: int | None = None  # as Event.line


Record = Event | ServerStats | CapacityFact | RequestSample


def occurrences(event: Event) -> int:
    """How many occurrences one event stands for: its `count` field (a scrape's delta, vLLM V0's every-50th
    preemption warning, SGLang's retract count), else 1. Every total sums this, never the records."""
    count = event.fields.get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 1


def as_dict(record: object) -> dict[str, Any]:
    """Field name → value of any record (dataclass or NamedTuple), for JSON and the store."""
    if isinstance(record, ServerStats | RequestSample):
        return record._asdict()
    out: dict[str, Any] = asdict(record)  # type: ignore[call-overload]
    return out


class LogLine(NamedTuple):
    """One complete log line, freed of its container envelope, with where its bytes came from.

    `offset` is the byte offset of the line's first byte in the file (for journald: the entry's sequence
    number). `file_key` names one incarnation of a file (or a journal) so that (file_key, offset) is
    unique even across rotation, symlink swaps, truncation and inode reuse, where the path alone repeats
    offsets; the store uses it to make replays idempotent. `ts` is the envelope's or journal's time in
    epoch seconds, None for plain text. `truncated` means the line was longer than the source's maximum
    and only its first bytes are kept.

    A NamedTuple, as `ServerStats`, for the same reason: the tailer makes one per line of a busy log, and a
    tuple is built several times faster than a frozen dataclass (`log_line`).
    """

    source: str
    path: str
    offset: int
    text: str
    ts: float | None = None
    stream: str | None = None
    truncated: bool = False
    file_key: str = ""


_new_object = object.__new__
_new_tuple = tuple.__new__
# `log_line` places fields by position: tests/unit/test_record_layouts.py holds it to the type.


def event_with(event: Event, **changes: Any) -> Event:
    """`dataclasses.replace(event, **changes)` without its checks and `__init__` (an event has no
    `__post_init__`; the copy is equal to what `replace` gives). Events come in storms: the parsers' redaction,
    `scan`'s line numbers and the daemon's file keys each make one copy per event."""
    copy: Event = _new_object(Event)
    copy.__dict__.update(event.__dict__, **changes)
    return copy


class RawLines(NamedTuple):
    """Whole lines of one plain file incarnation, as read, for the daemon's compiled lane
    (agent/sources/rawlines.py): `data` starts at byte `offset` and holds `lines` lines, each through its
    newline, none over the source's maximum, all valid UTF-8. The other fields mean what `LogLine`'s do."""

    source: str
    path: str
    offset: int
    data: bytes
    lines: int
    file_key: str


def log_line(source: str, path: str, offset: int, text: str, ts: float | None, stream: str | None, truncated: bool,
             file_key: str) -> LogLine:
    """`LogLine(…)` with every field given, without the NamedTuple's Python-level `__new__` (the tailer builds one
    per line; the result is the same: equal, hashable, immutable)."""
    line: LogLine = _new_tuple(LogLine, (source, path, offset, text, ts, stream, truncated, file_key))
    return line


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


class Knob(str, Enum):
    """The settings a finding may recommend turning; values are the names operators type.

    The first group are the serving budget's own keys (the config's `server:`/`limits:`/`session:` and
    vLLM's flags); the second are engine-internal timeouts that a timeout event can name; `replicas` is
    the answer when no knob on this node helps.
    """

    MAX_NUM_SEQS = "max_num_seqs"
    MAX_QUEUE_SIZE = "max_queue_size"
    REQUEST_TIMEOUT_MS = "request_timeout_ms"
    QUEUE_TIMEOUT_MS = "queue_timeout_ms"
    MAX_OUTPUT_TOKENS = "max_output_tokens"
    MAX_MODEL_LEN = "max_model_len"
    MAX_SESSION_TOKENS = "max_session_tokens"
    GPU_MEMORY_UTILIZATION = "gpu_memory_utilization"
    KV_CACHE_DTYPE = "kv_cache_dtype"
    REPLICAS = "replicas"
    # TGI's batch limits (router flags): the prefill batch its warm-up sizes, the KV pool, the waiting budget
    MAX_BATCH_PREFILL_TOKENS = "max_batch_prefill_tokens"
    MAX_BATCH_TOTAL_TOKENS = "max_batch_total_tokens"
    MAX_WAITING_TOKENS = "max_waiting_tokens"
    VLLM_ENGINE_ITERATION_TIMEOUT_S = "VLLM_ENGINE_ITERATION_TIMEOUT_S"
    VLLM_RPC_TIMEOUT = "VLLM_RPC_TIMEOUT"
    VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"
    WATCHDOG_TIMEOUT = "watchdog_timeout"
    OLLAMA_LOAD_TIMEOUT = "OLLAMA_LOAD_TIMEOUT"
    # SGLang's prefill–decode disaggregation: how long one side waits for the other's KV transfer
    SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
    SGLANG_DISAGGREGATION_WAITING_TIMEOUT = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"
