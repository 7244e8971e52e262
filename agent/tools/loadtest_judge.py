"""The judge over a load test's run: the shipped rules replayed on the agent's store or the engine's log for
the run's window, so the verdict's cause is the advisor's (agent/tools/loadtest_report.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.config import shipped_rules_dir
from agent.errors import AgentError
from agent.judge.replay import replay
from agent.judge.rules import load_rules
from agent.offline.load import load_logs
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.verdicts import Finding, LoadStep


def judged(db_path: Path | None, log_path: Path | None, steps: Sequence[LoadStep], pause_seconds: float,
           ) -> tuple[list[Finding], dict[str, str]]:
    """The judge's findings over the run (the shipped rules replayed on the agent's store or the engine's
    log), so the verdict's cause is the advisor's; nothing when neither was given or the run was empty."""
    if not steps or (db_path is None and log_path is None):
        return [], {}
    since, until = steps[0].started, steps[-1].ended + pause_seconds
    try:
        rules = load_rules([shipped_rules_dir()]).rules
        if db_path is not None:
            store = Store.open_readonly(db_path)
        else:
            assert log_path is not None
            store = Store.open(":memory:")
            load_logs([log_path], store)
    except AgentError:  # the run's own counts still give a verdict
        return [], {}
    try:
        result = replay(Queries(store), rules, None, since, until)
    finally:
        store.close()
    return [a.finding for a in result.advice], {r.name: r.category for r in rules}
