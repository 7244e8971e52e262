"""Every default rule on a timeline built from records committed to a real store: it fires exactly when it
should, with the right value, and its negative twin does not. Hysteresis and cooldown keep it quiet."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from agent.capacity.capacity import Capacity
from agent.judge.advisor import Advisor
from agent.judge.rules import Rule, load_rules
from agent.records import Event, EventKind, Knob, Phase, Server, ServerStats, Severity
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.verdicts import Direction, Finding

RULES = Path(__file__).parent.parent.parent / "rules"
NOW = 1_800_000_000.0
E = "vllm-0"
CAP = Capacity(E, 8192, paper_max_concurrency=13)


def rules() -> tuple[Rule, ...]:
    return load_rules([RULES]).rules


def stats(n: int, *, running: int, waiting: int, kv: float, step: float = 10.0, preemptions: int | None = None,
          kv_used_tokens: Iterable[int] | None = None, waiting_growth: bool = False) -> list[ServerStats]:
    used = list(kv_used_tokens) if kv_used_tokens is not None else [None] * n
    return [ServerStats(NOW - (n - i) * step, E, Server.VLLM, running=running,
                        waiting=waiting * (i + 1) if waiting_growth else waiting, kv_usage_ratio=kv,
                        preemptions=preemptions, kv_used_tokens=used[i]) for i in range(n)]


def events(kind: EventKind, n: int, *, phase: Phase = Phase.RUNTIME, step: float = 10.0,
           **fields: str | int) -> list[Event]:
    return [Event(NOW - (n - i) * step, E, Server.VLLM, kind, Severity.ERROR, phase, f"{kind.value} #{i}",
                  dict(fields), f"/logs/{E}.log", 10_000 * (1 + list(EventKind).index(kind)) + i) for i in range(n)]


def judge(records: list[ServerStats | Event], config: dict[str, float | None], cap: Capacity = CAP,
          now: float = NOW) -> dict[str, Finding]:
    store = Store.open(":memory:")
    store.commit(records, now=now)
    advisor = Advisor(rules(), 15.0, config)
    found = advisor.step(now, Queries(store), {E: cap}, [E])
    return {f.rule: f for f in found if f.active}


def test_oom_with_kv_full_lowers_max_num_seqs_to_the_bound() -> None:
    got = judge([*stats(6, running=20, waiting=3, kv=0.97), *events(EventKind.OOM, 1)], {"max_num_seqs": 32})
    f = got["oom_kv_at_limit"]
    assert (f.knob, f.direction, f.current, f.recommended) == (Knob.MAX_NUM_SEQS, Direction.LOWER, 32, 13)
    assert "capacity bound = 13" in f.arithmetic and "oom_activation_peak" not in got


def test_oom_with_kv_half_empty_lowers_gpu_memory_utilization_not_concurrency() -> None:
    got = judge([*stats(6, running=4, waiting=0, kv=0.40), *events(EventKind.OOM, 2)],
                {"max_num_seqs": 13, "gpu_memory_utilization": 0.95})
    f = got["oom_activation_peak"]
    assert (f.knob, f.direction, f.recommended) == (Knob.GPU_MEMORY_UTILIZATION, Direction.LOWER, 0.9)
    assert "oom_kv_at_limit" not in got


def test_preemption_storm_lowers_to_what_kv_holds_at_the_observed_length() -> None:
    cap = Capacity(E, 8192, paper_max_concurrency=13, engine_max_concurrency=12.0, engine_kv_cache_tokens=100_000)
    recs = [*stats(12, running=24, waiting=4, kv=0.98, kv_used_tokens=[98_000] * 12),
            *events(EventKind.PREEMPTION, 20, step=10.0)]
    got = judge(recs, {"max_num_seqs": 32}, cap)
    f = got["preemption_storm"]
    # 98,000 tokens / 24 running = 4,083 per surviving request, shorter than the budget's 8,192: the budget's
    # length governs, floor(100,000 ÷ 8,192) = 12 — the same number max_num_seqs_above_bound gives (not 22)
    assert (f.direction, f.recommended) == (Direction.LOWER, 12)
    assert got["max_num_seqs_above_bound"].recommended == 12
    assert f.evidence["request_tokens_p95"] == pytest.approx(4083.3333, rel=1e-4)


def test_preemption_storm_sizes_from_requests_longer_than_the_budget() -> None:
    cap = Capacity(E, 2048, paper_max_concurrency=40, engine_max_concurrency=48.8, engine_kv_cache_tokens=100_000)
    recs = [*stats(12, running=20, waiting=4, kv=0.98, kv_used_tokens=[98_000] * 12),
            *events(EventKind.PREEMPTION, 20, step=10.0)]
    f = judge(recs, {"max_num_seqs": 32}, cap)["preemption_storm"]
    # 98,000 ÷ 20 = 4,900 tokens per request > 2,048: rounded up to 16-token blocks 4,912; floor(100,000 ÷ 4,912) = 20
    assert (f.direction, f.recommended) == (Direction.LOWER, 20)


def test_a_retraction_a_minute_is_not_a_storm() -> None:
    recs = [*stats(12, running=24, waiting=4, kv=0.98), *events(EventKind.PREEMPTION, 4, step=60.0)]
    assert "preemption_storm" not in judge(recs, {"max_num_seqs": 32})


def test_waiting_with_kv_headroom_raises_toward_the_bound_never_above() -> None:
    got = judge(stats(6, running=8, waiting=5, kv=0.50), {"max_num_seqs": 8})
    f = got["kv_headroom_raise_concurrency"]
    # floor(8 × 0.9 / 0.5) = 14, capped at the bound 13
    assert (f.direction, f.current, f.recommended) == (Direction.RAISE, 8, 13)
    assert "capped" in f.arithmetic and "compute_bound_queue" not in got


def test_waiting_with_kv_full_does_not_raise() -> None:
    assert "kv_headroom_raise_concurrency" not in judge(stats(6, running=8, waiting=5, kv=0.93), {"max_num_seqs": 8})


def test_memory_not_full_and_queue_growing_never_recommends_lowering_concurrency() -> None:
    got = judge(stats(9, running=6, waiting=2, kv=0.45, waiting_growth=True), {"max_num_seqs": 13})
    f = got["compute_bound_queue"]
    assert (f.knob, f.direction) == (Knob.REPLICAS, Direction.RAISE)
    assert not any(g.knob is Knob.MAX_NUM_SEQS and g.direction is Direction.LOWER for g in got.values())
    assert "do not raise max_num_seqs" in f.message


def test_bursts_that_wait_a_step_for_prefill_are_not_compute_bound() -> None:
    # a closed-loop client at 4: each new burst waits a step for its prefill, the queue is empty otherwise
    # (the demo's low load levels); the bursts grow, but a queue in a minority of samples is no saturation
    waiting = [0, 1, 0, 0, 0, 0, 0, 3, 0, 0, 0, 6]
    timeline = [ServerStats(NOW - (len(waiting) - i) * 1.0, E, Server.VLLM, running=4 if w == 0 else 1, waiting=w,
                            kv_usage_ratio=0.28) for i, w in enumerate(waiting)]
    assert "compute_bound_queue" not in judge(timeline, {"max_num_seqs": 64})
    persistent = [ServerStats(s.ts, E, Server.VLLM, running=4, waiting=w + 2, kv_usage_ratio=0.28)
                  for s, w in zip(timeline, waiting, strict=True)]
    assert "compute_bound_queue" in judge(persistent, {"max_num_seqs": 64})


def test_flat_queue_with_headroom_is_not_compute_bound() -> None:
    assert "compute_bound_queue" not in judge(stats(9, running=6, waiting=0, kv=0.45), {"max_num_seqs": 13})


def test_rejections_with_kv_headroom_raise_the_queue_else_replicas() -> None:
    headroom = judge([*stats(6, running=8, waiting=0, kv=0.5), *events(EventKind.HTTP_503, 6)],
                     {"max_queue_size": 32})
    assert headroom["rejections_with_kv_headroom"].recommended == 64
    assert "rejections_kv_saturated" not in headroom
    full = judge([*stats(6, running=13, waiting=9, kv=0.9), *events(EventKind.HTTP_429, 6)], {"max_queue_size": 32})
    assert full["rejections_kv_saturated"].knob is Knob.REPLICAS and "rejections_with_kv_headroom" not in full


def test_request_deadlines_raise_the_timeout_and_queue_deadlines_are_told_apart() -> None:
    gen = judge(events(EventKind.DEADLINE_EXCEEDED, 4, phase=Phase.GENERATION, scope="request", tokens=300),
                {"request_timeout_ms": 30000})
    f = gen["deadline_during_generation"]
    assert (f.recommended, f.evidence["timeout_tokens_p95"]) == (45000, 300)
    assert "queue_timeouts" not in gen
    queue = judge(events(EventKind.DEADLINE_EXCEEDED, 2, phase=Phase.QUEUE, scope="request"), {})
    assert "queue_timeouts" in queue and "deadline_during_generation" not in queue


def test_long_outputs_near_the_cap_while_others_wait_lower_the_cap() -> None:
    recs = [*stats(6, running=13, waiting=4, kv=0.7),
            *events(EventKind.DEADLINE_EXCEEDED, 3, phase=Phase.GENERATION, scope="request", tokens=1000)]
    f = judge(recs, {"max_output_tokens": 1024, "request_timeout_ms": 30000})["long_outputs_hold_slots"]
    assert (f.knob, f.direction, f.recommended) == (Knob.MAX_OUTPUT_TOKENS, Direction.LOWER, 512)
    short = [*stats(6, running=13, waiting=4, kv=0.7),
             *events(EventKind.DEADLINE_EXCEEDED, 3, phase=Phase.GENERATION, scope="request", tokens=200)]
    assert "long_outputs_hold_slots" not in judge(short, {"max_output_tokens": 1024})


def test_climbing_request_length_caps_the_session() -> None:
    climbing = [2000 * 4 + i * 6000 for i in range(12)]  # tokens held by 4 running requests, growing
    recs = stats(12, running=4, waiting=0, kv=0.6, step=120.0, kv_used_tokens=climbing)
    f = judge(recs, {"max_session_tokens": 32768})["session_length_climbing"]
    assert (f.knob, f.direction, f.recommended) == (Knob.MAX_SESSION_TOKENS, Direction.LOWER, 8192)
    flat = stats(12, running=4, waiting=0, kv=0.6, step=120.0, kv_used_tokens=[20_000] * 12)
    assert "session_length_climbing" not in judge(flat, {"max_session_tokens": 32768})


def test_engine_timeouts_name_the_knob_that_fired() -> None:
    got = judge(events(EventKind.DEADLINE_EXCEEDED, 1, scope="engine", knob="VLLM_RPC_TIMEOUT"), {})
    assert set(got) == {"engine_rpc_timeout"} and got["engine_rpc_timeout"].knob is Knob.VLLM_RPC_TIMEOUT


def test_static_rules_bound_and_disagreement() -> None:
    cap = Capacity(E, 8192, paper_max_concurrency=13, engine_max_concurrency=17.2)
    got = judge([], {"max_num_seqs": 256}, cap)
    assert got["max_num_seqs_above_bound"].recommended == 17  # the engine's figure governs
    assert "engine 17.20x vs paper 13" in got["capacity_disagrees"].arithmetic
    assert not judge([], {"max_num_seqs": 12}, Capacity(E, 8192, paper_max_concurrency=13,
                                                         engine_max_concurrency=13.5))


def test_no_data_fires_nothing() -> None:
    assert judge([], {"max_num_seqs": 8}) == {}


def test_a_finding_neither_flaps_nor_repeats() -> None:
    store = Store.open(":memory:")
    store.commit([*stats(6, running=20, waiting=3, kv=0.97), *events(EventKind.OOM, 1)], now=NOW)
    advisor = Advisor(rules(), 15.0, {"max_num_seqs": 32})
    q = Queries(store)
    first = advisor.step(NOW, q, {E: CAP}, [E])
    assert sorted(f.rule for f in first) == ["max_num_seqs_above_bound", "oom_kv_at_limit"]
    assert advisor.step(NOW + 15, q, {E: CAP}, [E]) == []  # still true: not repeated
    later = NOW + 3600  # the OOM left the window: cleared only after clear_after (2) misses
    assert advisor.step(later, q, {E: CAP}, [E]) == []
    cleared = advisor.step(later + 15, q, {E: CAP}, [E])
    assert [(f.rule, f.active, f.since) for f in cleared] == [("oom_kv_at_limit", False, NOW)]
    assert [f.rule for f in advisor.active()] == ["max_num_seqs_above_bound"]  # static: still true


@pytest.mark.parametrize(("knob", "rule"), [("VLLM_ENGINE_ITERATION_TIMEOUT_S", "engine_iteration_timeout"),
                                            ("VLLM_RPC_TIMEOUT", "engine_rpc_timeout"),
                                            ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "engine_execute_model_timeout"),
                                            ("watchdog_timeout", "engine_watchdog_timeout"),
                                            ("OLLAMA_LOAD_TIMEOUT", "engine_load_timeout")])
def test_each_engine_timeout_names_its_own_knob_and_no_request_rule_fires(knob: str, rule: str) -> None:
    got = judge(events(EventKind.DEADLINE_EXCEEDED, 3, scope="engine", knob=knob), {"request_timeout_ms": 30000})
    assert set(got) == {rule}
    assert (got[rule].knob, got[rule].direction) == (Knob(knob), Direction.RAISE)


def test_oom_with_the_card_full_by_nvml_lowers_concurrency() -> None:
    from agent.records import GpuSample

    gpu = [GpuSample(NOW - 30, 0, "GPU-1", "NVIDIA L4", None, 24 << 30, None, 1 << 28, (24 << 30) - (1 << 28),
                     0.9, 0.8, 60.0, 70.0, 72.0)]
    store = Store.open(":memory:")
    store.commit([*gpu, *events(EventKind.OOM, 1)], now=NOW)
    found = Advisor(rules(), 15.0, {"max_num_seqs": 32}).step(NOW, Queries(store), {E: CAP}, [E])
    f = next(f for f in found if f.rule == "oom_kv_at_limit")
    assert f.recommended == 13 and f.evidence["card_gpu_memory_used_ratio_max"] == pytest.approx(0.9896, abs=1e-4)


def test_a_finding_that_clears_waits_out_its_cooldown() -> None:
    rule = replace_rule("oom_kv_at_limit", cooldown=600.0)
    store = Store.open(":memory:")
    store.commit([*stats(3, running=20, waiting=3, kv=0.97), *events(EventKind.OOM, 1)], now=NOW)
    advisor = Advisor((rule,), 15.0, {})
    q = Queries(store)
    assert len(advisor.step(NOW, q, {E: CAP}, [E])) == 1
    later = NOW + 700  # out of the 10-minute window: two misses clear it
    advisor.step(later, q, {E: CAP}, [E])
    assert [f.active for f in advisor.step(later + 15, q, {E: CAP}, [E])] == [False]
    again = Event(later + 30, E, Server.VLLM, EventKind.OOM, Severity.ERROR, Phase.RUNTIME, "oom again", {},
                  f"/logs/{E}.log", 99_999)
    store.commit([again], now=later + 30)  # a new OOM at once
    store.commit([ServerStats(later + 30, E, Server.VLLM, running=20, waiting=3, kv_usage_ratio=0.97)], now=later + 30)
    assert advisor.step(later + 45, q, {E: CAP}, [E]) == [], "inside the cooldown: not again"
    assert [f.active for f in advisor.step(later + 15 + 601, q, {E: CAP}, [E])] == [True]


def replace_rule(name: str, **changes: float) -> Rule:
    rule = next(r for r in rules() if r.name == name)
    return rule.model_copy(update=changes)


def test_active_findings_are_exported_and_cleared_ones_are_not() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from agent.judge.precedence import reconcile
    from agent.prom import exposition_samples
    from agent.sinks.exporter import Snapshot, SnapshotCollector

    on = Finding(NOW, NOW, "oom_kv_at_limit", E, Severity.CRITICAL, "m", Knob.MAX_NUM_SEQS, Direction.LOWER, 32, 13)
    # a second active finding on the same knob: lowering to 13 to stop OOMs governs raising to 48
    raise_ = Finding(NOW, NOW, "kv_headroom_raise_concurrency", E, Severity.INFO, "m", Knob.MAX_NUM_SEQS,
                     Direction.RAISE, 32, 48)
    off = Finding(NOW, NOW, "queue_timeouts", E, Severity.WARNING, "m", Knob.QUEUE_TIMEOUT_MS, active=False)
    findings = [on, raise_, off]
    governing = [r.governs for r in reconcile(findings)]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: Snapshot(version="1", started_at=0.0, findings=findings,
                                                         governing=governing)))
    samples = exposition_samples(generate_latest(registry).decode())
    assert sorted(samples["deepinfer_finding_active"], key=lambda s: s[0]["rule"]) == [
        ({"rule": "kv_headroom_raise_concurrency", "engine": E, "severity": "info"}, 1.0),
        ({"rule": "oom_kv_at_limit", "engine": E, "severity": "critical"}, 1.0)]
    assert samples["deepinfer_recommended_value"] == [
        ({"rule": "oom_kv_at_limit", "engine": E, "knob": "max_num_seqs"}, 13.0)], "one number per knob"


def test_the_kernel_log_is_not_an_engine() -> None:
    store = Store.open(":memory:")
    xid = Event(NOW, "kernel", Server.KERNEL, EventKind.XID, Severity.CRITICAL, Phase.RUNTIME, "Xid 79", {"xid": 79},
                "/dev/kmsg", 1)
    store.commit([xid, *events(EventKind.OOM, 1)], now=NOW)
    assert Queries(store).engines() == [E]


@pytest.mark.parametrize("knob", ["SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"])
def test_a_disaggregation_timeout_is_no_reason_for_a_longer_request_timeout(knob: str) -> None:
    # SGLang's prefill and decode sides time a request out waiting for each other's KV transfer: the engine's own
    # limit (scope engine) fired before any token, while capacity on the other side ran short. By the method a
    # request that timed out with no token waited in a queue: the queue is slow, a longer timeout does not help.
    got = judge(events(EventKind.DEADLINE_EXCEEDED, 3, phase=Phase.QUEUE, scope="engine", knob=knob,
                       timeout_by="engine", timeout_on="queue", tokens_produced=0), {"request_timeout_ms": 30000})
    assert {(rule, f.knob, f.direction) for rule, f in got.items()} == {
        ("queue_timeouts", Knob.QUEUE_TIMEOUT_MS, Direction.REVIEW)}
