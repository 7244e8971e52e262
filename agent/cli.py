"""The command line: the only module that prints to people and chooses exit codes.

Each command gathers its options, calls one core function, and renders the result. Core errors
(`AgentError`) become one clear message on stderr and exit code 1; usage errors are typer's (2).
Exit codes: 0 success; 1 an error (bad input, unreadable file, invalid config); 2 a usage error;
`status` exits 3 when the agent is not running (systemctl is-active's convention).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated, BinaryIO, NoReturn

import typer
import typer.core

from agent import __version__
from agent.defaults import DEFAULT_CONFIG_PATH
from agent.errors import AgentError, BudgetError, ConfigError
from agent.records import KvDtype, Server, WeightsDtype

app = typer.Typer(
    name="deepinfer-agent",
    help="Watch GPU inference nodes; size the KV-cache budget; explain OOM, queueing, timeouts and 429/503.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,  # click's plain help: rendering it with rich would import rich (most of `--help`'s time)
)

NOT_RUNNING = 3  # `status` when nothing answers on the metrics port (as `systemctl is-active` says inactive)

_display_type = typer.core.TyperOption.display_type_rich


def _flag_without_type(self: typer.core.TyperOption, ctx: typer.Context) -> str | None:
    """`--help` lists a switch without a `<bool>` after it: a switch takes no value."""
    return None if self.is_flag else _display_type(self, ctx)


setattr(typer.core.TyperOption, "display_type_rich", _flag_without_type)  # noqa: B010


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"deepinfer-agent {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """deepinfer-agent: KV-cache budgets and inference-server incident classification."""


@app.command()
def check(
    config: Annotated[Path, typer.Option("--config", "-c", help="Config file to validate.")] = DEFAULT_CONFIG_PATH,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")] = False,
) -> None:
    """Validate a config file: print every problem (file:line: field: expected …) or a one-line summary,
    and warn about sources that cannot be read now (exit 0: the files may appear later)."""
    from agent.config import load_config
    from agent.sources.tailer import pattern_problems, store_files

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        if as_json:
            typer.echo(json.dumps({"config": str(config), "ok": False, "problems": list(exc.problems)}))
            raise typer.Exit(1) from None
        for problem in exc.problems:
            typer.echo(problem, err=True)
        typer.echo(f"{config}: {len(exc.problems)} problem(s)", err=True)
        raise typer.Exit(1) from None
    warnings = [f"source {s.source_name()}: {problem}" for s in cfg.sources if s.path is not None
                for problem in pattern_problems(s.path, store_files(cfg.store.path))]
    if as_json:
        typer.echo(json.dumps({"config": str(config), "ok": True, "summary": cfg.summary(), "warnings": warnings}))
        return
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(f"{config}: OK — {cfg.summary()}")


@app.command()
def run(
    config: Annotated[Path, typer.Option("--config", "-c", help="Config file.")] = DEFAULT_CONFIG_PATH,
    once: Annotated[bool, typer.Option("--once", help="One step (read, classify, store), then exit.")] = False,
    nvml_library: Annotated[Path | None, typer.Option(help="Load this libnvidia-ml.so.1 instead of the "
                                                      "system's (unusual installs, e.g. WSL).")] = None,
) -> None:
    """Run the agent: follow logs, poll NVML and engines, store events, serve /metrics (SIGHUP reloads)."""
    from agent.config import load_config
    from agent.daemon.service import serve, setup_logging

    setup_logging()
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    try:
        code = serve(config, cfg, once=once, nvml_library=str(nvml_library) if nvml_library else None)
    except AgentError as exc:
        _fail(str(exc))
    raise typer.Exit(code)


@app.command()
def status(
    config: Annotated[Path, typer.Option("--config", "-c", help="The agent's config file.")] = DEFAULT_CONFIG_PATH,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")] = False,
) -> None:
    """What the running agent sees now: sources, load vs budget, GPUs, last events (from the store).

    Exits 0 when the agent answers, 3 when it is not running (what the store holds is still shown).
    """
    from agent.capacity.capacity import paper_budget
    from agent.config import load_config
    from agent.daemon.status import gather
    from agent.views.status import render as render_status
    from agent.views.status import to_json as status_json

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    paper = paper_budget(cfg)
    report = gather(cfg)
    limit = paper.max_concurrency if paper is not None else None
    if as_json:
        typer.echo(json.dumps(status_json(report, cfg, limit), indent=2, default=str))
    else:
        typer.echo(render_status(report, cfg, limit))
    if report.live is None:
        raise typer.Exit(NOT_RUNNING)


@app.command()
def models(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per preset, in a list.")] = False,
) -> None:
    """List the model presets with the per-token KV size (bf16) each implies."""
    from agent.capacity.shapes import PRESETS
    from agent.views.units import size

    if as_json:
        typer.echo(json.dumps([{"name": p.name, "hf_id": p.hf_id, "params": p.params, "layers": p.layers,
                                "kv_heads": p.kv_heads, "head_dim": p.head_dim, "mla": p.is_mla,
                                "sliding_layers": p.sliding_layers,
                                "kv_bytes_per_token_bf16": p.layers * p.kv_bytes_per_token_layer(dtype_bytes=2)}
                               for p in PRESETS.values()], indent=2))
        return
    for preset in PRESETS.values():
        per_token = preset.layers * preset.kv_bytes_per_token_layer(dtype_bytes=2)
        params = f"{preset.params / 1e9:.1f}B" if preset.params else "?"
        kind = "MLA" if preset.is_mla else f"{preset.kv_heads} KV heads × {preset.head_dim}"
        swa = f", {preset.sliding_layers} SWA layers" if preset.sliding_layers else ""
        typer.echo(f"{preset.name:<18} {params:>7}  {preset.layers:>3} layers, {kind}{swa}: "
                   f"{size(per_token)}/token  ({preset.hf_id})")


@app.command()
def budget(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Take inputs from this config file "
                                                "(flags override it).")] = None,
    model: Annotated[str | None, typer.Option(help="Preset name (see `models`) or a local HF config.json "
                                              "(or its folder).")] = None,
    layers: Annotated[int | None, typer.Option(help="Layers (with --kv-heads and --head-dim instead of "
                                               "--model).")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="KV heads (GQA groups).")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head dimension.")] = None,
    params_b: Annotated[float | None, typer.Option(help="Parameter count in billions (to estimate "
                                                   "weights).")] = None,
    vram_gib: Annotated[float | None, typer.Option(help="GPU memory per card, GiB.")] = None,
    util: Annotated[float | None, typer.Option(help="gpu_memory_utilization (default 0.9).")] = None,
    weights_gib: Annotated[float | None, typer.Option(help="Weights, GiB (whole model; default: "
                                                      "estimated from the parameter count).")] = None,
    weights_dtype: Annotated[WeightsDtype | None, typer.Option(help="Weights format for the estimate.")] = None,
    overhead_gib: Annotated[float | None, typer.Option(help="Activations + framework overhead per GPU, "
                                                       "GiB (default 2.0).")] = None,
    kv_dtype: Annotated[KvDtype | None, typer.Option(help="KV-cache dtype.")] = None,
    block_size: Annotated[int | None, typer.Option(help="Paged-KV block size in tokens (default 16).")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
    max_model_len: Annotated[int | None, typer.Option(help="Tokens per request (input + output).")] = None,
    input_p95: Annotated[int | None, typer.Option(help="P95 input tokens of the real workload.")] = None,
    max_output: Annotated[int | None, typer.Option(help="Output cap in tokens (max_tokens).")] = None,
    target_concurrency: Annotated[int | None, typer.Option(help="Plan how to reach this many concurrent "
                                                           "requests.")] = None,
    from_log: Annotated[Path | None, typer.Option(help="A vLLM start-up log: compare with what the engine "
                                                  "reported.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")] = False,
) -> None:
    """Compute the KV-cache budget and max concurrency, showing every step of the arithmetic."""
    from agent.capacity.budget import compute
    from agent.capacity.capacity import capacity_of
    from agent.capacity.inputs import SizingRequest, resolve
    from agent.capacity.plan import plan
    from agent.capacity.reconcile import latest, reconcile
    from agent.config import load_config
    from agent.views.budget_text import render_budget, to_json
    from parsers.vllm import startup_facts

    request = SizingRequest(
        model=model, layers=layers, kv_heads=kv_heads, head_dim=head_dim, params_b=params_b,
        vram_gib=vram_gib, util=util, weights_gib=weights_gib, weights_dtype=weights_dtype,
        overhead_gib=overhead_gib, kv_dtype=kv_dtype, block_size=block_size, tp=tp,
        max_model_len=max_model_len, input_p95=input_p95, max_output=max_output,
    )
    if target_concurrency is not None and target_concurrency < 1:
        _fail(f"--target-concurrency {target_concurrency}: expected at least 1 concurrent request")
    try:
        cfg = load_config(config) if config is not None else None
        facts = latest(startup_facts(_read_lines(from_log), str(from_log))) if from_log else {}
        if from_log and not facts:
            _fail(f"{from_log}: no vLLM start-up capacity lines found (GPU KV cache size, # GPU blocks, "
                  "Model loading took, Available KV cache memory)")
        sizing = resolve(request, cfg, facts)
        try:
            result = compute(sizing.inputs)
        except BudgetError as exc:
            if not facts:
                raise
            kv = facts.get("kv_cache_bytes")
            if "required_kv_bytes" in facts or (isinstance(kv, int | float) and kv <= 0):
                raise BudgetError(f"{exc}\nThe engine did not start either: the log shows no room for the KV "
                                  "cache.") from exc
            known = ", ".join(f"{k}={v}" for k, v in facts.items() if k in _SETTINGS) or "none"
            raise BudgetError(f"{exc}\nThe engine did size a KV cache on its card, so an input here is not what "
                              f"it ran with (settings the log states: {known}); pass the ones it leaves out, e.g. "
                              "--tp, --vram-gib, --weights-gib or --weights-dtype.") from exc
        the_plan = plan(sizing.inputs, target_concurrency, sizing.workload_tokens) \
            if target_concurrency is not None else None
        rec = reconcile(result, facts) if facts else None
        cap = capacity_of(result, facts, str(from_log)) if facts else None
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    except AgentError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(to_json(result, sizing, the_plan, rec, cap), indent=2, default=str))
        return
    typer.echo(render_budget(result, sizing, cfg, the_plan, rec, cap))


_SETTINGS = ("model", "tensor_parallel_size", "quantization", "kv_cache_dtype", "gpu_memory_utilization",
             "max_model_len", "total_gpu_memory_bytes", "weights_bytes")


def _read_lines(path: Path | None) -> list[str]:
    """A saved log's lines, unwrapped from Docker json-file or CRI envelopes where they have one."""
    if path is None:
        return []
    from agent.sources.saved import Unwrapper

    if path.is_dir():
        _fail(f"{path}: is a directory, not a log file")
    try:
        with path.open("rb") as handle:
            return [text for text, _, _ in Unwrapper().read(handle)]
    except OSError as exc:
        _fail(f"{path}: cannot read: {exc.strerror or exc}")


