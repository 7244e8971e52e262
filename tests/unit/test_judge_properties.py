"""Properties of the judge on any window: every number a finding's message prints is one of the numbers its
evidence lists (or the knob's from/to), so a reader can recompute the message from the evidence; a message
never prints "?"; `same_sample` groups count only samples where every test held; `together` groups pair
each event with the sample nearest it (the evidence of both kinds of joint group is in the first test)."""

from __future__ import annotations

import re
import string
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.capacity.capacity import Capacity
from agent.judge.advisor import Advisor, engine_config
from agent.judge.messages import show as _show
from agent.judge.rules import load_rules
from agent.records import CapacityFact, Event, EventKind, Phase, Server, ServerStats, Severity
from agent.sinks.queries import Queries
from agent.sinks.store import Store

RULES = load_rules([Path(__file__).parent.parent.parent / "rules"]).rules
BY_NAME = {r.name: r for r in RULES}
NOW = 1_800_000_000.0
E = "engine-a"
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")

samples = st.lists(st.tuples(st.integers(0, 80), st.integers(0, 60), st.floats(0.0, 1.0, allow_nan=False)),
                   min_size=0, max_size=24)
kinds = st.sampled_from([EventKind.OOM, EventKind.PREEMPTION, EventKind.HTTP_503, EventKind.HTTP_429,
                         EventKind.DEADLINE_EXCEEDED, EventKind.QUEUE_FULL])
phases = st.sampled_from([Phase.RUNTIME, Phase.STARTUP, Phase.QUEUE, Phase.GENERATION])
fields = st.fixed_dictionaries({}, optional={
    "count": st.integers(1, 60), "tokens": st.integers(0, 4000), "scope": st.just("request"),
    "max_model_len": st.integers(1024, 131072), "kv_cache_tokens": st.integers(0, 200_000),
    "dummy_requests": st.integers(1, 1024), "duration_s": st.floats(0.1, 900, allow_nan=False)})
