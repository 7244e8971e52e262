"""The fake NVML driver library: `fakenvml.c` built into `libnvidia-ml.so.1`, and the file that steers it.

Real pynvml loads it and runs its own ctypes code and error mapping against it; only the hardware is
fake. The library re-reads its config file at every call, so a test changes what the "driver" answers
between two polls by calling `FakeNvml.set` (see the key list at the top of fakenvml.c).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

C_SOURCE = Path(__file__).with_name("fakenvml.c")
SONAME = "libnvidia-ml.so.1"

# Codes from nvml.h the tests make the fake return.
NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
FUNCTION_NOT_FOUND = 13
LIB_RM_VERSION_MISMATCH = 18
UNKNOWN = 999


def build(directory: Path) -> Path:
    """Compile the fake into `directory/libnvidia-ml.so.1` with the SONAME glibc matches on."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc not found: the NVML tests compile a fake libnvidia-ml.so.1; install gcc")
    out = directory / SONAME
    subprocess.run(
        [gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", f"-Wl,-soname,{SONAME}",
         "-o", str(out), str(C_SOURCE)],
        check=True, capture_output=True, text=True,
    )
    return out


class FakeNvml:
    """The config file (and Xid event queue) of one test's fake driver."""

    def __init__(self, config: Path, library: Path) -> None:
        self.config = config
        self.library = library
        self._values: dict[str, str] = {}
        self._write()

    @property
    def env(self) -> dict[str, str]:
        """What a subprocess needs in its environment to read this config."""
        return {"FAKE_NVML_CONFIG": str(self.config)}

    def set(self, values: Mapping[str, object]) -> None:
        """Set keys such as `count`, `gpu0.temperature`, `gpu1.lost`, `gpu0.rc.nvmlDeviceGetPowerUsage`."""
        self._values.update({k: str(v) for k, v in values.items()})
        self._write()

    def unset(self, *keys: str) -> None:
        for key in keys:
            self._values.pop(key, None)
        self._write()

    def queue_xid(self, gpu: int, code: int) -> None:
        """Queue one Xid event; the next `nvmlEventSetWait_v2` returns it."""
        with Path(f"{self.config}.events").open("a") as f:
            f.write(f"{gpu} {code}\n")

    def _write(self) -> None:
        self.config.write_text("".join(f"{k}={v}\n" for k, v in self._values.items()))
