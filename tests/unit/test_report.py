"""`deepinfer-agent report`: one stored incident per scenario → the verdict, the sections and every format."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.offline.report import MAX_POINTS, Window, gather
from agent.records import Server, ServerStats
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.views.report_html import safe_json
from agent.views.report_md import md_escape
from tests.report_scenarios import ENGINE, PLANTED, SCENARIOS, T0, build

runner = CliRunner()
SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "report.schema.json").read_text())


def _report(db: Path, *args: str) -> str:
    result = runner.invoke(app, ["report", "--db", str(db), *args])
    assert result.exit_code == 0, result.output
    return result.output


def _json(db: Path, *args: str) -> dict[str, object]:
    data: dict[str, object] = json.loads(_report(db, "--format", "json", *args))
    jsonschema.validate(data, SCHEMA, cls=jsonschema.Draft202012Validator)
    return data


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("report")
    return {name: build(root / f"{name}.db", name) for name in SCENARIOS}


@pytest.mark.parametrize(("scenario", "category", "headline"), [
    ("oom_storm", "kv_exhausted", "KV cache exhausted at 14:02 UTC: 37 OOM events, 1,204 preemptions; "
                                  "max_num_seqs 64 exceeds the 41 the capacity allows"),
    ("queue_pileup", "rejections", "Requests refused at admission at 14:03 UTC: 20 queue-full rejections, 50 HTTP "
                                   "429; waiting peaked at 180; KV usage peaked at only 60%: lowering concurrency will "
                                   "not help"),
    ("timeouts", "timeouts", "Requests timed out at 14:05 UTC: 12 deadlines exceeded"),
    ("quiet_day", "quiet", "Quiet: no incidents between 14:00 UTC and 14:09 UTC; KV usage peaked at 35%, running at "
                           "12 (capacity 41)."),
])
def test_each_scenario_gets_its_verdict_in_every_format(stores: dict[str, Path], scenario: str, category: str,
                                                         headline: str) -> None:
    data = _json(stores[scenario])
    verdict = data["verdict"]
    assert isinstance(verdict, dict)
    assert (verdict["category"], verdict["headline"]) == (category, headline)
    assert headline.split(":")[0] in " ".join(_report(stores[scenario]).split())
    assert md_escape(headline) in _report(stores[scenario], "--format", "md")


def test_the_oom_storm_report_has_every_section_with_its_numbers(stores: dict[str, Path]) -> None:
    data = _json(stores["oom_storm"])
    timeline = {k["kind"]: k for k in data["timeline"]}  # type: ignore[attr-defined]
    assert (timeline["oom"]["count"], timeline["preemption"]["count"]) == (37, 1204)
    assert timeline["oom"]["occurrences"] == 37
    assert timeline["oom"]["first_message"] == PLANTED
    brk = data["verdict"]["break_event"]  # type: ignore[index]
    assert (brk["kind"], brk["ts"]) == ("preemption", T0 + 121)
    engine = data["engines"][0]  # type: ignore[index]
    assert (engine["engine"], engine["max_concurrency"], engine["running"]["peak"]) == (ENGINE, 41, 64.0)
    assert engine["kv_usage_ratio"]["peak"] == 1.0
    assert engine["over_capacity_ratio"] == pytest.approx(1 - 14 / 120)  # running > 41 from s = 66: 14 samples under
    gpu = data["gpus"][0]  # type: ignore[index]
    assert gpu["used_bytes"]["peak"] == 23.5 * 1024**3 and gpu["total_bytes"] == 24 * 1024**3
    capacity = data["capacity"][0]  # type: ignore[index]
    assert capacity["configured"]["max_num_seqs"] == 64 and capacity["governs"] == "engine"
    assert capacity["max_concurrency"] == 41
    finding = data["findings"][0]  # type: ignore[index]
    assert (finding["knob"], finding["current"], finding["recommended"]) == ("max_num_seqs", 64, 41)
    assert data["messages"][0] == {"kind": "preemption", "message": "Sequence group preempted by RECOMPUTE",  # type: ignore[index]
                                   "count": 1204}
    assert data["messages_sampled"] is None
    assert data["load_steps"][0]["level"] == 48  # type: ignore[index]
    # nothing unseen but what a vLLM log never shows (a client's own timeout is logged 200)
    assert [b["what"] for b in data["blind"]] == ["log_cannot_show_client_timeouts"]
    text = _report(stores["oom_storm"])
    for title in ("Timeline", "Load against capacity", "GPU memory", "Configured vs paper budget", "Findings",
                  "Top error messages", "Load test", "What the agent could not see"):
        assert title in text


def test_a_hole_in_the_samples_is_reported_as_blind(stores: dict[str, Path]) -> None:
    blind = _json(stores["quiet_day"])["blind"]
    assert isinstance(blind, list)
    gaps = [(b["subject"], b["since"], b["until"]) for b in blind if b["what"] == "gap"]
    assert gaps == [(ENGINE, T0 + 235, T0 + 360), ("GPU-0000", T0 + 235, T0 + 360)]


def test_an_empty_range_says_so_plainly(stores: dict[str, Path]) -> None:
    data = _json(stores["oom_storm"], "--from", "2020-01-01T00:00", "--to", "2020-01-02T00:00")
    assert data["empty"] is True
    assert "Nothing recorded between 00:00 UTC and 00:00 UTC" in data["verdict"]["headline"]  # type: ignore[index]
    # the last hour of a store whose data is older (oom_storm is not: its finding never cleared, so it is active)
    assert "Nothing recorded" in _report(stores["quiet_day"], "--since", "1h")
    assert "kv_exhausted" in _report(stores["oom_storm"], "--since", "1h")


def test_around_an_event_id_centres_the_window_on_it(stores: dict[str, Path]) -> None:
    data = _json(stores["oom_storm"], "--around", "1")
    window = data["window"]
    assert isinstance(window, dict)
    assert (window["since"], window["until"]) == (T0 + 122 - 1800, T0 + 122 + 1800)
    result = runner.invoke(app, ["report", "--db", str(stores["oom_storm"]), "--around", "999999"])
    assert result.exit_code == 1 and "no event with that id" in result.output


def test_a_missing_or_corrupt_store_is_one_clear_error_with_exit_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 1 and "no store there" in result.output
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database" * 100)
    result = runner.invoke(app, ["report", "--db", str(bad)])
    assert result.exit_code == 1 and "corrupt" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_bad_options_are_exit_1_and_conflicts_are_named(stores: dict[str, Path]) -> None:
    for args, says in ((["--since", "soon"], "expected a duration"), (["--from", "yesterday"], "expected a time"),
                       (["--since", "1h", "--around", "1"], "choose one of")):
        result = runner.invoke(app, ["report", "--db", str(stores["timeouts"]), *args])
        assert result.exit_code == 1 and says in result.output


def test_reads_while_the_daemon_holds_a_write_transaction_and_from_a_copy(stores: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    build(db, "timeouts")
    writer = sqlite3.connect(db)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM events")  # uncommitted: the report must neither wait nor see it
    try:
        assert _json(db)["timeline"][0]["count"] == 12  # type: ignore[index]
        copy = tmp_path / "copy.db"
        shutil.copy(db, copy)
        for suffix in ("-wal", "-shm"):
            if Path(f"{db}{suffix}").exists():
                shutil.copy(f"{db}{suffix}", f"{copy}{suffix}")
        assert _json(copy)["verdict"]["category"] == "timeouts"  # type: ignore[index]
    finally:
        writer.rollback()
        writer.close()


def test_markdown_escapes_log_text_and_keeps_tables_rectangular(stores: dict[str, Path]) -> None:
    md = _report(stores["oom_storm"], "--format", "md")
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert r"CUDA out of memory \| tried to allocate" in md
    for block in md.split("\n\n"):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        widths = {len(line.replace(r"\|", "").split("|")) for line in rows}
        assert len(widths) <= 1, block


def test_html_escapes_log_text_and_embeds_inert_json(stores: dict[str, Path]) -> None:
    html = _report(stores["oom_storm"], "--format", "html")
    assert "document.title='pwned'" not in html.replace("&#39;", "'").split("&lt;script&gt;")[0]
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in html
    data = html.split('<script type="application/json" id="report-data">')[1].split("</script>")[0]
    assert "<" not in data and json.loads(data)["specs"][0]["key"] == "memory"
    assert safe_json({"m": "</script><!--"}) == '{"m":"\\u003c/script\\u003e\\u003c!--"}'
    assert "https://" not in html.split("<script>")[0]  # nothing fetched: the page is self-contained
    assert "new uPlot" in html


def test_saved_logs_report_without_a_daemon(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    stats = ("INFO 11-29 09:00:{s:02d} [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg "
             "generation throughput: 20.0 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: {kv}%, "
             "Prefix cache hit rate: 0.0%")
    log.write_text("INFO 11-29 08:59:00 [kv_cache_utils.py:1087] GPU KV cache size: 98,304 tokens\n"
                   + "".join(stats.format(s=s, r=s, kv=40 + s) + "\n" for s in range(10)))
    result = runner.invoke(app, ["report", "--log", str(log), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    jsonschema.validate(data, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert data["engines"][0]["engine"] == str(log) and data["engines"][0]["running"]["peak"] == 9
    assert data["capacity"][0]["engine_kv_cache_tokens"] == 98304
    assert runner.invoke(app, ["report", "--log", str(tmp_path / "gone.log")]).exit_code == 1


def test_chart_series_are_downsampled_but_keep_every_peak(tmp_path: Path) -> None:
    samples = [ServerStats(T0 + s, ENGINE, Server.VLLM, running=s % 50, waiting=0, kv_usage_ratio=0.5, path="/l",
                           offset=s) for s in range(20_000)]
    samples[12_345] = samples[12_345]._replace(kv_usage_ratio=0.99, running=500)
    with Store.open(tmp_path / "a.db") as store:
        store.commit(samples, now=T0)
        report = gather(Queries(store), None, Window(T0, T0 + 20_000, "test"), source="test")
    kv, load = report.charts["kv"], report.charts["load"]
    assert len(kv.x) <= MAX_POINTS and all(len(v) == len(kv.x) for v in kv.series.values())
    assert max(v for v in kv.series[f"{ENGINE} max"] if v is not None) == 0.99
    assert min(v for v in kv.series[f"{ENGINE} min"] if v is not None) == 0.5
    assert max(v for v in load.series[f"{ENGINE} running"] if v is not None) == 500
    assert report.engines[0].running.peak == 500 and report.engines[0].running.samples == 20_000


def test_message_counts_past_the_exact_limit_are_estimated_and_say_so(stores: dict[str, Path]) -> None:
    with Store.open_readonly(stores["oom_storm"]) as store:
        top = Queries(store).top_messages(T0, T0 + 900, total=1241, exact_up_to=100, slices=10, per_slice=50)
    assert top.sampled is not None and 0 < top.sampled < 1241
    assert top.rows[0][:2] == ("preemption", "Sequence group preempted by RECOMPUTE")
    assert 900 < top.rows[0][2] < 1241


def test_a_new_empty_store_reports_nothing_recorded_in_every_format(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    Store.open(db).close()
    data = _json(db)
    assert data["empty"] is True and data["verdict"]["category"] == "empty"  # type: ignore[index]
    assert "Nothing recorded" in _report(db, "--format", "md")
    assert "Nothing recorded" in _report(db, "--format", "html")


def test_text_is_coloured_only_for_a_terminal(stores: dict[str, Path]) -> None:
    from agent.views.report_text import render_text

    with Store.open_readonly(stores["oom_storm"]) as store:
        report = gather(Queries(store), None, Window(T0, T0 + 900, "test"), source="test")
    assert "\x1b[" in render_text(report, color=True)
    assert "\x1b[" not in render_text(report) and "\x1b[" not in _report(stores["oom_storm"])


def test_a_finding_active_since_before_the_window_is_still_shown(stores: dict[str, Path]) -> None:
    later = _json(stores["oom_storm"], "--from", str(T0 + 600), "--to", str(T0 + 900))
    assert [f["rule"] for f in later["findings"]] == ["kv_exhausted"]  # type: ignore[attr-defined]
    before = _json(stores["oom_storm"], "--from", str(T0), "--to", str(T0 + 200))
    assert before["findings"] == []


def test_a_line_that_stands_for_many_preemptions_counts_them_all(tmp_path: Path) -> None:
    log = tmp_path / "v0.log"
    warn = ("WARNING 11-29 09:00:{s:02d} [scheduler.py:1560] Sequence group {s} is preempted by PreemptionMode."
            "RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. "
            "Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
            "total_num_cumulative_preemption={n}")
    log.write_text("".join(warn.format(s=s, n=1 + 50 * s) + "\n" for s in range(3)))
    result = runner.invoke(app, ["report", "--log", str(log), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    line = data["timeline"][0]
    assert (line["kind"], line["count"]) == ("preemption", 3) and line["occurrences"] > 3
    assert f"{line['occurrences']:,} preemptions (3 log lines)" in data["verdict"]["headline"]
