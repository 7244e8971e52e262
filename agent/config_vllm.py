"""vLLM's own settings inside the agent's config: `vllm_config:` (a `vllm serve --config` file, read where
it lies) and an inline `vllm:` mapping fold into `server:`, so a deployment states each number once and a
disagreement between the two is an error rather than a silent pick."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.yamldoc import YamlDoc, YamlReadError, read_yaml

# vLLM flag names (as in `vllm serve --config` files) → server.* fields.
VLLM_KEYS = {
    "gpu-memory-utilization": "gpu_memory_fraction",
    "max-num-seqs": "max_num_seqs",
    "max-model-len": "max_model_len",
    "kv-cache-dtype": "kv_cache_dtype",
    "block-size": "block_size",
    "tensor-parallel-size": "tensor_parallel_size",
}


def _settings(raw: dict[str, Any]) -> dict[str, Any]:
    """Translate vLLM flag names (dashes or underscores) into server.* fields; other vLLM keys are ignored."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        dashed = str(key).replace("_", "-")
        if dashed in VLLM_KEYS:
            out[VLLM_KEYS[dashed]] = value
        elif dashed == "model":
            out["__model__"] = value
    return out


def merge_vllm(data: dict[str, Any], path: Path, doc: YamlDoc, problems: list[str]) -> dict[str, Any]:
    """Fold `vllm_config:` / `vllm:` into `server:`, reporting any disagreement with `server:`."""
    sources: list[tuple[str, dict[str, Any]]] = []
    if data.get("vllm_config") is not None:
        vpath = Path(str(data["vllm_config"]))
        vpath = vpath if vpath.is_absolute() else path.parent / vpath
        try:
            vraw = read_yaml(vpath).data
        except YamlReadError as exc:
            where = f"{vpath}:{exc.line}:{exc.column}" if exc.line else str(vpath)
            problems.append(f"{path}:{doc.line_of(('vllm_config',))}: vllm_config: {where}: {exc.problem}")
            vraw = {}
        if not isinstance(vraw, dict):
            problems.append(f"{vpath}: expected a mapping of vLLM options (a `vllm serve --config` file)")
            vraw = {}
        sources.append((str(vpath), vraw))
    if isinstance(data.get("vllm"), dict):
        sources.append((f"{path}: vllm", data["vllm"]))
    if not sources:
        return data
    server = dict(data.get("server") or {}) if isinstance(data.get("server"), dict) else {}
    for origin, raw in sources:
        for field, value in _settings(raw).items():
            if field == "__model__":
                data = {**data, "served_model": str(value)}
                continue
            if field in server and server[field] != value and str(server[field]) != str(value):
                line = doc.line_of(("server", field))
                problems.append(f"{path}:{line}: server.{field}: {server[field]!r} disagrees with {origin} "
                                f"({value!r}); set it in one place")
            server.setdefault(field, value)
    return {**data, "server": server}
