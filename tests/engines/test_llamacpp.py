"""A REAL llama.cpp `llama-server` serving the tiny local GGUF: slots full, an oversize request, context
exhaustion — the agent's counts against the engine's counters and its clients, and no phantom preemption
(llama.cpp never preempts)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines import bed, scenarios
from tests.engines.expect import CHECKS, read_log
from tests.engines.surfaces import Daemon, agent, occurrences, report_json

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def llamacpp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[bed.Engine]:
    engine = bed.start_llamacpp(tmp_path_factory.mktemp("llamacpp") / "llama.log")
    yield engine
    engine.stop()


def test_incidents_read_as_the_engine_counted_them(llamacpp: bed.Engine, tmp_path: Path) -> None:
    for scenario in scenarios.LLAMACPP_RUNTIME:
        recording = scenario(llamacpp)
        CHECKS[("llamacpp", recording.name)](read_log(recording.log), recording.truth)
        log = tmp_path / f"{recording.name}.log"
        log.write_text(recording.log)
        report = report_json(log)
        assert occurrences(report, "preemption") == 0
        assert occurrences(report, "request_failed") == sum(
            n for k, n in recording.truth.items() if k in ("client_400", "client_500"))
        scan = agent("scan", str(log)).stdout
        assert "preemption" not in scan.split("Not visible")[0].replace("0 preemptions", "")


def test_the_daemon_with_log_and_scrape(llamacpp: bed.Engine, tmp_path: Path) -> None:
    daemon = Daemon(tmp_path / "agent", llamacpp.log, llamacpp.url + "/metrics", "llamacpp")
    try:
        failed = scenarios.llamacpp_context_exceeded(llamacpp).truth
    finally:
        daemon.stop()
    seen = daemon.occurrences()
    assert seen.get("preemption", 0) == 0, seen
    assert seen.get("request_failed", 0) >= failed["client_500"], seen  # and the earlier incidents' failures


def test_the_load_test_names_failed_requests_not_preemptions(llamacpp: bed.Engine) -> None:
    # four 300 + 200-token requests on 512 shared cells: the requests fail with HTTP 500, nothing is preempted
    out = json.loads(agent("loadtest", llamacpp.url + "/v1/completions", "--levels", "4", "--requests-per-level",
                           "4", "--input-tokens", "300", "--output-tokens", "200", "--pause", "1", "--no-gpu",
                           "--json", check=False).stdout)
    (step,) = out["steps"]
    assert step["broke"] and "failed (5xx)" in step["reason"] and "preemption" not in step["reason"], step
    assert step["preemption_events"] == 0
