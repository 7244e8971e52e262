"""Load and validate the agent's YAML config into a frozen `Config`, reporting every problem at once.

Each problem names the file, the field path, the line and what was expected, e.g.
`config.yaml:12: server.gpu_memory_fraction: expected a number > 0 and ≤ 1, got 1.5`.
The serving settings can also come from vLLM's own `vllm serve --config` YAML (`vllm_config:`) or an
inline `vllm:` mapping with vLLM's flag names; they must then agree with `server:` where both are set,
so there is one source of truth for what the engine runs with.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent.config_vllm import merge_vllm
from agent.defaults import DEFAULT_CONFIG_PATH as DEFAULT_CONFIG_PATH  # the CLI's default, kept light
from agent.errors import ConfigError
from agent.records import KvDtype, Server, WeightsDtype
from agent.yamldoc import YamlDoc, YamlReadError, read_yaml

DEFAULT_METRICS_PORT = 9842  # not used by dcgm-exporter (9400–9402), node_exporter (9100) or the engines


class _Section(BaseModel):
    # No NaN or infinity anywhere: `.inf` is valid YAML and would pass every `gt=0` bound.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSection(_Section):
    """Which model: a preset, a local HF config.json, or the three numbers the KV size needs."""

    preset: str | None = None
    config_json: Path | None = None
    layers: int | None = Field(None, gt=0)
    kv_heads: int | None = Field(None, gt=0)
    head_dim: int | None = Field(None, gt=0)
    params_b: float | None = Field(None, gt=0, description="parameter count in billions")
    weights_dtype: WeightsDtype | None = None
    weights_gib: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _one_way(self) -> ModelSection:
        explicit = [self.layers, self.kv_heads, self.head_dim]
        ways = [self.preset is not None, self.config_json is not None, any(v is not None for v in explicit)]
        if sum(ways) > 1:
            raise ValueError("give only one of preset, config_json, or layers/kv_heads/head_dim")
        if ways[2] and not all(v is not None for v in explicit):
            raise ValueError("layers, kv_heads and head_dim must be given together")
        if self.preset is not None:
            from agent.capacity.shapes import find_preset  # (shapes imports no config: no cycle)
            from agent.errors import ModelError

            try:
                find_preset(self.preset)
            except ModelError as exc:
                raise ValueError(str(exc)) from None
        return self


class GpuSection(_Section):
    vram_gib: float | None = Field(None, gt=0, le=4096)
    overhead_gib: float | None = Field(None, ge=0, le=4096, description="activations + CUDA context + framework")


class ServerSection(_Section):
    """The budget method's serving skeleton: memory fraction, context length and concurrency written together."""

    gpu_memory_fraction: float | None = Field(None, gt=0, le=1)
    max_model_len: int | None = Field(None, gt=0)
    kv_cache_dtype: KvDtype | None = None
    max_num_seqs: int | None = Field(None, gt=0)
    max_queue_size: int | None = Field(None, ge=0)
    block_size: int | None = Field(None, gt=0)
    tensor_parallel_size: int | None = Field(None, gt=0)

    @field_validator("kv_cache_dtype", mode="before")
    @classmethod
    def _vllm_spellings(cls, value: Any) -> Any:
        return KvDtype.parse(value) if isinstance(value, str) and _known_kv_dtype(value) else value


def _known_kv_dtype(text: str) -> bool:
    try:
        KvDtype.parse(text)
    except ValueError:
        return False
    return True


class LimitsSection(_Section):
    request_timeout_ms: int | None = Field(None, gt=0)
    queue_timeout_ms: int | None = Field(None, gt=0)
    max_output_tokens: int | None = Field(None, gt=0)


class SessionSection(_Section):
    idle_timeout_ms: int | None = Field(None, gt=0)
    max_session_tokens: int | None = Field(None, gt=0)


class WorkloadSection(_Section):
    """The real request lengths; with limits.max_output_tokens they size a request (the budget method: P95 + output)."""

    input_p95_tokens: int | None = Field(None, gt=0)


