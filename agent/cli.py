"""The command line: the daemon's commands (check, run, status, models, scan), and the whole app once imported.

The app and what every command shares are in agent/app.py; the other command families in agent/commands/.
The CLI is the only part that prints to people and chooses exit codes. Each command gathers its options, calls
one core function, and renders the result. Core errors (`AgentError`) become one clear message on stderr and
exit code 1; usage errors are typer's (2).
Exit codes: 0 success; 1 an error (bad input, unreadable file, invalid config); 2 a usage error;
`status` exits 3 when the agent is not running (systemctl is-active's convention).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from agent.app import FORMAT_HELP, JSON_ALIAS_HELP, NOT_RUNNING, Color, Output, app, fail, use_color, write_output
from agent.defaults import DEFAULT_CONFIG_PATH
from agent.errors import AgentError, ConfigError
from agent.records import Server


@app.command()
def check(
    config: Annotated[Path, typer.Option("--config", "-c", help="Config file to validate.")] = DEFAULT_CONFIG_PATH,
    output_format: Annotated[Output, typer.Option("--format", help=FORMAT_HELP)] = Output.TEXT,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_ALIAS_HELP)] = False,
) -> None:
    """Validate a config file: print every problem (file:line: field: expected …) or a one-line summary,
    and warn about sources that cannot be read now (exit 0: the files may appear later).

    Exit 0 when the config is valid (warnings or not), 1 when it is not or cannot be read, 2 on a usage error."""
    from agent.capacity.capacity import budget_or_reason
    from agent.config import load_config
    from agent.sources.patterns import pattern_problems, store_files

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        if as_json or output_format == Output.JSON:
            typer.echo(json.dumps({"config": str(config), "ok": False, "problems": list(exc.problems)}))
            raise typer.Exit(1) from None
        for problem in exc.problems:  # each an error line, as every command's (file:line: field: expected …)
            typer.echo(f"error: {problem}", err=True)
        typer.echo(f"{config}: {len(exc.problems)} problem(s)", err=True)
        raise typer.Exit(1) from None
    warnings = [f"source {s.source_name()}: {problem}" for s in cfg.sources if s.path is not None
                for problem in pattern_problems(s.path, store_files(cfg.store.path))]
    paper, why = budget_or_reason(cfg)
    if paper is None and cfg.model != type(cfg.model)():  # a model was given, so a budget was meant
        warnings.append(f"budget: not computed ({why}); the engine's own figures govern once it reports them")
    if as_json or output_format == Output.JSON:
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
    """Run the agent: follow logs, poll NVML and engines, store events, serve /metrics (SIGHUP reloads).

    Exit 0 after SIGTERM or SIGINT (or one step with --once), 1 when it cannot start (a bad config, the
    store cannot be opened, the metrics port is taken), 2 on a usage error."""
    from agent.config import load_config
    from agent.daemon.service import serve, setup_logging

    setup_logging()
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        fail("\n".join(exc.problems))
    try:
        code = serve(config, cfg, once=once, nvml_library=str(nvml_library) if nvml_library else None)
    except AgentError as exc:
        fail(str(exc))
    raise typer.Exit(code)


@app.command()
def status(
    config: Annotated[Path, typer.Option("--config", "-c", help="The agent's config file.")] = DEFAULT_CONFIG_PATH,
    output_format: Annotated[Output, typer.Option("--format", help=FORMAT_HELP)] = Output.TEXT,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_ALIAS_HELP)] = False,
    watch: Annotated[float | None, typer.Option("--watch", "-w", metavar="<seconds>", help="Redraw every this "
                                                "many seconds, as `watch` does, until Ctrl-C (text only).")] = None,
) -> None:
    """What the running agent sees now: sources, load vs budget, GPUs, last events (from the store).

    Exits 0 when the agent answers, 3 when it is not running (what the store holds is still shown);
    with --watch, 0 on Ctrl-C.
    """
    from agent.capacity.capacity import paper_budget
    from agent.config import load_config
    from agent.daemon.status import gather
    from agent.views.status import render as render_status
    from agent.views.status import to_json as status_json

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        fail("\n".join(exc.problems))
    paper = paper_budget(cfg)
    limit = paper.max_concurrency if paper is not None else None
    if watch is not None:
        if not watch > 0 or watch == float("inf"):
            fail(f"--watch {watch:g}: a number of seconds above 0")
        _watch(lambda: render_status(gather(cfg), cfg, limit), watch)
        return
    report = gather(cfg)
    if as_json or output_format == Output.JSON:
        typer.echo(json.dumps(status_json(report, cfg, limit), indent=2, default=str))
    else:
        typer.echo(render_status(report, cfg, limit))
    if report.live is None:
        raise typer.Exit(NOT_RUNNING)


def _watch(draw: Callable[[], str], every: float) -> None:
    """Redraw `draw()` every `every` seconds: the screen cleared on a terminal, a separator line when piped
    (so a log of it stays readable), until Ctrl-C."""
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    try:
        while True:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
            typer.echo(f"{clear}every {every:g} s · {stamp} · Ctrl-C to stop" if clear else f"--- {stamp}")
            typer.echo(draw())
            time.sleep(every)
    except KeyboardInterrupt:
        return


@app.command()
def models(
    output_format: Annotated[Output, typer.Option("--format", help=FORMAT_HELP)] = Output.TEXT,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_ALIAS_HELP)] = False,
) -> None:
    """List the model presets with the per-token KV size (bf16) each implies.

    Exit 0; 2 on a usage error."""
    from agent.capacity.shapes import PRESETS
    from agent.views.units import size

    if as_json or output_format == Output.JSON:
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
    tz: Annotated[str, typer.Option(metavar="<zone>",
                                    help="Zone of time stamps that carry none (vLLM, SGLang, syslog): UTC, "
                                    "+08:00 or Asia/Shanghai.")] = "UTC",
    jobs: Annotated[int | None, typer.Option("--jobs", "-j",
                                             metavar="<n>", min=1, help="Processes that read one large plain "
                                             "file in parallel (default: the CPUs available); the output is the "
                                             "same as with 1.")] = None,
) -> None:
    """Classify saved logs: OOM, preemption, queueing, refusals, timeouts, engine deaths, GPU faults.

    Exits 0 whether or not problems are found (it is a report, not a check); 1 when a file cannot be read.
    """
    from agent.offline.parallel import scan_path
    from agent.offline.saved import FileScan, parse_tz, scan_into
    from agent.sources.bounded import bounded
    from agent.views.scan_progress import progress_bar
    from agent.views.scan_text import JsonlWriter, render_text
    from agent.views.summary import SummaryBuilder

    scans: list[FileScan] = []
    try:
        zone = parse_tz(tz)
    except AgentError as exc:
        fail(str(exc))
    out = sys.stdout
    writer = JsonlWriter(out) if output is ScanFormat.JSONL else None
    summary = SummaryBuilder() if writer is None else None
    emit = writer if writer is not None else lambda records, _server: summary.add(records)  # type: ignore[union-attr]
    as_server = Server(server.value)
    for path in files:
        try:
            if str(path) == "-":
                scans.append(scan_into(bounded(sys.stdin.buffer), "-", emit, as_server, time.time(), zone))
                continue
            with progress_bar(str(path), _size(path), sys.stderr) as progress:  # a bar on a terminal only
                scans.append(scan_path(path, emit, as_server, zone, jobs if jobs is not None else _cpus(), writer,
                                       summary, progress=progress))
        except OSError as exc:
            if writer is not None:
                writer.flush()
            fail(f"{path}: cannot read: {exc.strerror or exc}")
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


# The other commands live in agent/commands/, one file per family; importing them registers them on `app`,
# after this module's own, so `--help` lists the daemon's commands first.
from agent.commands import budget, judge, tools  # noqa: E402, F401

__all__ = ["NOT_RUNNING", "Color", "Output", "app", "fail", "use_color", "write_output"]
