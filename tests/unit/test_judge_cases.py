"""The case library: incidents across the engines, each with the budget method's arithmetic written out by
hand, judged end to end (records committed to a real store, the shipped rules, the advisor, the precedence
and the headline). Each case states the knob, the direction, the number and the headline category the
method gives — derived in the comment beside it, never read from what the code prints — and most have a
twin that must NOT give it (healthy busy nodes, bursts, warm-up ramps, noise that quotes error text).

`test_the_library_size_per_category` prints and checks the size per category (`pytest -s` shows it).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.capacity.capacity import Capacity, capacity_of
from agent.cli import app
from agent.judge.advisor import Advisor, engine_config
from agent.judge.precedence import Recommendation, headline, reconcile
from agent.judge.rules import load_rules
from agent.records import CapacityFact, Event, EventKind, Knob, Phase, RequestSample, Server, ServerStats, Severity
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.verdicts import Direction, Finding

RULES = load_rules([Path(__file__).parent.parent.parent / "rules"]).rules
CATEGORIES = {r.name: r.category for r in RULES}
NOW = 1_800_000_000.0
E = "engine-0"
GIB = 2**30
MIB = 2**20

Record = ServerStats | Event | CapacityFact | RequestSample


def stats(rows: Sequence[tuple[int, int, float | None]], *, server: Server = Server.VLLM, step: float = 10.0,
          preemptions: int | None = None, used: Sequence[int] | None = None,
          gen_tps: float | None = None) -> list[ServerStats]:
    """One stats sample per (running, waiting, KV ratio), `step` seconds apart, the last just before NOW."""
    return [ServerStats(NOW - (len(rows) - i) * step, E, server, running=r, waiting=w, kv_usage_ratio=kv,
                        gen_tps=gen_tps, preemptions=preemptions, kv_used_tokens=used[i] if used is not None else None)
            for i, (r, w, kv) in enumerate(rows)]


def durations(seconds: Sequence[float], *, status: int = 200) -> list[RequestSample]:
    """One finished request per duration (an access line's `rt=`), 5 s apart, the last just before NOW."""
    return [RequestSample(NOW - (len(seconds) - i) * 5.0, E, Server.VLLM, d, status, f"/logs/{E}.log", next(_offset))
            for i, d in enumerate(seconds)]


_offset = iter(range(1, 10**9))


def events(kind: EventKind, n: int, *, phase: Phase = Phase.RUNTIME, server: Server = Server.VLLM,
           step: float = 10.0, message: str = "", **fields: str | int | float) -> list[Event]:
    return [Event(NOW - (n - i) * step, E, server, kind, Severity.ERROR, phase, message or kind.value, dict(fields),
                  f"/logs/{E}.log", next(_offset)) for i in range(n)]


def fact(name: str, value: float) -> CapacityFact:
    return CapacityFact(NOW - 900.0, E, name, value)


def engine_cap(kv_tokens: float, length: int, **extra: object) -> Capacity:
    """What capacity_of gives for an engine that printed its KV-cache size: kv_tokens ÷ length requests."""
    return Capacity(E, length, None, kv_tokens / length, kv_tokens, **extra)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    """One incident: records, config, capacity; what the method says (None: no such recommendation)."""

    name: str
    category: str  # the library's grouping, for its size report
    records: Sequence[Record]
    config: dict[str, float | None]
    cap: Capacity | None
    knob: Knob | None = None
    direction: Direction | None = None
    number: float | None = None  # the governing recommendation's value; None: no number (said so)
    headline: str | None = None  # the verdict's category; None: no finding at all
    absent: tuple[str, ...] = ()  # rules that must not fire
    no_knob: tuple[tuple[Knob, Direction], ...] = ()  # recommendations that must not be given
    words: tuple[str, ...] = ()  # text the governing finding's message must carry
    governed_by: str | None = None
    twin: bool = False  # a negative twin (healthy, noise, a near miss)
    extra: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    findings: list[Finding]
    recommendations: list[Recommendation]

    def rec(self, knob: Knob) -> Recommendation | None:
        return next((r for r in self.recommendations if r.knob is knob), None)

    @property
    def rules(self) -> set[str]:
        return {f.rule for f in self.findings}


def judge(records: Sequence[Record], config: dict[str, float | None], cap: Capacity | None) -> Outcome:
    store = Store.open(":memory:")
    store.commit(records, now=NOW)
    queries = Queries(store)
    advisor = Advisor(RULES, 15.0, config, log_findings=False)
    found = [f for f in advisor.step(NOW, queries, {E: cap} if cap else {}, [E],
                                     engine_config(queries.latest_facts())) if f.active]
    return Outcome(found, reconcile(found))


CAP13 = engine_cap(106_496, 8192)  # 106,496 KV tokens ÷ 8,192 = 13.0 requests at max_model_len
CASES: list[Case] = [
    # ---- KV exhausted: OOM and preemption ------------------------------------------------------------------
    Case("vllm_oom_kv_full", "oom",
         [*stats([(20, 3, 0.97)] * 6), *events(EventKind.OOM, 1)], {"max_num_seqs": 32}, CAP13,
         # KV 97 % ≥ 90 %: the pool was full; the bound is floor(106,496 ÷ 8,192) = 13; lower 32 → 13 (critical
         # oom_kv_at_limit governs; max_num_seqs_above_bound says the same 13)
         Knob.MAX_NUM_SEQS, Direction.LOWER, 13, "kv_exhausted", absent=("oom_activation_peak",),
         governed_by="oom_kv_at_limit", words=("--max-num-seqs",)),
    Case("vllm_oom_at_61_percent_kv", "oom",
         [*stats([(8, 0, 0.61)] * 6), *events(EventKind.OOM, 1)],
         {"max_num_seqs": 8, "gpu_memory_utilization": 0.92}, CAP13,
         # KV 61 % < 90 %: vLLM pre-allocates its pool, so the activation peak overflowed; 0.92 × 0.95 = 0.874 → 0.87
         Knob.GPU_MEMORY_UTILIZATION, Direction.LOWER, 0.87, "activation_peak",
         absent=("oom_kv_at_limit",), no_knob=((Knob.MAX_NUM_SEQS, Direction.LOWER),)),
    Case("vllm_oom_activation_with_seqs_above_bound", "oom",
         [*stats([(8, 0, 0.61)] * 6), *events(EventKind.OOM, 2)],
         {"max_num_seqs": 32, "gpu_memory_utilization": 0.90}, CAP13,
         # the headline is the activation peak (0.90 × 0.95 = 0.855 → 0.85 or 0.86 by rounding half-even: 0.855
         # is 0.85499… in binary → 0.85); max_num_seqs 32 > 13 is a separate, static finding
         Knob.GPU_MEMORY_UTILIZATION, Direction.LOWER, 0.85, "activation_peak"),
    Case("vllm_oom_after_the_kv_pool_drained", "oom",
         [*stats([(13, 2, 0.95)] * 6 + [(8, 0, 0.55)] * 6), *events(EventKind.OOM, 1)],
         {"max_num_seqs": 13, "gpu_memory_utilization": 0.90}, CAP13,
         # KV was 95 % a minute before, 55 % in the sample nearest the OOM (same second): at the moment of the
         # OOM the pool was not full — the activation peak, 0.90 × 0.95 = 0.855 → 0.85; never "KV exhausted"
         Knob.GPU_MEMORY_UTILIZATION, Direction.LOWER, 0.85, "activation_peak", absent=("oom_kv_at_limit",)),
    Case("vllm_oom_with_the_kv_pool_full_at_that_moment", "oom",
         [*stats([(8, 0, 0.55)] * 6 + [(13, 2, 0.93)] * 2), *events(EventKind.OOM, 1)],
         {"max_num_seqs": 32}, CAP13,
         # the sample nearest the OOM says 93 % ≥ 90 %: the pool was full; lower 32 → floor(106,496 ÷ 8,192) = 13
         Knob.MAX_NUM_SEQS, Direction.LOWER, 13, "kv_exhausted", absent=("oom_activation_peak",)),
    Case("vllm_preemption_storm_v1_stats", "preemption",
         stats([(24, 4, 0.98)] * 12, preemptions=30, used=[98_000] * 12), {"max_num_seqs": 32}, CAP13,
         # 12 samples × 30 = 360 preemptions in 5 min = 72/min > 1 at KV p95 98 %. Survivors hold 98,000 ÷ 24 =
         # 4,083 tokens < 8,192: the budget's length governs, floor(106,496 ÷ 8,192) = 13 — the same as the bound
         Knob.MAX_NUM_SEQS, Direction.LOWER, 13, "kv_exhausted"),
    Case("vllm_v0_preemption_warnings_count_50", "preemption",
         [*stats([(24, 2, 0.97)] * 6), *events(EventKind.PREEMPTION, 4, step=60.0, count=50)],
         {"max_num_seqs": 32}, CAP13,
         # V0 warns once per 50 preemptions: 4 lines × 50 = 200 in 5 min = 40/min (4 lines would be 0.8/min)
         Knob.MAX_NUM_SEQS, Direction.LOWER, 13, "kv_exhausted", governed_by=None),
    Case("vllm_v0_four_single_preemptions_twin", "preemption",
         [*stats([(10, 0, 0.97)] * 6), *events(EventKind.PREEMPTION, 4, step=60.0, count=1)],
         {"max_num_seqs": 13}, CAP13,
         # 4 preemptions in 5 min = 0.8/min ≤ 1: not a storm; max_num_seqs 13 = the bound: nothing to lower
         absent=("preemption_storm",), no_knob=((Knob.MAX_NUM_SEQS, Direction.LOWER),), twin=True),
    Case("sglang_retraction_storm_longer_requests", "preemption",
         [*stats([(40, 6, 0.96)] * 6, server=Server.SGLANG),
          *events(EventKind.PREEMPTION, 12, server=Server.SGLANG, count=3)],
         {"max_num_seqs": 64}, engine_cap(200_000, 4096),
         # 12 × 3 = 36 retractions in 5 min = 7.2/min. Per running request 0.96 × 200,000 ÷ 40 = 4,800 tokens >
         # 4,096: the observed length governs, 4,800 is whole blocks; floor(200,000 ÷ 4,800) = 41, under the
         # bound floor(200,000 ÷ 4,096) = 48 that max_num_seqs_above_bound gives: the cautious 41 governs
         Knob.MAX_NUM_SEQS, Direction.LOWER, 41, "kv_exhausted", governed_by="preemption_storm",
         words=("--max-running-requests",)),
    Case("sglang_one_retraction_twin", "preemption",
         [*stats([(20, 0, 0.96)] * 6, server=Server.SGLANG),
          *events(EventKind.PREEMPTION, 1, server=Server.SGLANG, count=1)],
         {"max_num_seqs": 40}, engine_cap(200_000, 4096),
         # 1 in 5 min = 0.2/min: no storm; 40 < 48: no bound finding either
         headline=None, absent=("preemption_storm",), twin=True),
    # ---- sizing: worst case vs expected case --------------------------------------------------------------
    Case("healthy_busy_node_expected_case_governs", "healthy",
         stats([(90, 0, 0.86)] * 8), {"max_num_seqs": 96, "workload_tokens": 2012}, engine_cap(262_144, 32768),
         # worst: floor(262,144 ÷ 32,768) = 8; expected: P95 1,500 + cap 512 = 2,012 → 2,016 in blocks,
         # floor(262,144 ÷ 2,016) = 130. The workload is known: 130 governs; 96 ≤ 130, nothing to lower
         headline=None, no_knob=((Knob.MAX_NUM_SEQS, Direction.LOWER),), twin=True),
    Case("unknown_workload_worst_case_governs", "sizing",
         stats([(90, 0, 0.86)] * 8), {"max_num_seqs": 96}, engine_cap(262_144, 32768),
         # no workload: only the worst case, floor(262,144 ÷ 32,768) = 8, governs; lower 96 → 8
         Knob.MAX_NUM_SEQS, Direction.LOWER, 8, None, governed_by="max_num_seqs_above_bound"),
    Case("expected_case_below_max_num_seqs", "sizing",
         [], {"max_num_seqs": 256, "workload_tokens": 4096 + 1024}, engine_cap(400_000, 32768),
         # expected: 5,120 tokens (whole blocks), floor(400,000 ÷ 5,120) = 78; 256 > 78: lower 256 → 78
         Knob.MAX_NUM_SEQS, Direction.LOWER, 78, None),
    # ---- queueing: raise only when the queue formed while every slot ran with KV room --------------------------
    Case("queue_with_slots_full_and_kv_room", "queueing",
         stats([(8, 5, 0.50)] * 6), {"max_num_seqs": 8}, CAP13,
         # 6 joint samples (waiting 5, running 8 = max_num_seqs, KV 50 %): floor(8 × 0.9 ÷ 0.50) = 14, capped at 13
         Knob.MAX_NUM_SEQS, Direction.RAISE, 13, "queueing"),
    Case("queue_raise_blocked_after_an_oom_twin", "queueing",
         [*stats([(8, 5, 0.50)] * 6), *events(EventKind.OOM, 1)],
         {"max_num_seqs": 8, "gpu_memory_utilization": 0.9}, CAP13,
         # the same queue right after an OOM: never raise; the OOM at KV 50 % is the activation peak, 0.9 × 0.95 = 0.855
         Knob.GPU_MEMORY_UTILIZATION, Direction.LOWER, 0.85, "activation_peak",
         absent=("kv_headroom_raise_concurrency",), no_knob=((Knob.MAX_NUM_SEQS, Direction.RAISE),), twin=True),
    Case("waits_while_slots_were_free_twin", "queueing",
         stats([(4, 3, 0.5), (4, 3, 0.5), (4, 3, 0.5), (8, 0, 0.5), (8, 0, 0.5), (8, 0, 0.5)]), {"max_num_seqs": 8},
         CAP13,
         # waiting > 0 only while 4 of 8 ran; all 8 ran only with nobody waiting: 0 joint samples — no raise
         absent=("kv_headroom_raise_concurrency",), twin=True),
    Case("prefill_bursts_twin", "queueing",
         stats([(4, 0, 0.28), (1, 1, 0.28), (4, 0, 0.28), (4, 0, 0.28), (1, 3, 0.28), (4, 0, 0.28)]),
         {"max_num_seqs": 64}, CAP13,
         # a request waits a step for its prefill in 2 of 6 samples: waiting p50 = 0, no queue
         headline=None, absent=("compute_bound_queue", "kv_headroom_raise_concurrency"), twin=True),
    Case("compute_bound_queue", "queueing",
         stats([(6, w, 0.45) for w in (2, 2, 4, 4, 6, 8, 8, 10, 12)]), {"max_num_seqs": 13}, CAP13,
         # a queue in every sample with 6 of 13 running and KV 45 %: growth = mean(8,10,12) ÷ mean(2,2,4) − 1 = 2.75
         Knob.REPLICAS, Direction.RAISE, None, "queueing", no_knob=((Knob.MAX_NUM_SEQS, Direction.RAISE),
                                                                    (Knob.MAX_NUM_SEQS, Direction.LOWER))),
    # ---- node full ------------------------------------------------------------------------------------------------
    Case("node_full", "node_full",
         stats([(13, w, 0.91) for w in (2, 4, 6, 8, 10, 12)]), {"max_num_seqs": 13}, CAP13,
         # 13 = the bound run, KV 91 %, a queue in all 6; growth mean(10,12) ÷ mean(2,4) − 1 = 2.67;
         # replicas = ceil((13 running + 12 waiting) ÷ 13) = ceil(1.92) = 2; never a higher max_num_seqs
         Knob.REPLICAS, Direction.RAISE, 2, "node_full", no_knob=((Knob.MAX_NUM_SEQS, Direction.RAISE),)),
    Case("overcommitted_node_is_not_full_twin", "node_full",
         stats([(15, w, 0.99) for w in (1, 1, 2, 3, 3, 4)]), {"max_num_seqs": 64}, CAP13,
         # 15 run where the budget holds 13, KV 99 %, the queue grows (mean(3, 4) ÷ mean(1, 1) − 1 = 2.5): but
         # max_num_seqs 64 > 13 lets the engine overcommit (it preempts) — not a full node, no replicas; the
         # answer is lower 64 → floor(106,496 ÷ 8,192) = 13
         Knob.MAX_NUM_SEQS, Direction.LOWER, 13, None, absent=("node_full",),
         no_knob=((Knob.REPLICAS, Direction.RAISE),), twin=True),
    Case("node_busy_flat_queue_twin", "node_full",
         stats([(13, 3, 0.91)] * 6), {"max_num_seqs": 13}, CAP13,
         # a flat queue of 3 (growth 0): full but keeping up — no node_full, and no raise at KV 91 %
         absent=("node_full", "kv_headroom_raise_concurrency"), twin=True),
    # ---- refusals -----------------------------------------------------------------------------------------------
    Case("vllm_503_with_kv_room", "refusals",
         [*stats([(8, 0, 0.5)] * 6), *events(EventKind.HTTP_503, 6)], {"max_queue_size": 32, "max_num_seqs": 8},
         CAP13,
         # 6 refusals ≥ 5 with KV p95 50 % < 80 %: the admission limit binds; 32 × 2 = 64
         Knob.MAX_QUEUE_SIZE, Direction.RAISE, 64, "rejections"),
    Case("vllm_503_kv_saturated", "refusals",
         [*stats([(13, 4, 0.85)] * 6), *events(EventKind.HTTP_503, 6)], {"max_queue_size": 32, "max_num_seqs": 13},
         CAP13,
         # KV p95 85 % ≥ 80 %: saturated; more queue only waits — replicas
         Knob.REPLICAS, Direction.RAISE, None, "rejections", no_knob=((Knob.MAX_QUEUE_SIZE, Direction.RAISE),)),
    Case("refusals_counted_from_fields_count", "refusals",
         [*stats([(8, 0, 0.5)] * 6), *events(EventKind.HTTP_429, 1, count=20)], {"max_queue_size": 16,
                                                                                   "max_num_seqs": 8}, CAP13,
         # one scrape delta standing for 20 refusals ≥ 5: 16 × 2 = 32
         Knob.MAX_QUEUE_SIZE, Direction.RAISE, 32, "rejections"),
    Case("four_refusals_twin", "refusals",
         [*stats([(8, 0, 0.5)] * 6), *events(EventKind.HTTP_429, 4)], {"max_queue_size": 16, "max_num_seqs": 8},
         CAP13,
         # 4 < 5: no refusal finding
         headline=None, absent=("rejections_with_kv_headroom",), twin=True),
    Case("refusals_with_no_sample_near_them_twin", "refusals",
         [*stats([(8, 0, 0.5)] * 6),
          *(Event(NOW - 400 + 10 * i, E, Server.VLLM, EventKind.HTTP_503, Severity.ERROR, Phase.ADMISSION, "503", {},
                  f"/logs/{E}.log", next(_offset)) for i in range(6))],
         {"max_queue_size": 32, "max_num_seqs": 8}, CAP13,
         # six 503s 340–400 s ago, the stats samples 10–60 s ago: no sample within 30 s of any refusal, so
         # what KV was when they were refused is unknown — neither "KV had room" nor "saturated"
         absent=("rejections_with_kv_headroom", "rejections_kv_saturated"), twin=True),
    Case("llamacpp_busy_slots_below_budget", "refusals",
         events(EventKind.QUEUE_FULL, 8, server=Server.LLAMACPP), {"max_num_seqs": 4},
         Capacity(E, 4096, paper_max_concurrency=12),
         # llama.cpp logs no KV usage: 8 refusals with 4 slots where the paper budget holds 12 → -np 4 → 12
         Knob.MAX_NUM_SEQS, Direction.RAISE, 12, "rejections", words=("-np", "OLLAMA_NUM_PARALLEL")),
    Case("tgi_refusals_slots_below_budget", "refusals",
         events(EventKind.HTTP_429, 6, server=Server.TGI), {"max_num_seqs": 8},
         Capacity(E, 4096, paper_max_concurrency=20),
         # TGI: 6 429s, 8 concurrent requests allowed where the budget holds 20 → 8 → 20
         Knob.MAX_NUM_SEQS, Direction.RAISE, 20, "rejections", words=("--max-concurrent-requests",)),
    Case("llamacpp_more_slots_fit_the_workload", "refusals",
         [*events(EventKind.QUEUE_FULL, 8, server=Server.LLAMACPP), fact("max_num_seqs", 4)],
         {"max_num_seqs": 4, "workload_tokens": 1024 + 512},
         capacity_of(None, {"kv_cache_tokens": 16_384, "max_model_len": 4096}, E),
         # llama.cpp splits -c 16,384 over -np 4 slots of 4,096: its "capacity" at 4,096 is the slot count, 4.
         # The workload needs 1,024 + 512 = 1,536 tokens (96 blocks): floor(16,384 ÷ 1,536) = 10 slots fit in
         # the same -c; -np 4 → 10 (each slot then holds 1,638 ≥ 1,536)
         Knob.MAX_NUM_SEQS, Direction.RAISE, 10, "rejections", words=("-np",)),
    Case("llamacpp_slots_at_budget_twin", "refusals",
         events(EventKind.QUEUE_FULL, 8, server=Server.LLAMACPP), {"max_num_seqs": 12},
         Capacity(E, 4096, paper_max_concurrency=12),
         # 12 slots = the budget's 12: more slots do not fit — no raise
         headline=None, no_knob=((Knob.MAX_NUM_SEQS, Direction.RAISE),), twin=True),
    # ---- timeouts by phase -----------------------------------------------------------------------------------
    Case("deadline_during_generation", "timeouts",
         [*stats([(6, 0, 0.4)] * 6), *events(EventKind.DEADLINE_EXCEEDED, 4, phase=Phase.GENERATION,
                                              scope="request", tokens=350)],
         {"request_timeout_ms": 30_000, "max_num_seqs": 8}, CAP13,
         # 4 timeouts after 350 tokens each: generation; no scrape → 30,000 × 1.5 = 45,000 ms
         Knob.REQUEST_TIMEOUT_MS, Direction.RAISE, 45_000, "timeouts"),
    Case("deadline_with_zero_tokens_is_the_queue", "timeouts",
         [*stats([(8, 6, 0.4)] * 6), *events(EventKind.DEADLINE_EXCEEDED, 4, phase=Phase.GENERATION,
                                              scope="request", tokens=0)],
         {"request_timeout_ms": 30_000, "max_num_seqs": 8}, CAP13,
         # completion_tokens = 0: nothing was generated — queued, so a longer request timeout does not help
         Knob.QUEUE_TIMEOUT_MS, Direction.REVIEW, None, "queueing", absent=("deadline_during_generation",),
         no_knob=((Knob.REQUEST_TIMEOUT_MS, Direction.RAISE),)),
    Case("shared_fields_tokens_produced", "timeouts",
         [*stats([(6, 0, 0.4)] * 6), *events(EventKind.DEADLINE_EXCEEDED, 3, phase=Phase.RUNTIME,
                                              scope="request", tokens_produced=120, timeout_by="client",
                                              duration_s=60.0)],
         {"request_timeout_ms": 60_000, "max_num_seqs": 8}, CAP13,
         # tokens_produced 120 > 0 decides generation over the line's phase; 60,000 × 1.5 = 90,000; the 60 s
         # the requests ran is quoted
         Knob.REQUEST_TIMEOUT_MS, Direction.RAISE, 90_000, "timeouts", words=("60",)),
    Case("timeout_on_queue_field", "timeouts",
         [*stats([(8, 4, 0.4)] * 6), *events(EventKind.DEADLINE_EXCEEDED, 2, scope="request",
                                              timeout_on="queue", timeout_by="engine")],
         {"request_timeout_ms": 60_000, "max_num_seqs": 8}, CAP13,
         Knob.QUEUE_TIMEOUT_MS, Direction.REVIEW, None, "queueing",
         no_knob=((Knob.REQUEST_TIMEOUT_MS, Direction.RAISE),)),
    Case("proxy_504_no_queue_is_generation", "timeouts",
         [*stats([(6, 0, 0.4)] * 6), *events(EventKind.DEADLINE_EXCEEDED, 3, scope="request", status=504,
                                              duration_s=30.0)],
         {"request_timeout_ms": 30_000, "max_num_seqs": 8}, CAP13,
         # no token count; nobody waited for a slot in the window: the requests were generating; 30,000 × 1.5
         Knob.REQUEST_TIMEOUT_MS, Direction.RAISE, 45_000, "timeouts", governed_by="timeouts_unplaced"),
    Case("proxy_504_with_a_queue_twin", "timeouts",
         [*stats([(8, 5, 0.4)] * 6), *events(EventKind.DEADLINE_EXCEEDED, 3, scope="request", status=504)],
         {"request_timeout_ms": 30_000, "max_num_seqs": 8}, CAP13,
         # requests waited for slots in the window: the 504s are not placed in generation — no timeout raise;
         # the queue formed with all 8 slots running at KV 40 %: floor(8 × 0.9 ÷ 0.40) = 18, capped at 13
         Knob.MAX_NUM_SEQS, Direction.RAISE, 13, "queueing", absent=("timeouts_unplaced", "deadline_during_generation"),
         no_knob=((Knob.REQUEST_TIMEOUT_MS, Direction.RAISE),), twin=True),
    # ---- timeouts from the requests' durations (access lines; no scrape) -------------------------------------
    Case("durations_ride_the_deadline", "timeouts",
         [*stats([(24, 0, 0.5)] * 24, gen_tps=600.0), *durations([10.0] * 36 + [29.0] * 4)],
         {"request_timeout_ms": 30_000, "max_output_tokens": 1024, "max_num_seqs": 32}, CAP13,
         # 40 requests, p99 at rank 0.99 × 39 = 38.61 between the 39th and 40th (both 29 s) = 29 s ≥ 0.9 × 30 s
         # = 27 s: the deadline is tight. 600 tokens/s ÷ 24 running = 25 tokens/s per request; a request at
         # the 1,024-token cap needs 1,024 ÷ 25 = 40.96 s (> 29 s); × 1.2 = 49,152 ms; or cap outputs at
         # 30 s × 0.9 × 25 = 675 tokens
         Knob.REQUEST_TIMEOUT_MS, Direction.RAISE, 49_152, "timeouts", governed_by="request_timeout_tight",
         absent=("request_timeout_above_durations",), words=("29",), extra={"arithmetic": "675 tokens"}),
    Case("durations_ride_the_deadline_without_throughput", "timeouts",
         [*durations([10.0] * 36 + [29.0] * 4)],
         {"request_timeout_ms": 30_000, "max_num_seqs": 32}, CAP13,
         # a proxy's log alone: no generation rate, no output cap — p99 29 s × 1.2 = 34.8 s = 34,800 ms
         Knob.REQUEST_TIMEOUT_MS, Direction.RAISE, 34_800, "timeouts", governed_by="request_timeout_tight"),
    Case("durations_well_inside_the_deadline_twin", "timeouts",
         [*stats([(24, 0, 0.5)] * 24, gen_tps=600.0), *durations([10.0] * 38 + [18.0] * 2)],
         {"request_timeout_ms": 30_000, "max_output_tokens": 1024, "max_num_seqs": 32}, CAP13,
         # p99 = 18 s (ranks 38 and 39 are both 18 s) < 27 s: not tight; 18 s ≥ 0.5 × 30 s = 15 s and no one
         # gave up early: not loose either — nothing to say about the deadline
         absent=("request_timeout_tight", "request_timeout_above_durations"),
         no_knob=((Knob.REQUEST_TIMEOUT_MS, Direction.RAISE), (Knob.REQUEST_TIMEOUT_MS, Direction.LOWER)),
         twin=True),
    Case("too_few_durations_twin", "timeouts",
         [*durations([29.5] * 19)],
         {"request_timeout_ms": 30_000, "max_num_seqs": 32}, CAP13,
         # 19 requests < the rules' 20: a handful of slow requests is not a distribution
         absent=("request_timeout_tight",), twin=True),
    Case("server_deadline_far_above_durations_while_the_proxy_gives_up", "timeouts",
         [*stats([(6, 0, 0.4)] * 6), *durations([12.0] * 40),
          *events(EventKind.DEADLINE_EXCEEDED, 3, scope="request", timeout_by="proxy", status=504)],
         {"request_timeout_ms": 600_000, "max_num_seqs": 8}, CAP13,
         # p99 of 40 requests at 12 s = 12 s < 0.5 × 600 s = 300 s, and the proxy gave up 3 times: the server's
         # 600 s protects nothing — lower to 12 s × 1.5 = 18,000 ms. The 3 504s without a queue are not
         # "generation outlasts the deadline" (timeouts_unplaced): the requests finish in 12 s, so no raise
         Knob.REQUEST_TIMEOUT_MS, Direction.LOWER, 18_000, "timeouts",
         governed_by="request_timeout_above_durations", words=("600",), absent=("timeouts_unplaced",),
         no_knob=((Knob.REQUEST_TIMEOUT_MS, Direction.RAISE),)),
    Case("server_deadline_far_above_durations_nobody_gives_up_twin", "timeouts",
         [*stats([(6, 0, 0.4)] * 6), *durations([12.0] * 40)],
         {"request_timeout_ms": 600_000, "max_num_seqs": 8}, CAP13,
         # the same durations, no proxy or client timeout: a generous deadline that cuts nobody and that nobody
         # in front undercuts is not a finding
         absent=("request_timeout_above_durations", "request_timeout_tight"), twin=True),
    # ---- start-up ---------------------------------------------------------------------------------------------
    Case("vllm_max_seq_len_larger_than_kv", "startup",
         events(EventKind.OOM, 1, phase=Phase.STARTUP, max_model_len=32768, kv_cache_tokens=20_010),
         {"max_model_len": 32768}, None,
         # the cache stores 20,010 tokens: floor(20,010 ÷ 16) × 16 = 1,250 × 16 = 20,000
         Knob.MAX_MODEL_LEN, Direction.LOWER, 20_000, "startup", words=("--max-model-len",)),
    Case("vllm_v1_to_serve_one_request_with_estimate", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, max_model_len=32768, required_kv_bytes=4 * GIB,
                  kv_cache_bytes=int(2.5 * GIB)), fact("estimated_max_model_len", 20_496)],
         {"max_model_len": 32768}, None,
         # the engine's own estimate governs: floor(20,496 ÷ 16) × 16 = 1,281 × 16 = 20,496
         Knob.MAX_MODEL_LEN, Direction.LOWER, 20_496, "startup"),
    Case("vllm_v1_to_serve_one_request_from_bytes", "startup",
         events(EventKind.OOM, 1, phase=Phase.STARTUP, max_model_len=32768, required_kv_bytes=4 * GIB,
                kv_cache_bytes=int(2.5 * GIB)),
         {"max_model_len": 32768}, None,
         # no estimate: 32,768 × 2.5 GiB ÷ 4 GiB = 20,480 (whole blocks)
         Knob.MAX_MODEL_LEN, Direction.LOWER, 20_480, "startup", no_knob=((Knob.MAX_NUM_SEQS, Direction.LOWER),)),
    Case("vllm_no_memory_for_cache_blocks", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, message="No available memory for the cache blocks"),
          fact("total_gpu_memory_bytes", 24 * GIB), fact("non_kv_cache_bytes", 20 * GIB)],
         {"gpu_memory_utilization": 0.80, "max_model_len": 8192}, engine_cap(1, 8192, kv_bytes_per_token=131_072),
         # (20 GiB + 8,192 × 131,072 B = 1 GiB) ÷ 24 GiB = 0.875 → 0.88
         Knob.GPU_MEMORY_UTILIZATION, Direction.RAISE, 0.88, "startup", words=("--gpu-memory-utilization",)),
    Case("vllm_weights_do_not_fit", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, message="No available memory for the cache blocks"),
          fact("total_gpu_memory_bytes", 24 * GIB), fact("non_kv_cache_bytes", int(23.5 * GIB))],
         {"gpu_memory_utilization": 0.90, "max_model_len": 8192}, engine_cap(1, 8192, kv_bytes_per_token=131_072),
         # (23.5 + 1) ÷ 24 = 1.02 > 0.95: no utilization fits — raise with no number; quantize or add GPUs
         Knob.GPU_MEMORY_UTILIZATION, Direction.RAISE, None, "startup", extra={"arithmetic": "quantize"}),
    Case("sglang_not_enough_memory", "startup",
         events(EventKind.OOM, 1, phase=Phase.STARTUP, server=Server.SGLANG,
                message="Not enough memory. Please try to increase --mem-fraction-static"),
         {"gpu_memory_utilization": 0.88, "max_model_len": 32768},
         Capacity(E, 32768, paper_max_concurrency=3, kv_bytes_per_token=131_072, vram_bytes=80 * GIB,
                  fixed_bytes=70 * GIB),
         # paper: (70 GiB + 32,768 × 131,072 B = 4 GiB) ÷ 80 GiB = 0.925 → 0.93
         Knob.GPU_MEMORY_UTILIZATION, Direction.RAISE, 0.93, "startup", words=("--mem-fraction-static",)),
    Case("sglang_not_enough_memory_from_its_own_figures", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, server=Server.SGLANG,
                  message="Not enough memory. Please try to increase --mem-fraction-static. Current value: "
                          "mem_fraction_static=0.88"),
          fact("device_free_bytes", 79.10 * GIB), fact("weights_bytes", 70.00 * GIB),
          fact("gpu_memory_utilization", 0.88)],
         {"max_model_len": 8192}, Capacity(E, 8192, paper_max_concurrency=0, kv_bytes_per_token=327_680),
         # SGLang: rest = free × (fraction − 1) + free − weights must hold the KV cache, so the fraction that holds
         # one request is (weights + one request's KV) ÷ the free memory before loading. Llama-3.1-70B bf16 KV:
         # 2 × 80 layers × 8 heads × 128 × 2 = 327,680 bytes a token × 8,192 = 2.5 GiB; (70 + 2.5) ÷ 79.10 =
         # 0.9166 → 0.92 (SGLang's 0.88 left 79.10 × 0.88 − 70 = −0.39 GiB for the cache)
         Knob.GPU_MEMORY_UTILIZATION, Direction.RAISE, 0.92, "startup", words=("--mem-fraction-static", "0.88")),
    Case("vllm_sampler_warmup_oom", "startup",
         events(EventKind.OOM, 1, phase=Phase.STARTUP, dummy_requests=256,
                message="CUDA out of memory occurred when warming up sampler with 256 dummy requests"),
         {"max_num_seqs": 256}, engine_cap(1_000_000, 4096),
         # half of 256 = 128, under the bound floor(1,000,000 ÷ 4,096) = 244
         Knob.MAX_NUM_SEQS, Direction.LOWER, 128, "startup"),
    Case("vllm_sampler_warmup_oom_capped_at_bound", "startup",
         events(EventKind.OOM, 1, phase=Phase.STARTUP, dummy_requests=256,
                message="CUDA out of memory occurred when warming up sampler with 256 dummy requests"),
         {"max_num_seqs": 256}, engine_cap(163_840, 4096),
         # 128, capped at the bound floor(163,840 ÷ 4,096) = 40
         Knob.MAX_NUM_SEQS, Direction.LOWER, 40, "startup"),
    Case("capacity_below_one_request", "startup",
         [], {"max_num_seqs": 64, "max_model_len": 32768},
         Capacity(E, 32768, paper_max_concurrency=0, usable_kv_bytes=2 * GIB, kv_bytes_per_token=131_072),
         # 0 requests fit: the knob is max_model_len — 2 GiB ÷ 131,072 B = 16,384 tokens; never "max_num_seqs 0"
         Knob.MAX_MODEL_LEN, Direction.LOWER, 16_384, "startup", absent=("max_num_seqs_above_bound",),
         no_knob=((Knob.MAX_NUM_SEQS, Direction.LOWER),)),
    Case("tgi_prefill_batch_does_not_fit", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, server=Server.TGI, prefill_tokens=4096,
                  message="Not enough memory to handle 4096 prefill tokens"), fact("max_batch_prefill_tokens", 4096)],
         {"gpu_memory_utilization": 0.9, "max_model_len": 8192},
         Capacity(E, 8192, paper_max_concurrency=3, kv_bytes_per_token=131_072, vram_bytes=80 * GIB,
                  fixed_bytes=60 * GIB),
         # TGI's own words: decrease --max-batch-prefill-tokens. Its warm-up memory is proportional to the prefill
         # tokens: floor(4,096 ÷ 2) = 2,048. Not "no memory for the KV cache": no --cuda-memory-fraction raise
         Knob.MAX_BATCH_PREFILL_TOKENS, Direction.LOWER, 2048, "startup", words=("--max-batch-prefill-tokens",
                                                                                "4,096"),
         absent=("startup_no_cache_memory", "oom_activation_peak", "oom_kv_at_limit")),
    Case("tgi_max_total_tokens_do_not_fit", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, server=Server.TGI,
                  message="Error: Backend(Warmup(Generation(\"Not enough memory to handle "
                          "`max_total_tokens=32768`\")))"),
          fact("kv_cache_tokens", 20_000)],
         {"max_model_len": 32_768}, engine_cap(20_000, 32_768, block_size=1),
         # TGI's KV pool holds 20,000 tokens (its token-sized blocks), less than one request of --max-total-tokens
         # 32,768: the longest that fits is the pool, 20,000 (whole 1-token blocks); not max_num_seqs
         Knob.MAX_MODEL_LEN, Direction.LOWER, 20_000, "startup", words=("--max-total-tokens",),
         no_knob=((Knob.MAX_NUM_SEQS, Direction.LOWER),)),
    Case("llamacpp_load_oom_twin", "startup",
         events(EventKind.OOM, 1, phase=Phase.STARTUP, server=Server.LLAMACPP,
                message="ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: "
                        "cudaMalloc failed: out of memory"),
         {"max_model_len": 131072}, None,
         # a plain allocation failure while loading: no figure sizes -c or -ngl, and llama.cpp has no
         # gpu_memory_utilization — no finding rather than "raise gpu_memory_utilization"
         headline=None, absent=("startup_no_cache_memory",), twin=True),
    Case("llamacpp_kv_buffer_failed", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, server=Server.LLAMACPP, requested_bytes=16 * GIB,
                  message="ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: "
                          "cudaMalloc failed: out of memory"),
          fact("kv_cache_tokens", 131_072), fact("kv_buffer_failed_bytes", 16 * GIB),
          fact("device_free_bytes", 15_800 * MIB), fact("weights_bytes", round(4403.49 * MIB))],
         {"max_model_len": 131_072}, None,
         # Llama-3.1-8B, f16 cache: 2 × 32 layers × 8 KV heads × 128 × 2 bytes = 131,072 bytes a cell, and the
         # failed buffer says the same: 16 GiB ÷ 131,072 cells. Room: (15,800 − 4,403.49 MiB) × 0.90 =
         # 10,256.86 MiB ÷ 0.125 MiB a cell = 82,054.9 cells → floor(÷ 256) × 256 = 320 × 256 = 81,920
         Knob.MAX_MODEL_LEN, Direction.LOWER, 81_920, "startup", words=("-c", "131,072"),
         no_knob=((Knob.MAX_NUM_SEQS, Direction.LOWER), (Knob.GPU_MEMORY_UTILIZATION, Direction.RAISE))),
    Case("llamacpp_compute_buffer_failed", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, server=Server.LLAMACPP, requested_bytes=12 * GIB),
          fact("kv_cache_tokens", 65_536), fact("kv_cache_bytes", 8 * GIB), fact("compute_buffer_failed_bytes",
                                                                                  12 * GIB),
          fact("device_free_bytes", 23_671 * MIB), fact("weights_bytes", round(4403.49 * MIB))],
         {"max_model_len": 65_536}, None,
         # the cache was allocated (8 GiB ÷ 65,536 = 131,072 bytes a cell), the 12 GiB compute buffer was not:
         # 23,671 − 4,403.49 − 12,288 = 6,979.51 MiB for the cache ÷ 0.125 = 55,836.1 → 218 × 256 = 55,808
         Knob.MAX_MODEL_LEN, Direction.LOWER, 55_808, "startup"),
    Case("llamacpp_compute_buffer_failed_no_free_figure", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, server=Server.LLAMACPP),
          fact("kv_cache_tokens", 65_536), fact("kv_cache_bytes", 8 * GIB),
          fact("compute_buffer_failed_bytes", 2 * GIB)],
         {"max_model_len": 65_536}, None,
         # older builds print no free memory: the cache gives up at least the 2 GiB it lacked, 8 − 2 = 6 GiB ÷
         # 131,072 bytes = 49,152 cells = 192 × 256
         Knob.MAX_MODEL_LEN, Direction.LOWER, 49_152, "startup"),
    Case("llamacpp_kv_failed_though_the_figures_fit_twin", "startup",
         [*events(EventKind.OOM, 1, phase=Phase.STARTUP, server=Server.LLAMACPP),
          fact("kv_cache_tokens", 131_072), fact("kv_buffer_failed_bytes", 16 * GIB),
          fact("device_free_bytes", 23_671 * MIB), fact("weights_bytes", round(4403.49 * MIB))],
         {"max_model_len": 131_072}, None,
         # (23,671 − 4,403.49) × 0.90 = 17,340.8 MiB ≥ the 16,384 asked: by the log's own figures it fits, so
         # another process holds the memory — lower -c, but no number the log supports (never a raise)
         Knob.MAX_MODEL_LEN, Direction.LOWER, None, "startup", twin=True),
    # ---- the engine's values over the config file ---------------------------------------------------------
    Case("engine_restarted_with_16", "config",
         [fact("max_num_seqs", 16)], {"max_num_seqs": 64}, CAP13,
         # the engine runs 16 (not the file's 64): lower 16 → 13; config_disagrees_with_engine says so
         Knob.MAX_NUM_SEQS, Direction.LOWER, 13, None, extra={"also": "config_disagrees_with_engine"}),
    Case("engine_16_within_bound_twin", "config",
         [fact("max_num_seqs", 16)], {"max_num_seqs": 64}, engine_cap(163_840, 8192),
         # bound floor(163,840 ÷ 8,192) = 20 ≥ 16: nothing to lower; only the disagreement (review)
         Knob.MAX_NUM_SEQS, Direction.REVIEW, None, None, absent=("max_num_seqs_above_bound",), twin=True),
    # ---- session length ------------------------------------------------------------------------------------------
    Case("session_length_climbing_past_budget", "session",
         stats([(10, 0, 0.5)] * 9, used=[20_000, 24_000, 28_000, 34_000, 40_000, 46_000, 52_000, 58_000, 62_000]),
         {"max_num_seqs": 13}, engine_cap(106_496, 4096),
         # per request 2,000 → 6,200 tokens: growth mean(5,200, 5,800, 6,200) ÷ mean(2,000, 2,400, 2,800) − 1 =
         # 1.375; p95 ≈ 6,040 > the budget's 4,096: cap sessions at 4,096
         Knob.MAX_SESSION_TOKENS, Direction.LOWER, 4096, "kv_exhausted"),
    Case("warmup_ramp_twin", "session",
         stats([(10, 0, 0.3)] * 9, used=[5_000, 8_000, 12_000, 16_000, 20_000, 24_000, 28_000, 32_000, 35_000]),
         {"max_num_seqs": 13}, engine_cap(106_496, 4096),
         # 500 → 3,500 tokens per request grows, but stays inside the budget's 4,096: a ramp, not a session
         absent=("session_length_climbing",), twin=True),
    Case("fixed_size_workload_decoding_twin", "session",
         stats([(10, 0, 0.4)] * 9, used=[10_000, 14_000, 18_000, 22_000, 26_000, 30_000, 34_000, 37_000, 39_000]),
         {"max_num_seqs": 13}, engine_cap(106_496, 4096),
         # requests decode toward their cap: 1,000 → 3,900 per request, never past 4,096
         absent=("session_length_climbing",), twin=True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case) -> None:
    out = judge(case.records, case.config, case.cap)
    for rule in case.absent:
        assert rule not in out.rules, (rule, [f.message for f in out.findings])
    for knob, direction in case.no_knob:
        assert not any(f.knob is knob and f.direction is direction for f in out.findings), \
            [(f.rule, f.message) for f in out.findings]
    if case.knob is not None:
        rec = out.rec(case.knob)
        assert rec is not None, (case.knob, [(f.rule, f.message) for f in out.findings])
        g = rec.governs
        assert g.direction is case.direction, (g.rule, g.message)
        if case.number is None:
            assert g.recommended is None or case.knob is Knob.REPLICAS, (g.rule, g.recommended, g.arithmetic)
        else:
            assert g.recommended == pytest.approx(case.number), (g.rule, g.recommended, g.arithmetic)
        if case.governed_by:
            assert g.rule == case.governed_by, rec.why
        for word in case.words:
            assert word in g.message, g.message
        # one number per knob: every finding naming this knob and direction gives the governing number or
        # is listed as overridden by it
        assert {f.rule for f in out.findings if f.knob is case.knob} == {g.rule, *(o.rule for o in rec.overridden)}
        if "arithmetic" in case.extra:
            assert str(case.extra["arithmetic"]) in g.arithmetic, g.arithmetic
    if "also" in case.extra:
        assert case.extra["also"] in out.rules
    head = headline([f for f in out.findings if CATEGORIES[f.rule] != "config"], CATEGORIES)
    if case.headline is None:
        assert head is None or case.knob is not None, (head, [f.message for f in out.findings])
    else:
        assert head is not None and head.category == case.headline, (head, [f.rule for f in out.findings])


