"""The body of `deepinfer-agent report`: open the store (or load saved logs), pick the window, gather, render.

Kept out of agent/cli.py (which only declares options and turns errors into exit codes) so the CLI
module stays small and starts without importing Jinja2 or rich. Raises AgentError subclasses only.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from agent.config import DEFAULT_CONFIG_PATH, load_config
from agent.errors import AgentError, StoreError
from agent.inert import inert
from agent.offline.report import Report, as_json, gather, resolve_window
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.sinks.storefile import failure_hint

FORMATS = ("text", "md", "html", "json")


def build(*, db: Path | None, config: Path | None, logs: Sequence[Path], since: str | None, start: str | None,
          end: str | None, around: int | None, now: float) -> Report:
    """The report the options ask for. Saved logs go through the parsers into an in-memory store and the
    advisor judges them; a store is opened read-only (the config's `store.path` when `--db` is not given)."""
    if (since is not None) + (around is not None) + (start is not None or end is not None) > 1:
        raise AgentError("choose one of --since, --from/--to and --around")
    if logs and db is not None:
        raise AgentError("choose --db or --log, not both")
    cfg = load_config(config) if config is not None else None
    try:
        if logs:
            from agent.offline.load import load_logs  # the parsers: imported only when logs are read

            store, source = Store.open(":memory:"), ", ".join(str(p) for p in logs)
            load_logs(logs, store)
        else:
            if db is None:
                cfg = cfg or load_config(DEFAULT_CONFIG_PATH)
                db = cfg.store.path
            store, source = Store.open_readonly(db), str(db)
        with store:
            queries = Queries(store)
            window = resolve_window(queries, now, since=since, start=start, end=end, around=around)
            return gather(queries, cfg, window, source=source, evaluate_findings=bool(logs))
    except StoreError as exc:
        if exc.__cause__ is None:  # no SQLite error behind it (a missing file): the message says it all
            raise
        raise StoreError(f"{exc} ({failure_hint(exc)})") from exc


def render(report: Report, output_format: str, *, color: bool) -> str:
    """The report in one of FORMATS; `color` for a terminal (text only, at the terminal's width). Every
    string in it (messages, file, engine and model names from the logs) is made inert first, once for all
    the formats: rich's colours and Markdown's markup are added after."""
    report = inert(report)
    if output_format == "json":
        return json.dumps(as_json(report), indent=1, allow_nan=False) + "\n"
    if output_format == "md":
        from agent.views.report_md import render_md

        return render_md(report)
    if output_format == "html":
        from agent.views.report_html import render_html

        return render_html(report)
    from agent.views.report_text import render_text

    return render_text(report, color=color, width=shutil.get_terminal_size((120, 40)).columns if color else 120)
