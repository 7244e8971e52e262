"""One verdict source: on the same evidence `advise`, `report`, `status` and the load test say the same thing
— the judge's. An OOM at 61 % KV is the activation peak everywhere (not "KV cache exhausted" in one place),
with one number for its knob; and the precedence between findings on one knob is stated."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.capacity.capacity import Capacity
from agent.cli import app
from agent.judge.advisor import Advisor
from agent.judge.precedence import reconcile
from agent.judge.rules import load_rules
from agent.records import CapacityFact, Event, EventKind, Knob, Phase, Server, ServerStats, Severity
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.tools.loadtest_judge import judged
from agent.tools.loadtest_report import verdict as loadtest_verdict
from agent.verdicts import Direction, Finding, LoadStep
from agent.views.advice_text import render_active

RULES = load_rules([Path(__file__).parent.parent.parent / "rules"]).rules
CATEGORIES = {r.name: r.category for r in RULES}
runner = CliRunner()
E = "/logs/vllm-0.log"


def _incident(now: float) -> list[ServerStats | Event]:
    """Stats every 10 s at KV 61 % with 8 running for four minutes, a runtime OOM in the middle: the activation
    peak (the engine kept serving, as vLLM does after a request's OOM)."""
    recs: list[ServerStats | Event] = [ServerStats(now - 300 + 10 * i, E, Server.VLLM, running=8, waiting=0,
                                                   kv_usage_ratio=0.61) for i in range(25)]
    recs.append(Event(now - 200, E, Server.VLLM, EventKind.OOM, Severity.CRITICAL, Phase.RUNTIME,
                      "torch.OutOfMemoryError: CUDA out of memory.", {}, E, 99))
    return recs


def test_advise_report_and_status_agree_on_the_same_store(tmp_path: Path) -> None:
    now = time.time()
    db = tmp_path / "agent.db"
    config = tmp_path / "config.yaml"
    config.write_text(f"store: {{path: {db}}}\nserver: {{gpu_memory_fraction: 0.92, max_num_seqs: 8}}\n")
    store = Store.open(db)
    store.commit(_incident(now), now=now)
    # the daemon's judge stage: the findings it stores
    advisor = Advisor(RULES, 15.0, {"gpu_memory_utilization": 0.92, "max_num_seqs": 8.0}, log_findings=False)
    found = advisor.step(now - 150, Queries(store), {E: Capacity(E, 8192, paper_max_concurrency=13)}, [E])
    store.commit(found, now=now)
    store.close()
    # 0.92 × 0.95 = 0.874 → 0.87, by oom_activation_peak; nothing about max_num_seqs (8 ≤ 13)
    advised = json.loads(runner.invoke(app, ["advise", "--db", str(db), "--config", str(config), "--json"]).stdout)
    (rec,) = [r for r in advised["recommendations"] if r["knob"] == "gpu_memory_utilization"]
    assert (rec["direction"], rec["from"], rec["to"], rec["governed_by"]) == ("lower", 0.92, 0.87,
                                                                             "oom_activation_peak")
    report = json.loads(runner.invoke(app, ["report", "--db", str(db), "--config", str(config), "--format",
                                            "json"]).stdout)
    assert report["verdict"]["category"] == "activation_peak"
    assert "oom_activation_peak: lower gpu_memory_utilization 0.92 → 0.87" in report["verdict"]["headline"]
    assert "KV cache exhausted" not in report["verdict"]["headline"]
    status = render_active([f for f in found if f.active])
    assert "lower gpu_memory_utilization 0.92 → 0.87 — governed by oom_activation_peak" in status


def _step(level: int, started: float, **kw: object) -> LoadStep:
    return LoadStep("run", "http://x", level, started, started + 30, 10, 10, **kw)  # type: ignore[arg-type]


def test_the_load_test_takes_its_cause_from_the_judge() -> None:
    steps = [_step(4, 1000.0), _step(8, 1040.0, oom_events=1, broke=True, reason="1 OOM event(s)")]
    peak = Finding(1060.0, 1060.0, "oom_activation_peak", E, Severity.CRITICAL, "…", Knob.GPU_MEMORY_UTILIZATION,
                   Direction.LOWER, 0.92, 0.87)
    judged = loadtest_verdict(steps, 13, [peak], CATEGORIES)
    # the judge calls it the activation peak: not a verdict on the KV budget (agrees stays unknown)
    assert judged.cause == "OOM at the activation peak (KV not full)" and judged.agrees is None
    assert "the judge: oom_activation_peak: lower gpu_memory_utilization to 0.87" in judged.text
    # without findings the level's own count names it, and an OOM below the budget contradicts it
    alone = loadtest_verdict(steps, 13)
    assert alone.cause == "OOM" and alone.agrees is False
    # a finding from before the run does not decide it
    stale = Finding(500.0, 400.0, "oom_activation_peak", E, Severity.CRITICAL, "…", active=False)
    assert loadtest_verdict(steps, 13, [stale], CATEGORIES).cause == "OOM"


def _f(rule: str, direction: Direction, to: float | None, severity: Severity = Severity.WARNING) -> Finding:
    return Finding(0.0, 0.0, rule, E, severity, rule, Knob.MAX_NUM_SEQS, direction, 32.0, to)


def test_lowering_beats_raising_and_the_answer_names_what_it_overrode() -> None:
    (rec,) = reconcile([_f("kv_headroom_raise_concurrency", Direction.RAISE, 48, Severity.INFO),
                        _f("oom_kv_at_limit", Direction.LOWER, 13, Severity.CRITICAL)])
    assert (rec.governs.rule, rec.governs.recommended) == ("oom_kv_at_limit", 13)
    assert rec.why == ("governed by oom_kv_at_limit (lowering to stop OOM/preemption beats raising); overrides "
                       "kv_headroom_raise_concurrency (raise → 48)")


def test_among_lowers_the_severer_then_the_lower_number_governs() -> None:
    (rec,) = reconcile([_f("max_num_seqs_above_bound", Direction.LOWER, 18),
                        _f("preemption_storm", Direction.LOWER, 15),
                        _f("startup_warmup_oom", Direction.LOWER, 20, Severity.CRITICAL)])
    assert rec.governs.rule == "startup_warmup_oom"
    assert [o.rule for o in rec.overridden] == ["preemption_storm", "max_num_seqs_above_bound"]
    (same,) = reconcile([_f("max_num_seqs_above_bound", Direction.LOWER, 18), _f("preemption_storm",
                                                                                 Direction.LOWER, 15)])
    assert same.governs.rule == "preemption_storm" and "the more cautious number" in same.why


def test_advise_report_and_rules_accept_the_same_durations(tmp_path: Path) -> None:
    from agent.judge.vocabulary import seconds
    from agent.offline.report import parse_duration

    db = tmp_path / "agent.db"
    store = Store.open(db)
    store.commit(_incident(time.time()), now=time.time())
    store.close()
    for text, value in (("90s", 90.0), ("10m", 600.0), ("2h", 7200.0), ("1d", 86400.0), ("45", 45.0)):
        assert seconds(text) == parse_duration(text) == value
        assert runner.invoke(app, ["advise", "--db", str(db), "--since", text]).exit_code == 0
        assert runner.invoke(app, ["report", "--db", str(db), "--since", text]).exit_code == 0
    for bad in ("10 minutes", "0s", "-5m", "1w"):
        advised = runner.invoke(app, ["advise", "--db", str(db), "--since", bad])
        reported = runner.invoke(app, ["report", "--db", str(db), "--since", bad])
        assert advised.exit_code == reported.exit_code == 1, (bad, advised.output, reported.output)
        assert advised.output.count("error:") == reported.output.count("error:") == 1


@pytest.mark.parametrize("full_samples", [2, 3, 6])
def test_the_demos_overcommitted_level_gets_one_verdict_whatever_the_sampling_caught(
        tmp_path: Path, full_samples: int) -> None:
    """The demo's run: max_num_seqs 64 on an engine whose KV cache holds 13 requests of 8,192 tokens
    (108,592 ÷ 8,192 = 13.26); level 16 runs 15 at KV 99 % with a growing queue and preempts twice. How many
    stats samples land inside that level depends on the machine's load; the verdict must not. Running past
    the capacity here is overcommit (max_num_seqs 64 > 13), not a full node, so no node_full finding may
    take the cause: the level's own count (2 preemptions at 16 > 13 ≥ 12) says it."""
    db = tmp_path / "agent.db"
    t0 = 1_800_000_000.0
    steps = [_step(12, t0), _step(16, t0 + 40, preemption_events=2, broke=True, reason="2 preemption(s)")]
    facts = [CapacityFact(t0 - 5, "vllm", name, value) for name, value in
             (("max_num_seqs", 64.0), ("max_model_len", 8192.0), ("kv_cache_tokens", 108_592.0))]
    calm = [ServerStats(t0 + 2 * i, "vllm", Server.VLLM, running=12, waiting=1, kv_usage_ratio=0.89)
            for i in range(12)]
    full = [ServerStats(t0 + 41 + i, "vllm", Server.VLLM, running=15, waiting=2 + i, kv_usage_ratio=0.99)
            for i in range(full_samples)]
    preempted = Event(t0 + 42, "vllm", Server.VLLM, EventKind.PREEMPTION, Severity.WARNING, Phase.RUNTIME,
                      "preempted", {"count": 2}, "vllm", 1)
    store = Store.open(db)
    store.commit([*facts, *calm, *full, preempted], now=t0 + 80)
    store.close()
    findings, categories = judged(db, None, steps, 1.0)
    assert "node_full" not in {f.rule for f in findings}
    text = loadtest_verdict(steps, 13, findings, categories).text
    assert text == "budget says 13, measured safe up to 12, first preemptions at 16: consistent with the budget"