def test_the_library_size_per_category(capsys: pytest.CaptureFixture[str]) -> None:
    sizes = Counter(c.category for c in CASES)
    twins = sum(c.twin for c in CASES)
    with capsys.disabled():
        print(f"\ncase library: {len(CASES)} cases ({twins} negative twins) + {len(NOISE) + 1} whole logs "
              f"(noise {len(NOISE)}, its twin 1): "
              + ", ".join(f"{k} {v}" for k, v in sorted(sizes.items())))
    engines = {s.server for c in CASES for s in c.records if isinstance(s, ServerStats | Event)}
    assert len(CASES) >= 40 and twins >= 12
    assert {Server.VLLM, Server.SGLANG, Server.LLAMACPP, Server.TGI} <= engines


VLLM_STATS = ("INFO 11-29 09:00:{s:02d} [loggers.py:259] Engine 000: Avg prompt throughput: 200.0 tokens/s, Avg "
              "generation throughput: 300.0 tokens/s, Running: 6 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.0%, "
              "Prefix cache hit rate: 0.0%")
NOISE = {
    # a prompt that quotes an OOM and a start-up failure: the request log, not the engine's state
    "vllm_prompt_quotes_oom": "INFO 11-29 09:00:01 [logger.py:43] Received request cmpl-1: prompt: 'Why does my job "
                              "say torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB?', params: "
                              "SamplingParams(n=1, max_tokens=256), prompt_token_ids: None.",
    "vllm_prompt_quotes_errors": "INFO 11-29 09:00:01 [logger.py:43] Received request cmpl-2: prompt: 'explain \"No "
                                 "available memory for the cache blocks\" and 503 Service Unavailable and deadline "
                                 "exceeded', params: SamplingParams(n=1, max_tokens=256), prompt_token_ids: None.",
}


