"""Record every incident on the real engines into tests/data/real/engines/ (log, truth, /metrics).

    .venv/bin/python -m tests.engines.record [vllm|llamacpp|all] [INCIDENT ...]

Run it after tests/engines/install.sh; it takes about five minutes for vLLM (five engine starts) and seconds for
llama.cpp. The recordings are committed: the fast suite checks the agent on them without an engine, and the
simulator's log and /metrics are compared with them (tests/unit/test_real_engines.py).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.engines import bed, scenarios

ROOT = Path(__file__).resolve().parents[1] / "data" / "real" / "engines"


def record_vllm(out: Path, work: Path, only: set[str]) -> None:
    engine = bed.start_vllm(work / "vllm.log")
    try:
        for scenario in scenarios.VLLM_RUNTIME:
            if not only or scenario.__name__.removeprefix("vllm_") in only:
                print("recorded", scenario(engine).save(out), flush=True)
        if not only or "death" in only:
            print("recorded", scenarios.vllm_death(engine).save(out), flush=True)
    finally:
        engine.stop()
    for name, extra, env, what in scenarios.VLLM_STARTUP:
        if not only or name in only:
            print("recorded", scenarios.vllm_startup(work / f"{name}.log", name, extra, env, what).save(out),
                  flush=True)


def record_llamacpp(out: Path, work: Path) -> None:
    with bed.running(bed.start_llamacpp(work / "llama.log")) as engine:
        for scenario in scenarios.LLAMACPP_RUNTIME:
            print("recorded", scenario(engine).save(out), flush=True)


def main(argv: list[str]) -> None:
    what = argv[0] if argv else "all"
    only = set(argv[1:])  # incident names (default: every one)
    out = ROOT
    with tempfile.TemporaryDirectory() as tmp:
        if what in ("vllm", "all"):
            record_vllm(out, Path(tmp), only)
        if what in ("llamacpp", "all"):
            record_llamacpp(out, Path(tmp))


if __name__ == "__main__":
    main(sys.argv[1:])
