"""A SIMULATED vLLM-like engine: the paged-KV scheduler, without a GPU and without a model.

It exists so that the load test, the parsers and the scraper can be exercised end to end on a laptop
or in CI, and so that the budget arithmetic can be watched "working": the simulator holds a KV cache
of `kv_blocks` blocks of `block_size` tokens and schedules requests the way vLLM's V1 scheduler does.

The model (simplifications are listed in docs/simulator.md):

- A request holds `prompt + generated` tokens of KV, in `ceil(tokens / block_size)` blocks, allocated
  as it grows. So a request of `tokens_per_request` tokens needs exactly the `blocks_per_request` of
  agent.capacity.budget, and N requests in flight at full length fit exactly when N × blocks_per_request ≤
  kv_blocks — the budget's `max_concurrency` is the largest such N, and the simulator preempts at N + 1.
- Each step: every running request that needs a new block gets one; when none is free the most
  recently admitted running request is preempted (recompute: its blocks are freed, it goes back to the
  head of the queue and later re-prefills its prompt and what it had generated). With
  `oom_on_overcommit` the engine instead dies with a CUDA out-of-memory error, like an engine without
  paged preemption that was configured beyond its budget. Then, if nothing was preempted in the step,
  waiting requests are admitted in order while `max_num_seqs` and the free blocks allow.
- A step lasts `prefill tokens / prefill_tps + 1 / decode_tps` seconds, divided by `speed`, and
  gives every running request one token. Output length is always `max_tokens` (no end of sequence).
- The waiting queue is bounded by `max_queue_size` (requests beyond the free running slots); a full
  queue, or a wait beyond `queue_timeout_seconds`, is refused with `reject_status` (503 like vLLM's
  `--max-num-queued-reqs`, or 429). A request older than `request_timeout_seconds` is aborted.

This module is the scheduler only (no I/O, no clock: the caller passes `now`); sim_server.py serves it
over HTTP, writes the vLLM-format log and the /metrics exposition.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field

from agent.capacity.budget import Budget, BudgetInputs, compute
from agent.errors import AgentError

SIMULATED = "SIMULATED"
DEFAULT_MODEL_NAME = "simulated/qwen2.5-7b"


class QueueFullError(AgentError):
    """The waiting queue is at `max_queue_size`: the request is refused at admission (no token)."""


class EngineOomError(AgentError):
    """A block could not be allocated and the engine is configured to die rather than preempt."""

    def __init__(self, requested_bytes: int, used_bytes: int, total_bytes: int) -> None:
        super().__init__(f"CUDA out of memory. Tried to allocate {requested_bytes} bytes")
        self.requested_bytes = requested_bytes
        self.used_bytes = used_bytes
        self.total_bytes = total_bytes


MAX_COUNT = 1 << 31  # blocks, tokens, sequences: far beyond any GPU, and no overflow in the arithmetic
MAX_RATE = 1e9


@dataclass(frozen=True)
class SimConfig:
    """What the simulated engine was started with. Rates are per second of simulated time; `speed`
    divides every duration (100 = a hundred times faster than the rates say); timeouts are real seconds."""

    kv_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_model_len: int = 8192
    max_queue_size: int | None = None
    reject_status: int = 503
    queue_timeout_seconds: float | None = None
    request_timeout_seconds: float | None = None
    prefill_tps: float = 5000.0
    decode_tps: float = 50.0
    speed: float = 1.0
    oom_on_overcommit: bool = False
    model_name: str = DEFAULT_MODEL_NAME
    default_max_tokens: int = 16
    budget: Budget | None = None  # where kv_blocks came from, printed at start-up like vLLM's profiling

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.kv_blocks <= MAX_COUNT:
            problems.append(f"kv_blocks must be positive and at most {MAX_COUNT:,}, got {self.kv_blocks}")
        if not all(0 < n <= MAX_COUNT for n in (self.block_size, self.max_num_seqs, self.max_model_len)):
            problems.append(f"block_size, max_num_seqs and max_model_len must be positive and at most {MAX_COUNT:,}")
        if self.max_queue_size is not None and self.max_queue_size < 0:
            problems.append("max_queue_size must not be negative")
        if self.reject_status not in (429, 503):
            problems.append(f"reject_status must be 429 or 503, got {self.reject_status}")
        rates = (self.prefill_tps, self.decode_tps, self.speed)
        if not all(0 < r <= MAX_RATE for r in rates):  # NaN fails every comparison, infinity the bound
            problems.append(f"prefill_tps, decode_tps and speed must be positive and at most {MAX_RATE:g}")
        if problems:
            raise AgentError("; ".join(problems))

    @property
    def block_bytes(self) -> int:
        """Bytes of one block (from the budget; 2 MiB, a Llama-3-8B block, when only blocks were given)."""
        return self.budget.block_bytes if self.budget is not None else 2 << 20

    @property
    def kv_cache_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    @property
    def overcommitted(self) -> bool:
        """max_num_seqs requests of max_model_len tokens would not fit: the engine relies on preemption."""
        return self.max_num_seqs * math.ceil(self.max_model_len / self.block_size) > self.kv_blocks


def from_budget(inputs: BudgetInputs, **settings: object) -> SimConfig:
    """A config whose KV cache is what agent.capacity.budget computes for `inputs` (vLLM's block count)."""
    budget = compute(inputs)
    return SimConfig(kv_blocks=budget.kv_cache_blocks, block_size=inputs.block_size,
                     max_model_len=inputs.tokens_per_request, budget=budget, **settings)  # type: ignore[arg-type]


@dataclass(eq=False)
class SimRequest:
    """One request inside the engine; times are the caller's clock."""

    id: str
    prompt_tokens: int
    max_tokens: int
    arrived: float
    generated: int = 0
    blocks: int = 0
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    new_tokens: int = 0  # tokens produced by the last step (what a stream sends)
    outcome: str | None = None  # length | queue_timeout | request_timeout | engine_dead

    @property
    def tokens(self) -> int:
        """Tokens whose KV the request holds while running."""
        return self.prompt_tokens + self.generated


@dataclass
class Step:
    """What one engine step did; the driver sleeps `duration_seconds`, then delivers it."""

    duration_seconds: float
    admitted: list[SimRequest] = field(default_factory=list)
    produced: list[SimRequest] = field(default_factory=list)
    finished: list[SimRequest] = field(default_factory=list)
    preempted: list[SimRequest] = field(default_factory=list)
    prefill_tokens: int = 0


@dataclass
class Counters:
    """Totals since start (exported as vLLM's counters) and since the last stats line."""

    preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    rejected: int = 0
    aborted: int = 0
    interval_preemptions: int = 0
    interval_prompt_tokens: int = 0
    interval_generation_tokens: int = 0


class Engine:
    """The simulated scheduler. `submit`, `expire` and `step` are called by one driver with its clock."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.free_blocks = config.kv_blocks
        self.counters = Counters()
        self.dead = False
        self._ids = itertools.count(1)

    # -- what /metrics and the stats line read ----------------------------------------------------

    @property
    def used_blocks(self) -> int:
        return self.config.kv_blocks - self.free_blocks

    @property
    def kv_usage_ratio(self) -> float:
        return self.used_blocks / self.config.kv_blocks

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    # -- admission ---------------------------------------------------------------------------------

    def submit(self, prompt_tokens: int, max_tokens: int, now: float) -> SimRequest:
        """Queue a request; raise QueueFullError when the waiting queue (beyond free running slots) is full."""
        limit = self.config.max_queue_size
        if limit is not None:
            free_slots = max(0, self.config.max_num_seqs - len(self.running))
            if len(self.waiting) - free_slots >= limit:
                self.counters.rejected += 1
                raise QueueFullError("The engine is currently busy and cannot accept new requests. "
                                "Please try again later or on a different instance.")
        request = SimRequest(f"cmpl-{next(self._ids):08x}", prompt_tokens, max_tokens, now)
        self.waiting.append(request)
        return request

    def expire(self, now: float) -> list[SimRequest]:
        """Take out requests past the queue timeout (never admitted) or the request timeout."""
        gone: list[SimRequest] = []
        queue_timeout = self.config.queue_timeout_seconds
        request_timeout = self.config.request_timeout_seconds
        for request in list(self.waiting):
            if queue_timeout is not None and request.admitted_at is None and now - request.arrived > queue_timeout:
                request.outcome = "queue_timeout"
            elif request_timeout is not None and now - request.arrived > request_timeout:
                request.outcome = "request_timeout"
            else:
                continue
            self.waiting.remove(request)
            gone.append(request)
        if request_timeout is not None:
            for request in list(self.running):
                if now - request.arrived > request_timeout:
                    request.outcome = "request_timeout"
                    self._release(request)
                    self.running.remove(request)
                    gone.append(request)
        for request in gone:
            request.finished_at = now
            if request.outcome == "queue_timeout":
                self.counters.rejected += 1
            else:
                self.counters.aborted += 1
        return gone

    def abort(self, request: SimRequest) -> None:
        """The client went away: free what the request holds (vLLM's `Aborted request`)."""
        if request in self.running:
            self._release(request)
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)

    # -- the step ----------------------------------------------------------------------------------

    def step(self, now: float) -> Step:
        """Schedule one iteration and apply it: blocks for growth (preempting if short), admissions,
        then one token for every running request. Raises EngineOomError in `oom_on_overcommit` mode."""
        step = Step(0.0)
        for request in list(self.running):
            if request not in self.running:  # preempted earlier in this loop
                continue
            need = self._blocks_for(request.tokens + 1) - request.blocks
            while need > self.free_blocks:
                if self.config.oom_on_overcommit:
                    self.dead = True
                    raise EngineOomError(need * self.config.block_bytes, self.used_blocks * self.config.block_bytes,
                                    self.config.kv_blocks * self.config.block_bytes)
                victim = self.running.pop()
                self._preempt(victim, step)
                if victim is request:
                    break
            else:
                request.blocks += need
                self.free_blocks -= need
        if not step.preempted:
            self._admit(now, step)
        if not self.running:
            return step
        step.duration_seconds = (step.prefill_tokens / self.config.prefill_tps
                                 + 1 / self.config.decode_tps) / self.config.speed
        done_at = now + step.duration_seconds
        for request in self.running:
            request.generated += 1
            request.new_tokens = 1
            if request.first_token_at is None:
                request.first_token_at = done_at
            step.produced.append(request)
            if request.generated >= request.max_tokens:
                request.outcome = "length"
                request.finished_at = done_at
                step.finished.append(request)
        for request in step.finished:
            self.running.remove(request)
            self._release(request)
        produced = len(step.produced)
        self.counters.generation_tokens += produced
        self.counters.interval_generation_tokens += produced
        self.counters.prompt_tokens += step.prefill_tokens
        self.counters.interval_prompt_tokens += step.prefill_tokens
        self.counters.finished += len(step.finished)
        return step

    def _admit(self, now: float, step: Step) -> None:
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            request = self.waiting[0]
            need = self._blocks_for(request.tokens + 1)
            if need > self.free_blocks:
                break
            self.waiting.popleft()
            request.blocks = need
            self.free_blocks -= need
            if request.admitted_at is None:
                request.admitted_at = now
            step.prefill_tokens += request.tokens
            step.admitted.append(request)
            self.running.append(request)

    def _preempt(self, request: SimRequest, step: Step) -> None:
        self._release(request)
        request.preemptions += 1
        self.waiting.appendleft(request)
        step.preempted.append(request)
        self.counters.preemptions += 1
        self.counters.interval_preemptions += 1

    def _release(self, request: SimRequest) -> None:
        self.free_blocks += request.blocks
        request.blocks = 0