@pytest.mark.parametrize("name", sorted(NOISE))
def test_noise_that_quotes_error_text_gives_no_finding(tmp_path: Path, name: str) -> None:
    """Healthy stats (6 running, KV 41 %, nobody waiting) around a line that quotes error text: the real
    parsers and the judge find nothing, and the report is quiet."""
    log = tmp_path / f"{name}.log"
    log.write_text("\n".join([VLLM_STATS.format(s=0), NOISE[name], *(VLLM_STATS.format(s=s) for s in (5, 10, 15))])
                   + "\n")
    runner = CliRunner()
    advised = runner.invoke(app, ["advise", "--log", str(log), "--json"])
    assert advised.exit_code == 0 and json.loads(advised.stdout)["findings"] == []
    reported = runner.invoke(app, ["report", "--log", str(log), "--format", "json"])
    assert json.loads(reported.stdout)["verdict"]["category"] == "quiet"


def test_the_twin_of_the_noise_a_real_oom_is_judged(tmp_path: Path) -> None:
    """The same healthy stats with the engine's own OOM traceback line: KV 41 % < 90 %, so the activation
    peak — gpu_memory_utilization, never max_num_seqs — and the report says so."""
    log = tmp_path / "oom.log"
    oom = ("ERROR 11-29 09:00:07 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
           "2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free.")
    log.write_text("\n".join([VLLM_STATS.format(s=0), VLLM_STATS.format(s=5), oom,
                              *(VLLM_STATS.format(s=s) for s in (10, 15))]) + "\n")
    runner = CliRunner()
    advised = json.loads(runner.invoke(app, ["advise", "--log", str(log), "--json"]).stdout)
    assert [f["rule"] for f in advised["findings"]] == ["oom_activation_peak"]
    reported = json.loads(runner.invoke(app, ["report", "--log", str(log), "--format", "json"]).stdout)
    assert reported["verdict"]["category"] == "activation_peak"


