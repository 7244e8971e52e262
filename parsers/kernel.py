"""NVIDIA driver lines from the kernel log (dmesg, `journalctl -k`, syslog): `xid`, `gpu_lost` and the driver's
failed allocations (`oom`).

`NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=…, GPU has fallen off the bus.` — older drivers omit `PCI:`. Xid 79
and the "has fallen off the bus" notice (multi-line in newer drivers, sometimes without an Xid; `NVRM: GPU at
0000:01:00.0 has fallen off the bus.` in older ones) mean the GPU is gone until the node reboots, so they are
`gpu_lost` rather than a plain `xid`; the code is kept in the fields either way. Meanings are paraphrased from
NVIDIA's Xid catalog (its "XID Errors" reference); unknown codes keep their number and an empty
meaning.
"""

from __future__ import annotations

import re

from agent.records import EventKind, FieldValue, Phase, Server, Severity
from parsers.base import StreamParser
from parsers.prefix import Split
from parsers.signature import Signature, hot, signature
from parsers.xid import XID_MEANINGS, xid_severity  # pure data, shared with the NVML source


def _xid_fields(m: re.Match[str]) -> dict[str, FieldValue]:
    code = int(m.group("xid"))
    return {"xid": code, "pci_bus": m.group("bus"), "meaning": XID_MEANINGS.get(code, "")}


_XID = r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F:.]{4,20})\): (?P<xid>(?!79,)\d{1,4}),"  # 79 is gpu_lost
_LOST = (r"NVRM: (?:The NVIDIA GPU|GPU at) (?P<bus>[0-9a-fA-F:.]{4,20})|GPU has fallen off the bus|GPU is lost"
         r"|NVMLError_GpuIsLost|NVML_ERROR_GPU_IS_LOST")


_ISO = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)")


def _lost_fields(m: re.Match[str]) -> dict[str, FieldValue]:
    bus = m.groupdict().get("bus")
    return {"pci_bus": bus} if bus else {}


KERNEL_SIGNATURES: tuple[Signature, ...] = (
    signature(EventKind.GPU_LOST,
        r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F:.]{4,20})\): (?P<xid>79),", Severity.CRITICAL,
         Phase.RUNTIME, _xid_fields, incident=True),
    signature(EventKind.GPU_LOST, _LOST, Severity.CRITICAL, Phase.RUNTIME, _lost_fields, incident=True),
    signature(EventKind.XID, _XID, Severity.ERROR, Phase.RUNTIME, _xid_fields, severity_of=lambda f: xid_severity(
        int(f["xid"] or 0))),
    # the resource manager's failed allocation (src/nvidia/src/kernel/mem_mgr/mem_desc.c, `NV_CHECK_OK` on
    # memdescAlloc): the driver could not back a process's request; on a unified-memory GPU (GB10) the engine's
    # own allocation, the kernel's side of its out of memory
    signature(EventKind.OOM, r"NVRM: [^\n]{0,200}?Out of memory \[NV_ERR_NO_MEMORY\]", Severity.ERROR, Phase.RUNTIME,
              incident=True),
    # gpud's reason for an Xid it read from kmsg (components/accelerator/nvidia/xid, newXIDErrorReason):
    # `XID %d(%s) detected on %s`, later `XID %d (%s) detected on GPU %s`, `XID %d detected on …` for a code its
    # catalog lacks. It names the code, so it is an `xid` whatever the code; the kernel line it came from (and
    # its own "GPU has fallen off the bus" for 79) is what makes a `gpu_lost`
    signature(EventKind.XID, r"\bXID (?P<xid>\d{1,4}) ?(?:\([^()\n]{1,120}\) )?detected on (?:GPU )?(?:PCI:)?"
              r"(?P<bus>[0-9a-fA-F:.]{4,20})", Severity.ERROR, Phase.RUNTIME, _xid_fields,
              severity_of=lambda f: xid_severity(int(f["xid"] or 0))),
)

HOT_WORDS = ("NVRM", "fallen off the bus", "GPU is lost", "XID ")


class KernelParser(StreamParser):
    """kern.log / `journalctl -k` / dmesg: only the NVIDIA driver's lines matter."""

    server = Server.KERNEL
    HOT = hot(*HOT_WORDS)
    SIGNATURES = KERNEL_SIGNATURES

    def split(self, text: str) -> Split:
        """`dmesg --time-format iso`, `talosctl dmesg` and other collectors put an ISO time before `NVRM:`
        (`host: kern: warning: [2026-04-22T21:29:21.342163186Z]: NVRM: …`); syslog stamps are read before this."""
        i = text.find("NVRM")
        m = _ISO.search(text, 0, i) if i > 0 else None
        return Split(text, self.stamps.rfc3339(m.group(1).replace(",", ".")) if m is not None else None)
