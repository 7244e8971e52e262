"""Build the optional compiled lane (parsers/_lane.c) with the wheel and on `pip install -e .`.

The lane only makes `scan` faster; the pure-Python path gives the same output. So, as MarkupSafe and
msgspec do, a machine without a C compiler or CPython's headers, or another interpreter, gets a warning
and a pure-Python install instead of a failed one. `DEEPINFER_BUILD_LANE=0` skips the build on purpose.
The compiler is called directly (no setuptools in the build environment): one file, CPython's own flags.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("parsers") / "_lane.c"


def _compiler() -> list[str] | None:
    configured = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if configured and shutil.which(configured[0]):
        return configured
    for name in ("cc", "gcc", "clang"):
        if found := shutil.which(name):
            return [found]
    return None


def build_lane(root: Path, out: Path) -> Path | None:
    """Compile the lane into `out`; its path, or None (with a warning) when it cannot be built."""
    if platform.python_implementation() != "CPython":
        warnings.warn(f"deepinfer-agent: the compiled lane needs CPython, not {platform.python_implementation()}; "
                      "scan uses its pure-Python path", stacklevel=2)
        return None
    compiler = _compiler()
    include = sysconfig.get_paths()["include"]
    if compiler is None or not (Path(include) / "Python.h").is_file():
        warnings.warn("deepinfer-agent: no C compiler or no Python.h; scan uses its pure-Python path",
                      stacklevel=2)
        return None
    target = out / f"_lane{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    scratch = target.with_name(target.name + ".part")  # renamed into place: a running scan never loads half a file
    command = [*compiler, "-shared", "-fPIC", "-O2", "-Wall", "-I", include, str(root / SOURCE), "-o", str(scratch)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        warnings.warn(f"deepinfer-agent: building the compiled lane failed ({exc}); scan uses its pure-Python path",
                      stacklevel=2)
        return None
    if done.returncode != 0:
        scratch.unlink(missing_ok=True)
        warnings.warn("deepinfer-agent: building the compiled lane failed; scan uses its pure-Python path\n"
                      + done.stderr[-2000:], stacklevel=2)
        return None
    scratch.replace(target)
    return target


class LaneBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """hatchling's custom build hook: the lane in the source tree (editable) or in the wheel."""

    PLUGIN_NAME = "custom"

    _scratch: str | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("DEEPINFER_BUILD_LANE") == "0":
            return
        root = Path(self.root)
        if version == "editable":  # an editable install imports parsers/ from the source tree: built there
            built = build_lane(root, root / "parsers")
        else:  # a wheel: built aside, so the source tree is left as it was
            self._scratch = tempfile.mkdtemp(prefix="deepinfer-lane-")
            built = build_lane(root, Path(self._scratch))
        if built is None:
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            build_data["force_include"][str(built)] = f"parsers/{built.name}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