# llama-server (2025 builds, `tools/server`) failing to allocate its KV cache, in the words of libllama's source:
# llama_model_load_from_file_impl's free-memory line, print_info's shapes, load_tensors' buffer, llama_context's
# n_ctx, the CUDA backend's and alloc_tensor_range's failures, then llama_init_from_model naming the buffer
LLAMACPP_KV_FAILURE = """\
build: 6200 (4227c9be) with cc (Ubuntu 13.3.0) 13.3.0 for x86_64-linux-gnu
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4080) - 15800 MiB free
print_info: n_layer          = 32
print_info: n_embd_k_gqa     = 1024
print_info: n_embd_v_gqa     = 1024
load_tensors: offloaded 33/33 layers to GPU
load_tensors:        CUDA0 model buffer size =  4403.49 MiB
load_tensors:   CPU_Mapped model buffer size =   281.81 MiB
llama_context: n_seq_max     = 1
llama_context: n_ctx         = 131072
llama_context: n_ctx_per_seq = 131072
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: cudaMalloc failed: out of memory
alloc_tensor_range: failed to allocate CUDA0 buffer of size 17179869184
llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
common_init_from_params: failed to create context with model 'models/llama-3.1-8b-q4_k_m.gguf'
srv    load_model: failed to load model, 'models/llama-3.1-8b-q4_k_m.gguf'
main: exiting due to model loading error
"""


