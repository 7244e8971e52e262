"""CUDA, PyTorch and NCCL failure lines, the same under every server: `oom`, `cuda_error`, `nccl_timeout`.

Formats: parsers/catalogue/pytorch.yaml and the allocator messages below. PyTorch's allocator message changed wording
three times (≤2.0 parenthesised, 2.1 "capacty" typo, ≥2.1 sentences; `torch.cuda.OutOfMemoryError` then
`torch.OutOfMemoryError`); non-allocator OOMs (`CUDA error: out of memory`, `CUDA driver error: out of memory`,
cuBLAS/cuDNN allocation failures, ggml's `cudaMalloc failed: out of memory`) are OOMs too. OOM is checked before the
generic `CUDA error:` so an out-of-memory CUDA error is not a `cuda_error`.
"""

from __future__ import annotations

import re

from agent.records import EventKind, FieldValue, Phase, Severity
from parsers.redact import redact
from parsers.signature import Signature, signature, size_bytes

_SIZE = r"([\d.,]+) ([KMGT]i?B)"


def _oom_fields(m: re.Match[str]) -> dict[str, FieldValue]:
    out: dict[str, FieldValue] = {}
    g = m.groupdict()
    if g.get("req"):
        out["requested_bytes"] = size_bytes(g["req"], g["req_u"])
    if g.get("gpu") is not None:
        out["gpu"] = int(g["gpu"])
    if g.get("total"):
        out["total_bytes"] = size_bytes(g["total"], g["total_u"])
    if g.get("free"):
        out["free_bytes"] = size_bytes(g["free"], g["free_u"])
    return out


_TORCH_OOM = (
    r"(?:CUDA|HIP|XPU|NPU) out of memory\. Tried to allocate (?P<req>[\d.,]+) (?P<req_u>[KMGT]i?B)"
    r"(?:\. GPU (?P<gpu>\d+) has a total capac(?:i)?ty of (?P<total>[\d.,]+) (?P<total_u>[KMGT]i?B) of which "
    r"(?P<free>[\d.,]+) (?P<free_u>[KMGT]i?B) is free"
    r"| \((?:GPU|NPU) (?P<gpu2>\d+); (?P<total2>[\d.,]+) (?P<total2_u>[KMGT]i?B) total capacity; [\d.,]+ [KMGT]i?B "
    r"already allocated; (?:[\d.,]+ [KMGT]i?B current active; )?(?P<free2>[\d.,]+) (?P<free2_u>[KMGT]i?B) free)?"
)


def _torch_oom_fields(m: re.Match[str]) -> dict[str, FieldValue]:
    out = _oom_fields(m)
    g = m.groupdict()
    if g.get("gpu2") is not None:
        out["gpu"] = int(g["gpu2"])
        out["total_bytes"] = size_bytes(g["total2"], g["total2_u"])
        out["free_bytes"] = size_bytes(g["free2"], g["free2_u"])
    return out


def _ggml_oom(m: re.Match[str]) -> dict[str, FieldValue]:
    return {"requested_bytes": size_bytes(m.group(1), "MiB"), "gpu": int(m.group(2))}


def _cuda_error(m: re.Match[str]) -> dict[str, FieldValue]:
    # redacted before the cut, so the cut cannot leave the start of a credential that no pattern knows
    return {"error": redact(next(g for g in m.groups() if g is not None).strip())[:80]}


def _nccl(m: re.Match[str]) -> dict[str, FieldValue]:
    g = m.groupdict()
    out: dict[str, FieldValue] = {}
    if g.get("op"):
        out["op"] = g["op"]
    if g.get("timeout_ms"):
        out["timeout_seconds"] = int(g["timeout_ms"]) / 1000
    if g.get("ran_ms"):
        out["ran_seconds"] = int(g["ran_ms"]) / 1000
    return out


OOM_SIGNATURES: tuple[Signature, ...] = (
    signature(EventKind.OOM, _TORCH_OOM, Severity.ERROR, extract=_torch_oom_fields, incident=True),
    signature(EventKind.OOM, r"allocating ([\d.]+) MiB on device (\d+): cudaMalloc failed: out of memory",
         Severity.ERROR, extract=_ggml_oom, incident=True),
    signature(EventKind.OOM, r"OutOfMemoryError|(?:CUDA|ROCm|MUSA) (?:driver )?error: out of memory"
         r"|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_(?:ALLOC_FAILED|NOT_ENOUGH_WORKSPACE)"
         r"|cudaMalloc failed: out of memory"
         r"|ggml_backend_\w+_buffer_type_alloc_buffer: allocating|failed to allocate \w+ buffer of size"
         r"|NCCL WARN Cuda failure 'out of memory'|HIP error: out of memory"
         r"|hipErrorOutOfMemory|would exceed allowed memory\. \(out of memory\)"
         # ROCm's runtime (HSA) out of device memory, as HIP's allocator or a kernel launch reports it; Habana's
         # PyTorch bridge out of HPU memory (`FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::N`)
         r"|HSA_STATUS_ERROR_OUT_OF_RESOURCES|MODULE:PT_DEVMEM Allocation failed"
         # the driver API's name for it (cuGetErrorName)
         r"|CUDA_ERROR_OUT_OF_MEMORY",
         Severity.ERROR, incident=True),
    # the bare wording, as an error prints it; advice about it ("if you see CUDA out of memory, lower …") is none
    signature(EventKind.OOM, r"\b(?:CUDA|HIP) out of memory", Severity.ERROR, incident=True,
              unless=r"(?i:\bif\b[^\n]{0,80}out.of.memory|\bconsider\b|\bto avoid\b|\bprevent\b|\bwhen you see\b)"),
)

