"""Where the real engines the project tests against live, and how they are served: one place for the engine
tests (tests/engines/bed.py) and `demo --engine vllm`.

`tests/engines/install.sh` installs them into a cache outside the checkout ($DEEPINFER_ENGINES, default
~/.cache/deepinfer-agent/engines): vLLM 0.32.0's CPU build in its own virtualenv, llama.cpp's `llama-server`, and
a tiny random-weight Llama made on the spot (2 layers, 2 KV heads, head_dim 32: 512 B of KV per token), so no
model comes from a hub. The flags make a KV cache of 32 blocks × 32 tokens (1,024 tokens: two requests of 512
while max_num_seqs is 4), so ordinary load gives real queueing, preemptions and refusals on a CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

INSTALL = "bash tests/engines/install.sh"
MODEL_NAME = "tiny-llama"


def cache() -> Path:
    """The engines' cache folder (the install script's, read the same way)."""
    explicit = os.environ.get("DEEPINFER_ENGINES")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deepinfer-agent" / "engines"


VLLM_VERSION = "0.32.0"
# 32 blocks × 32 tokens (the CPU attention backend needs multiples of 32), no prefix caching, at most 10 waiting
VLLM_ARGS = ("--dtype", "bfloat16", "--enforce-eager", "--max-model-len", "512", "--max-num-seqs", "4",
             "--block-size", "32", "--num-gpu-blocks-override", "32", "--no-enable-prefix-caching",
             "--max-num-queued-reqs", "10")
# VLLM_CPU_KVCACHE_SPACE is whole GiB (at least 1); the block override is what makes the cache tiny
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
LLAMACPP_VERSION = "0.3.36"  # the llama-cpp-python sdist whose bundled llama.cpp is built
LLAMACPP_ARGS = ("-c", "512", "-np", "4", "--kv-unified", "--metrics", "-t", "1", "--no-webui")


@dataclass(frozen=True)
class Installed:
    """One installed engine: its folder, and whether the install finished (the script's stamp)."""

    name: str
    folder: Path

    @property
    def ready(self) -> bool:
        return (self.folder / ".ready").is_file()

    def how_to_install(self) -> str:
        part = "vllm" if self.name.startswith("vLLM") else "llamacpp"
        return (f"{self.name} is not installed in {self.folder}: from a checkout of the project, run "
                f"`{INSTALL} {part}` once (it is cached there; about 3 min for vLLM, 15 for llama.cpp)")


def vllm() -> Installed:
    return Installed(f"vLLM {VLLM_VERSION} (CPU build)", cache() / f"vllm-{VLLM_VERSION}")


def llamacpp() -> Installed:
    return Installed("llama.cpp llama-server", cache() / f"llamacpp-{LLAMACPP_VERSION}")


def vllm_argv(port: int, *extra: str, base: tuple[str, ...] | list[str] = VLLM_ARGS) -> list[str]:
    folder = vllm().folder
    return [str(folder / "venv/bin/vllm"), "serve", str(folder / "tiny-llama"), "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(port), *base, *extra]


def llamacpp_argv(port: int, *extra: str, base: tuple[str, ...] | list[str] = LLAMACPP_ARGS) -> list[str]:
    folder = llamacpp().folder
    return [str(folder / "llama-server"), "-m", str(folder / "tiny-llama-f16.gguf"), "--host", "127.0.0.1",
            "--port", str(port), *base, *extra]