def test_a_llamacpp_start_up_failure_is_sized_from_its_own_log(tmp_path: Path) -> None:
    """The real parser and the shipped rules on llama.cpp's own start-up lines: the failed 16 GiB buffer at
    n_ctx 131,072 is 131,072 bytes a cell (2 × n_layer 32 × n_embd_k_gqa 1,024 × 2 bytes of f16), the card had
    15,800 MiB free for 4,403.49 MiB of weights: (15,800 − 4,403.49) × 0.90 ÷ 0.125 MiB = 82,054.9 cells →
    -c 81,920; never max_num_seqs, never a utilization llama.cpp does not have."""
    assert 2 * 32 * 1024 * 2 * 131_072 == 17_179_869_184  # the shapes give the failed buffer exactly
    log = tmp_path / "llama-server.log"
    log.write_text(LLAMACPP_KV_FAILURE)
    advised = json.loads(CliRunner().invoke(app, ["advise", "--log", str(log), "--json"]).stdout)
    (rec,) = advised["recommendations"]
    assert (rec["knob"], rec["direction"], rec["to"], rec["governed_by"]) == (
        "max_model_len", "lower", 81_920, "startup_llamacpp_context_too_large")
    (found,) = advised["findings"]
    assert "-c (Ollama: OLLAMA_CONTEXT_LENGTH)" in found["message"] and "131,072" in found["message"]
    assert "-ctk q8_0" in found["arithmetic"]


