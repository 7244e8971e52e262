"""What NVIDIA Xid codes mean and how loud they are — one table for NVML events and kernel-log lines alike.

Pure data. Both ways of seeing an Xid (NVML's `nvmlEventTypeXidCriticalError` and the kernel's
`NVRM: Xid (PCI:…): 79, …` line) must describe the same code the same way, so the table lives here and
nowhere else. Meanings are paraphrased from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors,
cross-checked against leptonai/gpud's table). An unknown
code keeps its number and gets an empty meaning: new drivers add codes faster than any table.
"""

from __future__ import annotations

from agent.records import Severity

XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception (SM exception, e.g. out-of-range access); usually the application",
    31: "GPU memory page fault (MMU fault); usually an illegal address from the application",
    32: "invalid or corrupted push buffer stream (often PCIe or memory corruption)",
    43: "GPU stopped processing (channel reset after an application fault); GPU usually healthy",
    45: "preemptive cleanup (channel teardown after a process was killed or a prior error)",
    48: "double-bit (uncorrectable) ECC error; reset the GPU, drain and RMA if it repeats",
    61: "internal micro-controller breakpoint (firmware); reset the GPU, report if it repeats",
    62: "internal micro-controller halt (firmware); reset the GPU, report if it repeats",
    63: "ECC page retirement or row remap recorded; takes effect after a GPU reset",
    64: "ECC page retirement or row remap failure; failing memory, drain and RMA",
    68: "video processor exception (NVDEC/NVENC)",
    69: "graphics engine class error",
    74: "NVLink error; multi-GPU jobs may hang (NCCL)",
    79: "GPU has fallen off the bus; node reboot required, drain",
    92: "high single-bit ECC error rate; early warning of memory degradation",
    94: "contained uncorrectable ECC error; affected applications killed, restart them",
    95: "uncontained uncorrectable ECC error; all GPU work affected, GPU reset required",
    109: "context switch timeout (the GPU hung on a context switch)",
    119: "GSP RPC timeout (GPU firmware hang); GPU reset or node reboot",
    120: "GSP error (GPU firmware); GPU reset or node reboot",
    154: "GPU recovery action required (the message names it: GPU reset or node reboot)",
}

# Codes after which the GPU needs a reset or the node a reboot, or the memory is failing.
_CRITICAL = frozenset({48, 64, 74, 79, 95, 119, 120, 154})
# Codes that normally follow a process exit or an application fault, not a sick GPU.
_BENIGN = frozenset({43, 45})


def xid_meaning(code: int) -> str:
    """The catalog meaning of `code`, or "" when the table does not know it."""
    return XID_MEANINGS.get(code, "")


def xid_severity(code: int) -> Severity:
    """Critical when the GPU needs a reset or its memory is failing; warning for teardown noise; else error."""
    if code in _CRITICAL:
        return Severity.CRITICAL
    if code in _BENIGN:
        return Severity.WARNING
    return Severity.ERROR