class SourceSection(_Section):
    """One log source: a file glob (plain, docker, cri) or a journald query (unit and/or kernel log).

    Defaults favour a daemon on a busy node: start at the end of files that exist on the very first
    run (no history flood), read every later file from its start, wake on inotify and poll every second
    as a fallback, and keep lines up to 1 MiB (vLLM dumps long request reprs).
    """

    path: str | None = None
    unit: str | None = None
    directory: Path | None = Field(None, description="journald: a journal directory (journalctl -D)")
    kernel: bool = Field(False, description="journald: follow the kernel log (journalctl -k)")
    format: Literal["plain", "docker", "cri", "journald"] = "plain"
    server: Server = Server.AUTO
    name: str | None = None
    start_at: Literal["end", "beginning"] = "end"
    max_line_bytes: int = Field(1 << 20, ge=64, le=1 << 30)
    poll_interval_seconds: float = Field(1.0, gt=0, le=3600)
    partial_flush_seconds: float = Field(5.0, gt=0)
    rotate_wait_seconds: float = Field(5.0, ge=0)
    cursor_grace_seconds: float = Field(86400.0, ge=0)
    use_inotify: bool = True

    @model_validator(mode="after")
    def _path_or_unit(self) -> SourceSection:
        if self.format == "journald":
            if self.path is not None:
                raise ValueError("a journald source takes unit and/or kernel (and directory for a journal "
                                 "directory), not path")
            if (self.unit is None) == (not self.kernel):
                raise ValueError("a journald source needs either unit (a systemd unit) or kernel: true; "
                                 "add a second source for the other")
        else:
            if self.path is None:
                raise ValueError(f"a {self.format} source needs a path (a file or a glob)")
            if self.unit is not None or self.directory is not None or self.kernel:
                raise ValueError(f"unit, directory and kernel apply to journald sources, not {self.format}")
        return self

    def source_name(self) -> str:
        """The name lines and self-metrics carry: `name`, else the path, unit or `kernel`."""
        return self.name or self.path or self.unit or "kernel"


class NvmlSection(_Section):
    enabled: bool = True
    interval_seconds: float = Field(5.0, gt=0)


class ScrapeTarget(_Section):
    """One engine `/metrics` endpoint to poll (agent/sources/scrape.py); `server: auto` detects the engine from
    the metric names. The timeout bounds the connect and each read, so a hung engine costs one timeout
    per interval, never a stuck loop."""

    url: str = Field(pattern=r"^https?://")
    server: Server = Server.VLLM
    name: str | None = Field(None, min_length=1)
    interval_seconds: float = Field(10.0, gt=0)
    timeout_seconds: float | None = Field(None, gt=0, le=60, description="default: 2 s, or the interval if shorter")

    @field_validator("server")
    @classmethod
    def _an_engine(cls, value: Server) -> Server:
        if value in (Server.KERNEL, Server.NVML, Server.TENSORRT_LLM, Server.VLLM_RS, Server.LLAMA_BOX):
            # the last three are named in logs only: no reader of their /metrics here
            raise ValueError(f"expected an engine (vllm, sglang, tgi, llamacpp or auto), got {value.value!r}")
        return value

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> ScrapeTarget:
        if self.timeout_seconds is not None and self.timeout_seconds > self.interval_seconds:
            raise ValueError(f"timeout_seconds ({self.timeout_seconds:g}) must not exceed interval_seconds "
                             f"({self.interval_seconds:g}), or scrapes would overlap the next one")
        return self

    def target_name(self) -> str:
        """The `source` its records and self-metrics carry: `name`, else the URL."""
        return self.name or self.url

    def timeout(self) -> float:
        """Seconds to wait for the connect and for each read: `timeout_seconds`, else 2 s or the interval."""
        return self.timeout_seconds if self.timeout_seconds is not None else min(2.0, self.interval_seconds)


class MetricsSection(_Section):
    listen: str = "127.0.0.1"
    port: int = Field(DEFAULT_METRICS_PORT, ge=0, le=65535)


class StoreSection(_Section):
    path: Path = Path("/var/lib/deepinfer-agent/agent.db")
    retention_days: float = Field(14.0, gt=0)
    max_bytes: int | None = Field(None, gt=0)
    commit_seconds: float = Field(0.0, ge=0, le=5, description="the least time between two writes under load; "
                                  "what arrives sooner is held and written with the next (docs/store.md)")
    commit_records: int = Field(10_000, ge=1, le=100_000, description="held records that are written at once, "
                                "however soon after the last write")


class RulesSection(_Section):
    dirs: list[Path] = Field(default_factory=list, description="extra rule directories; the shipped rules always load")
    interval_seconds: float = Field(15.0, gt=0, le=3600, description="how often the advisor judges the rules")
    enabled: bool = True


