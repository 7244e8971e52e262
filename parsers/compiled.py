"""The optional compiled lane (parsers/_lane.c), loaded once for the two paths that read plain files with it.

`scan` (agent/offline/plain_lane.py) and the daemon (agent/sources/rawlines.py, agent/daemon/lane.py) take
it from here, so both agree on whether it is built and switched on. Without the built extension (no
compiler at install time, another interpreter) `LANE` is None and the Python path is the only one;
`DEEPINFER_LANE=python` forces the Python path where it is built (the reference, for comparing).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ENV = "DEEPINFER_LANE"  # `python`: the pure-Python path even where the compiled lane is built


def _load() -> ModuleType | None:
    try:
        return importlib.import_module("parsers._lane")
    except ImportError:
        return None


LANE = _load()


def built() -> bool:
    """Whether the compiled lane was built for this interpreter."""
    return LANE is not None


def active() -> bool:
    """Whether plain files are read through the compiled lane now."""
    return LANE is not None and os.environ.get(ENV, "").strip().lower() != "python"
