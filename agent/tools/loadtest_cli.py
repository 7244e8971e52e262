"""The body of `deepinfer-agent loadtest`: options → LoadTestOptions, a progress bar on a TTY, the table
or JSON on stdout. Kept out of agent/cli.py so that the CLI starts without importing aiohttp or rich."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import typer

from agent.tools.loadtest import (
    API_KEY_VARIABLES,
    LoadTestError,
    LoadTestOptions,
    Progress,
    endpoint_url,
    is_chat,
    load_payload,
    run,
    synthetic_payload,
)
from agent.tools.loadtest_report import LoadTestResult, render_table, to_json


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError as exc:
        raise LoadTestError(f"--levels {text!r}: expected integers separated by commas, e.g. 1,2,3,5,8,12") from exc
    if list(levels) != sorted(set(levels)):
        raise LoadTestError(f"--levels {text!r}: levels must rise (each once)")
    return levels


def capacity_from_config(path: Path) -> int | None:
    from agent.capacity.capacity import paper_budget
    from agent.config import load_config

    budget = paper_budget(load_config(path))
    return budget.max_concurrency if budget is not None else None


def run_loadtest(*, url: str, levels: str, requests_per_level: int | None, payload: Path | None,
                 input_tokens: int, output_tokens: int, timeout: float, stream: bool, pause: float,
                 metrics_url: str | None, log: Path | None, db: Path | None, capacity: int | None,
                 config: Path | None, keep_going: bool, gpu: bool, nvml_library: str | None, as_json: bool,
                 save: Path | None) -> LoadTestResult:
    target = endpoint_url(url)
    chat = is_chat(target)
    body = load_payload(payload, chat) if payload is not None else synthetic_payload(input_tokens, output_tokens, chat)
    if capacity is None and config is not None:
        capacity = capacity_from_config(config)
    api_key = next((os.environ[v] for v in API_KEY_VARIABLES if os.environ.get(v)), None)
    options = LoadTestOptions(url=target, payload=body, levels=parse_levels(levels),
                              requests_per_level=requests_per_level, timeout_seconds=timeout, stream=stream,
                              pause_seconds=pause, api_key=api_key, metrics_url=metrics_url, log_path=log,
                              db_path=db, capacity=capacity, keep_going=keep_going, gpu=gpu,
                              nvml_library=nvml_library)
    options.check()
    result = _run_with_progress(options, show=sys.stderr.isatty() and not as_json)
    if db is not None:
        store_steps(db, result)
    document = to_json(result)
    if save is not None and str(save) == "-":
        typer.echo(json.dumps(document, indent=2))
    elif save is not None:
        try:
            save.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise LoadTestError(f"{save}: cannot write: {exc.strerror or exc}") from exc
    typer.echo(json.dumps(document, indent=2) if as_json else render_table(result))
    if result.failure is not None:  # the levels measured are shown and kept; the run still failed
        raise LoadTestError(f"the load test stopped early: {result.failure}")
    return result


def store_steps(db: Path, result: LoadTestResult) -> None:
    """Keep the levels in the agent's store (its `load_steps` table), where `report` finds them. The
    daemon may be writing at the same time: SQLite serialises the two writers (WAL, busy timeout)."""
    from agent.sinks.store import Store

    with Store.open(db) as store:
        store.commit(result.steps)


def _run_with_progress(options: LoadTestOptions, show: bool) -> LoadTestResult:
    if not show:
        return asyncio.run(run(options))
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    with Bar(TextColumn("level {task.fields[level]:>4}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
             transient=False) as bar:
        tasks: dict[int, object] = {}

        def progress(level: int, done: int, total: int) -> None:
            if level not in tasks:
                tasks[level] = bar.add_task("", total=total, level=level)
            bar.update(tasks[level], completed=done)  # type: ignore[arg-type]

        callback: Progress = progress
        return asyncio.run(run(options, callback))