class Config(_Section):
    """The whole agent configuration; every section is optional so a file states only what it knows."""

    model: ModelSection = ModelSection()
    gpu: GpuSection = GpuSection()
    server: ServerSection = ServerSection()
    limits: LimitsSection = LimitsSection()
    session: SessionSection = SessionSection()
    workload: WorkloadSection = WorkloadSection()
    sources: list[SourceSection] = Field(default_factory=list)
    nvml: NvmlSection = NvmlSection()
    scrape: list[ScrapeTarget] = Field(default_factory=list)
    metrics: MetricsSection = MetricsSection()
    store: StoreSection = StoreSection()
    rules: RulesSection = RulesSection()
    vllm_config: Path | None = None
    vllm: dict[str, Any] | None = None
    served_model: str | None = Field(None, description="the `model` of a vLLM config, used to guess a preset")

    @model_validator(mode="after")
    def _scrape_names(self) -> Config:
        """A target named like a log source's engine joins it (docs/sources.md); a glob's are `<name>/<file>`."""
        globs = {s.source_name() for s in self.sources if s.path and any(c in s.path for c in "*?[")}
        names = [t.target_name() for t in self.scrape]
        for i, name in enumerate(names):
            if name in names[:i] or name in globs:
                raise ValueError(f"scrape[{i}]: the name {name!r} is taken by an earlier target" if name in names[:i]
                                 else f"scrape[{i}]: {name!r} names a glob source, whose engines are '{name}/<file>': "
                                 "name the target after one of them to join its log")
        return self

    def summary(self) -> str:
        """One line for `check`: what this config will make the agent do."""
        model = self.model.preset or (self.model.config_json and str(self.model.config_json)) or (
            f"{self.model.layers}L×{self.model.kv_heads}kv×{self.model.head_dim}" if self.model.layers else None
        ) or self.served_model or "no model"
        return (f"{len(self.sources)} source(s), {len(self.scrape)} scrape target(s), model {model}, "
                f"max_num_seqs {self.server.max_num_seqs or 'unset'}, metrics on "
                f"{self.metrics.listen}:{self.metrics.port}, store {self.store.path}")


def shipped_rules_dir() -> Path:
    """The rule files shipped with the package: `agent/rules` in a wheel, `rules/` in a source checkout."""
    packaged = Path(__file__).parent / "rules"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "rules"


# --- loading -----------------------------------------------------------------------------------------

def _read_yaml(path: Path) -> YamlDoc:
    try:
        return read_yaml(path)
    except YamlReadError as exc:
        where = f"{path}:{exc.line}:{exc.column}" if exc.line else str(path)
        raise ConfigError(str(path), [f"{where}: {exc.problem}"]) from exc


def _describe(error: Any, model: type[BaseModel]) -> str:
    """Turn one pydantic error into 'expected …, got …' wording (with a did-you-mean for unknown keys)."""
    kind, loc, got = error["type"], error["loc"], error.get("input")
    if kind == "extra_forbidden":
        known = _fields_at(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown field{hint} (expected one of: {', '.join(known)})"
    message = str(error["msg"])
    if kind in ("greater_than", "greater_than_equal", "less_than_equal", "less_than"):
        message = message.replace("Input should be", "expected a number")
    elif kind == "enum":
        message = message.replace("Input should be", "expected")
    elif kind == "missing":
        message = "required field is missing"
    else:
        message = message.replace("Input should be", "expected").replace("Value error, ", "")
    if kind == "missing" or isinstance(got, dict | list):
        return message
    return f"{message}, got {got!r}"


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if hasattr(current, "model_fields") else None
        if field is None:
            return []
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        current = next((a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if current is None:
            return []
    return list(current.model_fields) if current is not None else []


def load_config(path: Path) -> Config:
    """Parse and validate `path`; raise ConfigError listing every problem, each with file, field and line."""
    doc = _read_yaml(path)
    data = doc.data
    if data is None:  # empty, or comments only: a file truncated by a careless edit, never a wish for defaults
        raise ConfigError(str(path), [f"{path}: the file is empty (no settings): write at least one section "
                                      "(sources:, model:, metrics: …), or `{}` for every default"])
    if not isinstance(data, dict):
        raise ConfigError(str(path), [f"{path}:1: expected a mapping of sections at the top level, "
                                      f"got {type(data).__name__}"])
    problems: list[tuple[int, str]] = []
    merge_problems: list[str] = []
    data = merge_vllm(data, path, doc, merge_problems)
    config: Config | None = None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error["loc"])
            line = doc.line_of(loc) if loc else 0
            field = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in loc).replace(".[", "[")
            where = f"{path}:{line}" if line else str(path)
            problems.append((line, f"{where}: {field or '(top level)'}: {_describe(error, Config)}"))
    if problems or merge_problems or config is None:
        raise ConfigError(str(path), [*merge_problems, *(text for _, text in sorted(problems))])
    return _relative_to(config, path.parent)


def _relative_to(config: Config, base: Path) -> Config:
    """Relative paths in a config (model config_json, log globs, journal directories, the store, rule
    folders) are relative to the config file, not to wherever the agent happened to be started."""

    def at(p: Path) -> Path:
        return p if p.is_absolute() else base / p

    model = config.model
    if model.config_json is not None:
        model = model.model_copy(update={"config_json": at(model.config_json)})
    sources = [s.model_copy(update={
        "path": str(at(Path(s.path))) if s.path is not None else None,
        "directory": at(s.directory) if s.directory is not None else None,
    }) for s in config.sources]
    return config.model_copy(update={
        "model": model, "sources": sources,
        "store": config.store.model_copy(update={"path": at(config.store.path)}),
        "rules": config.rules.model_copy(update={"dirs": [at(d) for d in config.rules.dirs]}),
    })