PROGRESS_BYTES = 64 << 20  # `scan` shows a progress bar on a terminal for files this big


class _Progress:
    """A binary file's lines, reporting the bytes consumed (scan's progress bar)."""

    def __init__(self, handle: BinaryIO, advance: Callable[[int], None]) -> None:
        self._handle = handle
        self._advance = advance

    def __iter__(self) -> Iterator[bytes]:
        pending = 0
        for raw in self._handle:
            pending += len(raw)
            if pending >= 1 << 20:
                self._advance(pending)
                pending = 0
            yield raw
        self._advance(pending)


class ScanServer(str, Enum):
    """Servers `scan` can be told to read a log as."""

    AUTO = "auto"
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    KERNEL = "kernel"


class ScanFormat(str, Enum):
    TEXT = "text"
    JSONL = "jsonl"


@app.command()
def scan(
    files: Annotated[list[Path], typer.Argument(help="Log files (plain, Docker json-file or CRI, detected per "
                                                "file); '-' reads stdin.")],
    server: Annotated[ScanServer, typer.Option(help="Read the logs as this server's (auto: detect from the "
                                               "first lines).")] = ScanServer.AUTO,
    output: Annotated[ScanFormat, typer.Option("--format", help="text: a summary; jsonl: one JSON object per "
                                               "record.")] = ScanFormat.TEXT,
    tz: Annotated[str, typer.Option(help="Zone of time stamps that carry none (vLLM, SGLang, syslog): UTC, "
                                    "+08:00 or Asia/Shanghai.")] = "UTC",
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Processes that read one large plain "
                                             "file in parallel (default: the CPUs available); the output is the "
                                             "same as with 1.")] = None,
) -> None:
    """Classify saved logs: OOM, preemption, queueing, refusals, timeouts, engine deaths, GPU faults.

    Exits 0 whether or not problems are found (it is a report, not a check); 1 when a file cannot be read.
    """
    from agent.sources.parallel import scan_path
    from agent.sources.saved import FileScan, parse_tz, scan_into
    from agent.views.scan_progress import progress_bar
    from agent.views.scan_text import JsonlWriter, render_text
    from agent.views.summary import SummaryBuilder

    scans: list[FileScan] = []
    try:
        zone = parse_tz(tz)
    except AgentError as exc:
        _fail(str(exc))
    out = sys.stdout
    writer = JsonlWriter(out) if output is ScanFormat.JSONL else None
    summary = SummaryBuilder() if writer is None else None
    emit = writer if writer is not None else lambda records, _server: summary.add(records)  # type: ignore[union-attr]
    as_server = Server(server.value)
    for path in files:
        try:
            if str(path) == "-":
                scans.append(scan_into(sys.stdin.buffer, "-", emit, as_server, time.time(), zone))
                continue
            with progress_bar(str(path), _size(path), sys.stderr) as progress:  # a bar on a terminal only
                scans.append(scan_path(path, emit, as_server, zone, jobs if jobs is not None else _cpus(), writer,
                                       summary, progress=progress))
        except OSError as exc:
            if writer is not None:
                writer.flush()
            _fail(f"{path}: cannot read: {exc.strerror or exc}")
    if writer is not None:
        writer.flush()
        out.flush()
        return
    assert summary is not None
    typer.echo(render_text(scans, summary.result()))