CUDA_SIGNATURES: tuple[Signature, ...] = (
    # ROCm's HIP runtime prints its errors as CUDA's (torch's C10_HIP_CHECK: `HIP error: invalid argument`); ggml's
    # CUDA backend names its build (GGML_CUDA_NAME: `ROCm error: invalid device function`, `MUSA error: …`)
    signature(EventKind.CUDA_ERROR, r"(?:CUDA|HIP|ROCm|MUSA) (?:driver )?error: (?!out of memory)([^.\n]{1,120})"
         r"|cudaError(?!MemoryAllocation)(\w+)", Severity.ERROR,
         extract=_cuda_error, incident=True),
    signature(EventKind.CUDA_ERROR, r"(CUBLAS_STATUS_(?!ALLOC_FAILED)\w+"
         r"|CUDNN_STATUS_(?!ALLOC_FAILED|NOT_ENOUGH_WORKSPACE)\w+|an illegal memory access was encountered"
         r"|device-side assert triggered|unspecified launch failure|misaligned address"
         r"|NCCL error(?:: | in: [^\n]{0,200}?, )unhandled cuda error|ncclUnhandledCudaError"
         # any other driver API error by its name (`CUDA driver error (…): 719 (CUDA_ERROR_LAUNCH_FAILED)`)
         r"|CUDA_ERROR_(?!OUT_OF_MEMORY)[A-Z_]{3,40})", Severity.ERROR,
         extract=_cuda_error, incident=True),
    # a device-side assert as the CUDA runtime prints it, before the host raises "device-side assert triggered":
    # `IndexKernel.cu:92: operator(): block: [0,0,0], thread: [4,0,0] Assertion `…` failed.`
    signature(EventKind.CUDA_ERROR, r"\.cu:\d{1,6}: [^\n]{0,200}?block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] "
         r"Assertion `", Severity.ERROR, extract=lambda m: {"error": "device-side assert"}, incident=True),
)

NCCL_SIGNATURES: tuple[Signature, ...] = (
    signature(EventKind.NCCL_TIMEOUT, r"Watchdog caught collective operation timeout(?:: WorkNCCL\(SeqNum=\d+, "
         r"OpType=(?P<op>\w+)[^)]{0,200}Timeout\(ms\)=(?P<timeout_ms>\d+)\) ran for (?P<ran_ms>\d+) milliseconds)?"
         r"|Exception \(either an error or timeout\) detected by watchdog|Some NCCL operations have failed or timed out"
         r"|NCCL (?:communicator|operation)[^\n]{0,60}timed out|Barrier timed out after",
         Severity.ERROR, Phase.RUNTIME, extract=_nccl, incident=True),
    # vLLM's shared-memory broadcast between ranks stalled: a rank hangs (or compiles); often precedes the above.
    # 0.5–0.6 (and SGLang's copy) said "No available block found in 60 second."
    # The phase is the parser's: while starting it is usually compilation or warm-up, not a hang.
    signature(EventKind.NCCL_TIMEOUT, r"No available (?:shared memory broadcast )?block found in (\d{1,9}) seconds?",
         Severity.WARNING, None, extract=lambda m: {"mechanism": "shm_broadcast",
                                                             "waited_seconds": int(m.group(1))}, incident=True),
)

GPU_SIGNATURES: tuple[Signature, ...] = OOM_SIGNATURES + NCCL_SIGNATURES + CUDA_SIGNATURES

HOT_WORDS = ("out of memory", "OutOfMemory", "CUDA", "cuda", "HIP error", "ROCm error", "MUSA error", "HSA_STATUS",
             "PT_DEVMEM", "NCCL", "Nccl", "nccl", "CUBLAS", "CUDNN",
             "Watchdog", "watchdog", "Barrier timed out", "illegal memory", "device-side assert",
             "launch failure", "failed to allocate", "Traceback", "Error", "error", "Exception",
             "shared memory broadcast", "No available block", "Timed out",
             "block: [")