def test_tgi_s_own_prefill_warm_up_failure_lowers_its_prefill_batch(tmp_path: Path) -> None:
    """A real TGI line (issue #1164: `warmup{max_input_length=64 max_prefill_tokens=256}` … "Not enough memory to
    handle 256 prefill tokens"): lower --max-batch-prefill-tokens to floor(256 ÷ 2) = 128, still ≥ the 64-token
    max input; its twin, the launcher adapting its own default to the VRAM, is no failure at all."""
    runner = CliRunner()
    real = Path(__file__).parent.parent / "data" / "logs" / "tgi" / "real-warmup-span-1164.log"
    advised = json.loads(runner.invoke(app, ["advise", "--log", str(real), "--json"]).stdout)
    (rec,) = advised["recommendations"]
    assert (rec["knob"], rec["direction"], rec["to"], rec["governed_by"]) == (
        "max_batch_prefill_tokens", "lower", 128, "startup_prefill_oom")
    assert "--max-batch-prefill-tokens" in advised["findings"][0]["message"]
    twin = tmp_path / "tgi.log"
    twin.write_text("2024-06-01T10:00:00.000000Z  WARN text_generation_launcher: Reducing the max batch prefill "
                    "from 8192 to 4096 because there is not enough VRAM to support it.\n"
                    "2024-06-01T10:00:30.000000Z  INFO text_generation_router: router/src/main.rs:305: Connected\n")
    quiet = json.loads(runner.invoke(app, ["advise", "--log", str(twin), "--json"]).stdout)
    assert quiet["findings"] == []