def _size(path: Path) -> int | None:
    """A regular file's size (None for a pipe or a device, whose size says nothing; errors are scan's to report)."""
    import stat

    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _cpus() -> int:
    """The CPUs this process may run on (its affinity, so `taskset` and cgroup pinning count)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


rules_app = typer.Typer(help="Check the advisor's rule files.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")


@rules_app.command("check")
def rules_check(
    dirs: Annotated[list[Path] | None, typer.Argument(help="Rule folders or files (default: the shipped rules "
                                                      "and the config's rules.dirs).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Take rules.dirs from this config.")] = None,
) -> None:
    """Validate rule files: print every problem (file:line: rule: field: expected …) or what loaded.

    Exit 0 when every file is valid, 1 when any is not."""
    from agent.config import load_config, shipped_rules_dir
    from agent.judge.rules import RuleError, load_rules

    try:
        extra = load_config(config).rules.dirs if config is not None else []
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    folders = list(dirs) if dirs else [shipped_rules_dir(), *extra]
    try:
        ruleset = load_rules(folders)
    except RuleError as exc:
        for problem in exc.problems:
            typer.echo(problem, err=True)
        typer.echo(f"{len(exc.problems)} problem(s)", err=True)
        raise typer.Exit(1) from None
    for rule in ruleset.rules:
        typer.echo(f"{rule.name:<32} {rule.severity.value:<8} {rule.action.direction.value} {rule.action.knob.value}"
                   f"   [{ruleset.origin[rule.name]}]")
    typer.echo(f"{len(ruleset.rules)} rule(s) OK")


@app.command()
def advise(
    log: Annotated[list[Path] | None, typer.Option("--log", exists=True, dir_okay=False, help="Saved engine "
                                                   "logs to judge (no daemon; each file is one engine).")] = None,
    db: Annotated[Path | None, typer.Option("--db", help="The agent's store (default: the config's "
                                            "store.path).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Config: the budget's inputs, the knobs' "
                                                "values, rules.dirs.")] = None,
    since: Annotated[str | None, typer.Option(help="With a store: judge this far back (90s, 10m, 2h; "
                                              "default 1h). With --log: the whole log.")] = None,
    rules_dir: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule folders (after "
                                                         "the config's).")] = None,
    tz: Annotated[str, typer.Option(help="--log: zone of time stamps that carry none.")] = "UTC",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")] = False,
    fail_on_finding: Annotated[bool, typer.Option("--fail-on-finding", help="Exit 3 when any rule fired (for "
                                                  "scripts and CI).")] = False,
) -> None:
    """Judge the rules over a past window of the store, or over saved logs: which knob, which way, to what.

    Exit 0 when it judged (findings or not; a report, like scan), 3 with --fail-on-finding when a rule
    fired, 1 on an error (unreadable file, bad config or rule file, no store), 2 on a usage error."""
    from agent.config import StoreSection, load_config, shipped_rules_dir
    from agent.daemon.offline import load_logs
    from agent.judge.replay import replay
    from agent.judge.rules import RuleError, load_rules, seconds
    from agent.sinks.queries import Queries
    from agent.sinks.store import Store
    from agent.sources.saved import parse_tz
    from agent.views.advice_text import render_replay, replay_json

    try:
        cfg = load_config(config) if config is not None else None
        ruleset = load_rules([shipped_rules_dir(), *(cfg.rules.dirs if cfg else []), *(rules_dir or [])])
        window = seconds(since) if since is not None else None
        if log:
            store = Store.open(":memory:")
            load_logs(log, store, tz=parse_tz(tz))
            until = None
        else:
            path = db or (cfg.store.path if cfg else StoreSection().path)
            if not Path(path).is_file():
                _fail(f"{path}: no store here; pass --db, --config, or --log FILE")
            store = Store.open_readonly(path)
            until = time.time()
        start = until - (window if window is not None else 3600.0) if until is not None else None
        result = replay(Queries(store), ruleset.rules, cfg, start, until)
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    except RuleError as exc:
        _fail("\n".join(exc.problems))
    except ValueError as exc:
        _fail(f"--since: {exc}")
    except AgentError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(replay_json(result), indent=2, default=str))
    else:
        typer.echo(render_replay(result))
    raise typer.Exit(3 if fail_on_finding and result.advice else 0)


class ReportFormat(str, Enum):
    TEXT = "text"
    MD = "md"
    HTML = "html"
    JSON = "json"


@app.command()
def report(
    db: Annotated[Path | None, typer.Option("--db", help="Read this store (a copy is fine; opened read-only). "
                                            "Default: the config's store.path.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="The agent's config: its store and its "
                                                "budget (the paper capacity).")] = None,
    logs: Annotated[list[Path] | None, typer.Option("--log", help="Report on saved logs instead of a store (no "
                                                    "daemon needed); repeat for several files.")] = None,
    since: Annotated[str | None, typer.Option(help="The last DURATION up to now: 90s, 30m, 2h, 1d.")] = None,
    start: Annotated[str | None, typer.Option("--from", help="Window start: ISO time (UTC unless it names a "
                                              "zone) or epoch seconds.")] = None,
    end: Annotated[str | None, typer.Option("--to", help="Window end (default: now).")] = None,
    around: Annotated[int | None, typer.Option(help="30 minutes either side of this event id (ids are in the "
                                               "timeline's 'first id' column).")] = None,
    output_format: Annotated[ReportFormat, typer.Option("--format", help="text (terminal), md (issue "
                                                        "trackers), html (one file with charts), json.")]
    = ReportFormat.TEXT,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
) -> None:
    """Post-incident summary: verdict, timeline, peaks vs capacity, findings, top errors, blind spots.

    Default window: the 24 hours up to the store's newest record. Exit codes: 0 report written (an empty
    window says so in the report); 1 the store is missing, corrupt or unreadable, a log cannot be read, the
    config is invalid or an option value is wrong; 2 usage error.
    """
    from agent import report_cli

    try:
        result = report_cli.build(db=db, config=config, logs=logs or [], since=since, start=start, end=end,
                                  around=around, now=time.time())
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    except AgentError as exc:
        _fail(str(exc))
    text = report_cli.render(result, output_format.value, color=output is None and sys.stdout.isatty())
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"{output}: cannot write: {exc.strerror or exc}")


@app.command()
def loadtest(
    url: Annotated[str, typer.Argument(help="OpenAI-compatible endpoint: http://host:port/v1/completions or "
                                       ".../v1/chat/completions (a bare host:port means /v1/completions).")],
    levels: Annotated[str, typer.Option(help="Concurrency levels, in order.")] = "1,2,3,5,8,12",
    requests_per_level: Annotated[int | None, typer.Option(help="Requests per level (default 20 × level).")] = None,
    payload: Annotated[Path | None, typer.Option(exists=True, dir_okay=False, help="JSON request body with a "
                                                 "fixed prompt (or messages) and max_tokens.")] = None,
    input_tokens: Annotated[int, typer.Option(help="Without --payload: prompt length (one word per token).")] = 512,
    output_tokens: Annotated[int, typer.Option(help="Without --payload: max_tokens (with ignore_eos).")] = 128,
    timeout: Annotated[float, typer.Option(help="Client timeout per request, seconds.")] = 60.0,
    stream: Annotated[bool, typer.Option(help="Stream responses and measure time to first token.")] = False,
    pause: Annotated[float, typer.Option(help="Seconds between levels (engine events logged then count "
                                         "for the level before).")] = 5.0,
    metrics_url: Annotated[str | None, typer.Option(help="Engine /metrics to scrape during each level "
                                                    "(default: the same host's /metrics; '' turns it off).")] = None,
    log: Annotated[Path | None, typer.Option(help="Engine log to read OOM and preemption events from.")] = None,
    db: Annotated[Path | None, typer.Option(help="The agent's store: read the same events from it, and keep "
                                            "each level there for `report`.")] = None,
    capacity: Annotated[int | None, typer.Option(help="The concurrency the budget allows (for the verdict).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Compute --capacity from this config's "
                                                "budget.")] = None,
    keep_going: Annotated[bool, typer.Option(help="Run every level even after one broke.")] = False,
    gpu: Annotated[bool, typer.Option(help="Sample GPU memory through NVML when a driver is present.")] = True,
    nvml_library: Annotated[Path | None, typer.Option(help="Load this libnvidia-ml.so.1 instead of the "
                                                      "system's.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
    save: Annotated[Path | None, typer.Option(help="Also write the JSON result to this file.")] = None,
) -> None:
    """Step-up load test: raise concurrency level by level, watch the engine, compare with the budget.

    The API key comes from DEEPINFER_API_KEY or OPENAI_API_KEY (never a flag). Stops at the first level
    that breaks (OOM, preemption or failed requests) unless --keep-going; levels and requests are capped.
    """
    from agent.tools.loadtest_cli import run_loadtest

    try:
        run_loadtest(url=url, levels=levels, requests_per_level=requests_per_level, payload=payload,
                     input_tokens=input_tokens, output_tokens=output_tokens, timeout=timeout, stream=stream,
                     pause=pause, metrics_url=metrics_url, log=log, db=db, capacity=capacity, config=config,
                     keep_going=keep_going, gpu=gpu, nvml_library=str(nvml_library) if nvml_library else None,
                     as_json=as_json, save=save)
    except ConfigError as exc:
        _fail("\n".join(exc.problems))
    except AgentError as exc:
        _fail(str(exc))


@app.command()
def simulate(
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0 picks a free one; the URL is printed).")] = 8000,
    model: Annotated[str, typer.Option(help="Model preset or HF config.json for the KV arithmetic.")] = "qwen2.5-7b",
    vram_gib: Annotated[float, typer.Option(help="Simulated GPU memory, GiB.")] = 24.0,
    util: Annotated[float, typer.Option(help="gpu_memory_utilization.")] = 0.9,
    weights_gib: Annotated[float, typer.Option(help="Weights, GiB.")] = 14.2,
    overhead_gib: Annotated[float, typer.Option(help="Activations + framework overhead, GiB.")] = 1.6,
    block_size: Annotated[int, typer.Option(help="Paged-KV block size in tokens.")] = 16,
    max_model_len: Annotated[int, typer.Option(help="Longest request (prompt + output) in tokens.")] = 8192,
    kv_blocks: Annotated[int | None, typer.Option(help="KV cache size in blocks (instead of the budget).")] = None,
    max_num_seqs: Annotated[int, typer.Option(help="Most requests running at once.")] = 256,
    max_queue_size: Annotated[int | None, typer.Option(help="Most requests waiting beyond free slots; more are "
                                                       "refused (default: unbounded, as vLLM ≤ 0.28).")] = None,
    reject_status: Annotated[int, typer.Option(help="Status of a refusal: 503 (vLLM) or 429.")] = 503,
    queue_timeout: Annotated[float | None, typer.Option(help="Refuse a request still waiting after this many "
                                                        "seconds.")] = None,
    request_timeout: Annotated[float | None, typer.Option(help="Abort a request older than this many seconds "
                                                          "(504).")] = None,
    prefill_tps: Annotated[float, typer.Option(help="Prefill rate, tokens/s (simulated time).")] = 5000.0,
    decode_tps: Annotated[float, typer.Option(help="Decode rate per request, tokens/s (simulated time).")] = 50.0,
    speed: Annotated[float, typer.Option(help="Run this many times faster than the rates say.")] = 1.0,
    stats_interval: Annotated[float, typer.Option(help="Seconds between stats lines in the log.")] = 10.0,
    oom_on_overcommit: Annotated[bool, typer.Option(help="When the KV cache runs out, die with a CUDA OOM "
                                                    "(exit 1) instead of preempting.")] = False,
    log: Annotated[Path | None, typer.Option(help="Write a vLLM-format log here.")] = None,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
) -> None:
    """Run a SIMULATED vLLM-like engine (no GPU, no model): paged-KV scheduling, vLLM logs and /metrics.

    For trying the load test, the parsers and the scraper end to end. Every output says SIMULATED.
    """
    from agent.tools.sim_cli import run_simulator

    try:
        code = run_simulator(host=host, port=port, model=model, vram_gib=vram_gib, util=util,
                             weights_gib=weights_gib, overhead_gib=overhead_gib, block_size=block_size,
                             max_model_len=max_model_len, kv_blocks=kv_blocks, max_num_seqs=max_num_seqs,
                             max_queue_size=max_queue_size, reject_status=reject_status,
                             queue_timeout=queue_timeout, request_timeout=request_timeout, prefill_tps=prefill_tps,
                             decode_tps=decode_tps, speed=speed, stats_interval=stats_interval,
                             oom_on_overcommit=oom_on_overcommit, log=log, duration=duration)
    except AgentError as exc:
        _fail(str(exc))
    raise typer.Exit(code)


@app.command()
def demo(
    workdir: Annotated[Path | None, typer.Option(help="Where to put the demo's config, store, logs and report "
                                                 "(default: a new temporary folder, kept).")] = None,
) -> None:
    """The whole product in about a minute, no GPU: a SIMULATED engine with max_num_seqs set too high, the
    agent watching it, a step-up load test, the advisor's recommendation and the HTML report.

    Exits 0 when every step ran, 1 naming the step that failed, 130 on Ctrl-C (processes are stopped)."""
    from agent.tools.demo import main as run_demo

    raise typer.Exit(run_demo(workdir))