events = st.lists(st.tuples(kinds, phases, fields, st.integers(1, 590)), max_size=30)
# start-up figures an engine may have printed (llama.cpp's failed buffers, SGLang's and vLLM's memory), in bytes
GIB = 2**30
facts = st.fixed_dictionaries({}, optional={
    "kv_cache_tokens": st.integers(256, 262_144), "kv_cache_bytes": st.integers(GIB // 4, 64 * GIB),
    "kv_buffer_failed_bytes": st.integers(GIB // 4, 64 * GIB), "compute_buffer_failed_bytes": st.integers(0, 8 * GIB),
    "device_free_bytes": st.integers(GIB, 80 * GIB), "weights_bytes": st.integers(GIB, 70 * GIB),
    "max_batch_prefill_tokens": st.integers(512, 16_384), "total_gpu_memory_bytes": st.integers(8 * GIB, 80 * GIB),
    "non_kv_cache_bytes": st.integers(GIB, 70 * GIB)})


def _literal_numbers(template: str) -> set[str]:
    text = "".join(lit for lit, _, _, _ in string.Formatter().parse(template))
    return set(NUMBER.findall(text))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(samples, events, st.integers(1, 256), st.one_of(st.none(), st.integers(0, 120)),
       st.one_of(st.none(), st.floats(1_000, 300_000, allow_nan=False)), facts,
       st.sampled_from([Server.VLLM, Server.SGLANG, Server.TGI, Server.LLAMACPP]))
def test_every_number_in_a_message_is_in_its_evidence(rows: list[tuple[int, int, float]],
                                                       evs: list[tuple[EventKind, Phase, dict[str, object], int]],
                                                       max_num_seqs: int, paper: int | None,
                                                       kv_tokens: float | None, printed: dict[str, int],
                                                       server: Server) -> None:
    records: list[ServerStats | Event | CapacityFact] = [
        ServerStats(NOW - (len(rows) - i) * 10.0, E, server, running=r, waiting=w, kv_usage_ratio=kv)
        for i, (r, w, kv) in enumerate(rows)]
    for i, (kind, phase, extra, ago) in enumerate(evs):
        records.append(Event(NOW - ago, E, server, kind, Severity.ERROR, phase, f"{kind.value} happened",
                             dict(extra), "/logs/a.log", 1000 + i))  # type: ignore[arg-type]
    records += [CapacityFact(NOW - 900, E, name, float(value)) for name, value in printed.items()]
    engine = kv_tokens / 4096 if kv_tokens is not None else None
    cap = Capacity(E, 4096, paper_max_concurrency=paper, engine_max_concurrency=engine,
                   engine_kv_cache_tokens=kv_tokens)
    store = Store.open(":memory:")
    store.commit(records, now=NOW)
    config = {"max_num_seqs": float(max_num_seqs), "max_queue_size": 64.0, "request_timeout_ms": 60_000.0,
              "max_output_tokens": 1024.0, "gpu_memory_utilization": 0.9, "max_model_len": 8192.0}
    queries = Queries(store)
    found = Advisor(RULES, 15.0, config, log_findings=False).step(NOW, queries, {E: cap}, [E],
                                                                   engine_config(queries.latest_facts()))
    for f in found:
        assert "?" not in f.message, f.message
        assert "unknown" not in f.message, f.message
        allowed = {_show(v) for v in f.evidence.values() if isinstance(v, int | float)}
        allowed |= {_show(f.current), _show(f.recommended)} | _literal_numbers(BY_NAME[f.rule].message)
        for number in NUMBER.findall(f.message):
            assert number in allowed, (f.rule, number, f.message, dict(f.evidence))


@settings(max_examples=80, deadline=None)
@given(samples, st.integers(1, 80))
def test_a_same_sample_group_counts_only_samples_where_every_test_held(rows: list[tuple[int, int, float]],
                                                                       max_num_seqs: int) -> None:
    records = [ServerStats(NOW - (len(rows) - i) * 10.0, E, Server.VLLM, running=r, waiting=w, kv_usage_ratio=kv)
               for i, (r, w, kv) in enumerate(rows)]
    store = Store.open(":memory:")
    store.commit(records, now=NOW)
    cap = Capacity(E, 4096, paper_max_concurrency=1000)
    advisor = Advisor([BY_NAME["kv_headroom_raise_concurrency"]], 15.0, {"max_num_seqs": float(max_num_seqs)},
                      log_findings=False)
    found = advisor.step(NOW, Queries(store), {E: cap}, [E])
    joint = [(r, w, kv) for r, w, kv in rows if w > 0 and r >= max_num_seqs and kv < 0.80]
    assert bool(found) == (len(joint) >= 3)
    if found:
        ev = found[0].evidence
        assert ev["queued_samples"] == len(joint)
        assert ev["queued_waiting_max"] == max(w for _, w, _ in joint)
        assert ev["queued_running_min"] == min(r for r, _, _ in joint)


refusals = st.lists(st.tuples(st.sampled_from([EventKind.HTTP_429, EventKind.HTTP_503, EventKind.QUEUE_FULL]),
                              st.integers(1, 400), st.integers(1, 4)), max_size=16)


@settings(max_examples=80, deadline=None)
@given(samples, refusals)
def test_a_together_group_pairs_each_refusal_with_the_sample_nearest_it(
        rows: list[tuple[int, int, float]], refused: list[tuple[EventKind, int, int]]) -> None:
    """`rejections_with_kv_headroom`: a refusal counts (its `fields.count` occurrences) when the stats sample
    nearest it — the earlier one on a tie — is at most 30 s away and shows KV under 80 %; five such
    occurrences fire the rule, and the evidence's count and KV range are those refusals' and samples'."""
    times = [NOW - (len(rows) - i) * 10.0 for i in range(len(rows))]
    records: list[ServerStats | Event] = [ServerStats(t, E, Server.VLLM, running=r, waiting=w, kv_usage_ratio=kv)
                                          for t, (r, w, kv) in zip(times, rows, strict=True)]
    records += [Event(NOW - ago, E, Server.VLLM, kind, Severity.WARNING, Phase.ADMISSION, kind.value, {"count": n},
                      "/logs/a.log", 5000 + i) for i, (kind, ago, n) in enumerate(refused)]
    store = Store.open(":memory:")
    store.commit(records, now=NOW)
    advisor = Advisor([BY_NAME["rejections_with_kv_headroom"]], 15.0, {"max_queue_size": 8.0}, log_findings=False)
    found = advisor.step(NOW, Queries(store), {}, [E])
    # the pairing written out: nearest by distance, the earlier sample on a tie
    counted, kvs = 0, []
    for _, ago, n in refused:
        t = NOW - ago
        if not times:
            break
        nearest = min(range(len(times)), key=lambda i: (abs(times[i] - t), times[i]))
        if abs(times[nearest] - t) <= 30 and rows[nearest][2] < 0.80:
            counted += n
            kvs.append(rows[nearest][2])
    assert bool(found) == (counted >= 5)
    if found:
        ev = found[0].evidence
        assert ev["room_refused_count"] == counted
        assert ev["room_kv_usage_ratio_max"] == round(max(kvs), 4)
        assert ev["room_kv_usage_ratio_min"] == round(min(kvs), 4)