SGLANG_NOT_ENOUGH_MEMORY = """\
[2025-01-15 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-Instruct', \
mem_fraction_static=0.88, context_length=8192, tp_size=1)
[2025-01-15 10:00:05 TP0] Load weight begin. avail mem=79.10 GB
[2025-01-15 10:00:40 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=9.10 GB, \
mem usage=70.00 GB.
[2025-01-15 10:00:41 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 711, in init_memory_pool
    raise RuntimeError(
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
"""


def test_sglang_s_not_enough_memory_is_sized_from_its_own_load_lines(tmp_path: Path) -> None:
    """SGLang's own figures through the real parser: 79.10 GB free before loading, 70.00 GB of weights, and
    the config's model for the KV bytes a token (Llama-3.1-70B: 2 × 80 × 8 × 128 × 2 = 327,680; × 8,192 =
    2.5 GiB): --mem-fraction-static (70 + 2.5) ÷ 79.10 = 0.9166 → 0.92, from the engine's 0.88."""
    log, config = tmp_path / "sglang.log", tmp_path / "agent.yaml"
    log.write_text(SGLANG_NOT_ENOUGH_MEMORY)
    config.write_text("model: {preset: llama-3.1-70b, weights_gib: 70}\ngpu: {vram_gib: 80, overhead_gib: 1}\n"
                      "server: {gpu_memory_fraction: 0.95, max_model_len: 8192}\n")
    advised = json.loads(CliRunner().invoke(app, ["advise", "--log", str(log), "--config", str(config),
                                                  "--json"]).stdout)
    (rec,) = [r for r in advised["recommendations"] if r["knob"] == "gpu_memory_utilization"]
    assert (rec["direction"], rec["from"], rec["to"], rec["governed_by"]) == (
        "raise", 0.88, 0.92, "startup_no_cache_memory")
    (found,) = [f for f in advised["findings"] if f["rule"] == "startup_no_cache_memory"]
    assert "--mem-fraction-static" in found["message"]


