"""The SIMULATED engine's scheduler (agent/tools/sim.py) against the budget arithmetic, stepped by hand.

No HTTP and no clock: `step(now)` is called in a loop with a made-up time. The central property: for the
same inputs, the highest concurrency the simulator serves without preempting is exactly
`agent.capacity.budget.compute(...).max_concurrency`, and one more request in flight preempts.
"""

from __future__ import annotations

import math

import pytest

from agent.capacity.budget import GIB, BudgetInputs, compute
from agent.capacity.shapes import find_preset
from agent.tools.sim import Engine, EngineOomError, QueueFullError, SimConfig, SimRequest, from_budget


def _inputs(tokens_per_request: int = 1024, vram_gib: float = 16, weights_gib: float = 12) -> BudgetInputs:
    return BudgetInputs(shape=find_preset("qwen2.5-7b"), vram_bytes=int(vram_gib * GIB), util=0.9,
                        weights_bytes=int(weights_gib * GIB), overhead_bytes=int(1.6 * GIB),
                        tokens_per_request=tokens_per_request)


def _drive(engine: Engine, requests: int, prompt: int, output: int, max_steps: int = 100_000) -> list[SimRequest]:
    """Submit `requests` at once and step until all finished; the closed loop of a load-test level."""
    now = 0.0
    sent = [engine.submit(prompt, output, now) for _ in range(requests)]
    for _ in range(max_steps):
        if not engine.running and not engine.waiting:
            break
        now += engine.step(now).duration_seconds or 0.001
    assert all(r.outcome == "length" for r in sent)
    return sent


@pytest.mark.parametrize(("tokens", "prompt"), [(1024, 64), (1000, 40), (2048, 1), (777, 700)])
def test_preemption_starts_one_past_the_budgets_max_concurrency(tokens: int, prompt: int) -> None:
    budget = compute(_inputs(tokens))
    bound = budget.max_concurrency
    assert bound >= 2
    config = from_budget(_inputs(tokens), speed=1000.0)
    assert config.kv_blocks == budget.kv_cache_blocks

    at_bound = Engine(config)
    _drive(at_bound, bound, prompt, tokens - prompt)
    assert at_bound.counters.preemptions == 0
    assert at_bound.free_blocks == config.kv_blocks  # everything was given back

    over = Engine(config)
    _drive(over, bound + 1, prompt, tokens - prompt)
    assert over.counters.preemptions > 0
    assert over.counters.finished == bound + 1  # recompute: preempted requests still finish
    assert over.free_blocks == config.kv_blocks


def test_the_worked_example_is_13_and_the_simulator_agrees() -> None:
    """The design notes' worked example: Qwen2.5-7B, 24 GiB, util 0.90, BF16 weights 14.2 GiB,
    1.6 GiB overhead, 8192 tokens → 13."""
    inputs = _inputs(8192, vram_gib=24, weights_gib=14.2)
    assert compute(inputs).max_concurrency == 13
    config = from_budget(inputs)
    engine = Engine(config)
    _drive(engine, 13, 64, 8192 - 64)
    assert engine.counters.preemptions == 0
    engine = Engine(config)
    _drive(engine, 14, 64, 8192 - 64)
    assert engine.counters.preemptions > 0


def test_usage_is_used_over_total_blocks_and_blocks_follow_the_tokens() -> None:
    engine = Engine(SimConfig(kv_blocks=10, block_size=16))
    request = engine.submit(20, 5, 0.0)
    engine.step(0.0)  # prefill: 20 prompt tokens + the first output token = 21 tokens = 2 blocks
    assert request.blocks == math.ceil(21 / 16) == 2
    assert engine.kv_usage_ratio == pytest.approx(0.2)


def test_long_prompts_wait_for_blocks_instead_of_being_admitted() -> None:
    """Admission needs the prompt's blocks free (as vLLM's): the excess waits, running stays at what fits."""
    engine = Engine(SimConfig(kv_blocks=10, block_size=16))
    for _ in range(3):
        engine.submit(60, 4, 0.0)  # 61 tokens → 4 blocks each: two fit in 10
    engine.step(0.0)
    assert len(engine.running) == 2 and len(engine.waiting) == 1


def test_max_num_seqs_caps_running_and_the_rest_wait() -> None:
    engine = Engine(SimConfig(kv_blocks=1000, max_num_seqs=3))
    for _ in range(5):
        engine.submit(10, 10, 0.0)
    engine.step(0.0)
    assert (len(engine.running), len(engine.waiting)) == (3, 2)


def test_a_full_queue_refuses_beyond_the_free_running_slots() -> None:
    engine = Engine(SimConfig(kv_blocks=1000, max_num_seqs=2, max_queue_size=1))
    engine.submit(10, 10, 0.0)
    engine.submit(10, 10, 0.0)  # these two will get the two slots
    engine.submit(10, 10, 0.0)  # one waiting beyond the slots: the queue holds one
    with pytest.raises(QueueFullError, match="currently busy"):
        engine.submit(10, 10, 0.0)
    assert engine.counters.rejected == 1


def test_queue_timeout_and_request_timeout() -> None:
    engine = Engine(SimConfig(kv_blocks=1000, max_num_seqs=1, queue_timeout_seconds=1.0,
                              request_timeout_seconds=5.0))
    running = engine.submit(10, 10_000, 0.0)
    waiting = engine.submit(10, 10, 0.0)
    engine.step(0.0)
    assert engine.expire(0.5) == []
    assert engine.expire(1.5) == [waiting] and waiting.outcome == "queue_timeout"
    assert engine.expire(6.0) == [running] and running.outcome == "request_timeout"
    assert engine.free_blocks == 1000


def test_oom_mode_dies_where_it_would_preempt() -> None:
    config = SimConfig(kv_blocks=8, block_size=16, oom_on_overcommit=True)
    assert config.overcommitted
    engine = Engine(config)
    engine.submit(1, 100, 0.0)
    engine.submit(1, 100, 0.0)
    now = 0.0
    with pytest.raises(EngineOomError) as caught:
        for _ in range(1000):
            now += engine.step(now).duration_seconds
    assert engine.dead
    assert caught.value.requested_bytes == config.block_bytes


def test_config_refuses_nonsense() -> None:
    with pytest.raises(Exception, match="kv_blocks must be positive"):
        SimConfig(kv_blocks=0)
    with pytest.raises(Exception, match="429 or 503"):
        SimConfig(kv_blocks=1, reject_status=500)
