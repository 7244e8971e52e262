"""`rules check`, `advise` and `report`: judging what was seen against the capacity, and telling it."""

from __future__ import annotations

import json
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from agent.app import FORMAT_HELP, JSON_ALIAS_HELP, Color, Output, app, fail, use_color, write_output
from agent.errors import AgentError, ConfigError

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
        fail("\n".join(exc.problems))
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
    log: Annotated[list[Path] | None, typer.Option("--log",
                                                   metavar="<file>", help="Saved engine logs to judge (no daemon; each "
                                                   "file is one engine; - reads standard input).")] = None,
    db: Annotated[Path | None, typer.Option("--db", help="The agent's store (default: the config's "
                                            "store.path).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Config: the budget's inputs, the knobs' "
                                                "values, rules.dirs.")] = None,
    since: Annotated[str | None, typer.Option(metavar="<duration>",
                                              help="With a store: judge this far back (90s, 10m, 2h; "
                                              "default 1h). With --log: the whole log.")] = None,
    rules_dir: Annotated[list[Path] | None, typer.Option("--rules", metavar="<dir>", help="Extra rule folders (after "
                                                         "the config's).")] = None,
    tz: Annotated[str, typer.Option(metavar="<zone>", help="--log: zone of time stamps that carry none.")] = "UTC",
    output_format: Annotated[Output, typer.Option("--format", help=FORMAT_HELP)] = Output.TEXT,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_ALIAS_HELP)] = False,
    fail_on_finding: Annotated[bool, typer.Option("--fail-on-finding", help="Exit 3 when any rule fired (for "
                                                  "scripts and CI).")] = False,
) -> None:
    """Judge the rules over a past window of the store, or over saved logs: which knob, which way, to what.

    Exit 0 when it judged (findings or not; a report, like scan), 3 with --fail-on-finding when a rule
    fired, 1 on an error (unreadable file, bad config or rule file, no store), 2 on a usage error."""
    from agent.config import StoreSection, load_config, shipped_rules_dir
    from agent.judge.replay import replay
    from agent.judge.rules import RuleError, load_rules
    from agent.judge.vocabulary import seconds
    from agent.offline.load import load_logs
    from agent.offline.saved import parse_tz
    from agent.sinks.queries import Queries
    from agent.sinks.store import Store
    from agent.views.advice_text import render_replay, replay_json
    from agent.visibility import engines_blind_spots

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
                fail(f"{path}: no store here; pass --db, --config, or --log FILE")
            store = Store.open_readonly(path)
            until = time.time()
        start = until - (window if window is not None else 3600.0) if until is not None else None
        queries = Queries(store)
        result = replay(queries, ruleset.rules, cfg, start, until)
        # what the rules' evidence lacks: a count the log never shows (a client's own timeout concerns no rule)
        blind = {engine: kept for engine, spots in engines_blind_spots(
            queries.servers(), queries.latest_facts(), queries.scraped, queries.served).items()
            if (kept := [b for b in spots if b.what != "client_timeouts"])}
    except ConfigError as exc:
        fail("\n".join(exc.problems))
    except RuleError as exc:
        fail("\n".join(exc.problems))
    except ValueError as exc:
        fail(f"--since: {exc}")
    except AgentError as exc:
        fail(str(exc))
    if as_json or output_format == Output.JSON:
        out = replay_json(result)
        out["not_visible"] = {e: [{"what": b.what, "detail": b.detail, "remedy": b.remedy} for b in spots]
                              for e, spots in blind.items()}
        typer.echo(json.dumps(out, indent=2, default=str))
    else:
        typer.echo(render_replay(result, blind))
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
    logs: Annotated[list[Path] | None, typer.Option("--log", metavar="<file>",
                                                    help="Report on saved logs instead of a store (no "
                                                    "daemon needed); repeat for several files; - reads "
                                                    "standard input.")] = None,
    since: Annotated[str | None, typer.Option(metavar="<duration>",
                                              help="The last DURATION up to now: 90s, 30m, 2h, 1d.")] = None,
    start: Annotated[str | None, typer.Option("--from",
                                              metavar="<time>", help="Window start: ISO time (UTC unless it names a "
                                              "zone) or epoch seconds.")] = None,
    end: Annotated[str | None, typer.Option("--to", metavar="<time>", help="Window end (default: now).")] = None,
    around: Annotated[int | None, typer.Option(metavar="<n>",
                                               help="30 minutes either side of this event id (ids are in the "
                                               "timeline's 'first id' column).")] = None,
    output_format: Annotated[ReportFormat, typer.Option("--format", help="text (terminal), md (issue "
                                                        "trackers), html (one file with charts), json.")]
    = ReportFormat.TEXT,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout (- is "
                                                "stdout).")] = None,
    color: Annotated[Color, typer.Option("--color", help="Colour the text report: auto (a terminal, unless "
                                         "NO_COLOR is set), always, never.")] = Color.AUTO,
) -> None:
    """Post-incident summary: verdict, timeline, peaks vs capacity, findings, top errors, blind spots.

    Default window: the 24 hours up to the store's newest record. Exit codes: 0 report written (an empty
    window says so in the report); 1 the store is missing, corrupt or unreadable, a log cannot be read, the
    config is invalid or an option value is wrong; 2 usage error.
    """
    from agent.commands import report as report_cli

    try:
        result = report_cli.build(db=db, config=config, logs=logs or [], since=since, start=start, end=end,
                                  around=around, now=time.time())
    except ConfigError as exc:
        fail("\n".join(exc.problems))
    except AgentError as exc:
        fail(str(exc))
    to_stdout = output is None or str(output) == "-"
    text = report_cli.render(result, output_format.value, color=use_color(color, to_stdout and sys.stdout.isatty()))
    write_output(text, output)