def test_after_a_lower_c_the_next_failure_is_sized_from_its_own_buffer(tmp_path: Path) -> None:
    """The operator lowered -c to 81,920 after the KV failure above; the cache then fit (10,240 MiB = 81,920 ×
    131,072 bytes) and the 2 GiB compute buffer did not. The earlier KV failure must not size this one: room =
    15,800 − 4,403.49 − 2,048 = 9,348.51 MiB ÷ 0.125 MiB a cell = 74,788.1 → 292 × 256 = 74,752."""
    second = LLAMACPP_KV_FAILURE.replace("n_ctx         = 131072", "n_ctx         = 81920").replace(
        "n_ctx_per_seq = 131072", "n_ctx_per_seq = 81920").split("ggml_backend_cuda")[0] + """\
llama_kv_cache_unified:      CUDA0 KV buffer size = 10240.00 MiB
llama_kv_cache_unified: size = 10240.00 MiB ( 81920 cells,  32 layers,  1/1 seqs), K (f16): 5120.00 MiB, \
V (f16): 5120.00 MiB
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 0: cudaMalloc failed: out of memory
ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 2147483648
llama_init_from_model: failed to initialize the context: failed to allocate compute buffers
main: exiting due to model loading error
"""
    log = tmp_path / "llama-server.log"
    log.write_text(LLAMACPP_KV_FAILURE + second)
    advised = json.loads(CliRunner().invoke(app, ["advise", "--log", str(log), "--json"]).stdout)
    (rec,) = advised["recommendations"]
    assert (rec["knob"], rec["to"], rec["governed_by"]) == ("max_model_len", 74_752,
                                                            "startup_llamacpp_context_too_large")
