"""Incidents caused on purpose on a REAL engine, each with the engine's own counters as the ground truth.

A scenario runs against a live `Engine` (bed.py), and returns a `Recording`: the engine's log as an operator would
copy it off the node (the start-up section, then only this incident's lines) and the truth — deltas of the engine's
own `/metrics` counters across the incident, and what the clients saw. The engine tests (test_vllm.py,
test_llamacpp.py) compare the agent with that truth live; `record.py` writes the same recordings under
tests/data/real/engines/ so the fast suite checks the agent on real output without an engine.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.engines import bed
from tests.engines.bed import Engine, completion, drive


@dataclass
class Recording:
    """One incident on a real engine: the log an operator would have, and the engine's own account of it."""

    name: str
    engine: str  # "vllm" | "llamacpp"
    version: str
    command: str  # the command line that served it (paths as the cache has them)
    log: str  # the start-up section + this incident's lines
    truth: dict[str, Any] = field(default_factory=dict)  # counter deltas and client outcomes
    metrics_after: str = ""  # the engine's /metrics text after the incident (empty when it died)

    def save(self, root: Path) -> Path:
        """Write log, truth (with version and command) and /metrics under root/<engine>-<version>/<name>/."""
        out = root / f"{self.engine}-{self.version}" / self.name
        out.mkdir(parents=True, exist_ok=True)
        (out / "engine.log").write_text(scrub(self.log))
        meta = {k: v for k, v in asdict(self).items() if k not in ("log", "metrics_after")}
        meta["command"] = scrub(meta["command"])
        (out / "truth.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if self.metrics_after:
            (out / "metrics.txt").write_text(self.metrics_after)
        return out


def scrub(text: str) -> str:
    """The cache's absolute path, written the way an operator's home would be (nothing else is changed)."""
    return text.replace(str(bed.CACHE), "~/.cache/deepinfer-agent/engines")


STARTUP_DONE = ("Application startup complete.", "server is listening on", ": listening on http")


def startup_section(engine: Engine) -> str:
    """The log up to and including the line that says the server is ready."""
    text = engine.log.read_text(errors="replace")
    ends = [text.find(m) for m in STARTUP_DONE if m in text]
    if not ends:
        return text
    end = text.find("\n", min(ends))
    return text[: end + 1]


def metrics_text(engine: Engine) -> str:
    import urllib.request

    with urllib.request.urlopen(engine.url + "/metrics", timeout=10) as reply:
        text: str = reply.read().decode()
        return text


# The counters each engine keeps that an incident moves; the truth is their change across it. (Names as
# agent.prom reads them: a counter without its `_total`.)
VLLM_COUNTERS = {
    "preemptions": ("vllm:num_preemptions", {}),
    "rejected_queue_full": ("vllm:admission_rejections", {}),
    "http_2xx": ("http_requests", {"status": "2xx"}),
    "http_4xx": ("http_requests", {"status": "4xx"}),
    "http_5xx": ("http_requests", {"status": "5xx"}),
    "finished_abort": ("vllm:request_success", {"finished_reason": "abort"}),
    "finished_length": ("vllm:request_success", {"finished_reason": "length"}),
}
LLAMACPP_COUNTERS = {
    "prompt_tokens": ("llamacpp:prompt_tokens", {}),
    "predicted_tokens": ("llamacpp:tokens_predicted", {}),
    "decode_calls": ("llamacpp:n_decode", {}),
}


def counters(engine: Engine) -> dict[str, float]:
    table = VLLM_COUNTERS if engine.kind == "vllm" else LLAMACPP_COUNTERS
    samples = engine.metrics()
    return {key: sum(v for labels, v in samples.get(name, []) if all(labels.get(k) == x for k, x in want.items()))
            for key, (name, want) in table.items()}


class Peaks:
    """Samples the engine's gauges while an incident runs (every 0.5 s; llama.cpp serves the tiny model in
    tenths of a second, so every 0.05 s there): the true peak of waiting and running requests."""

    def __init__(self, engine: Engine, every: float = 0.5) -> None:
        self.engine = engine
        self.every = every
        self.waiting = 0.0
        self.running = 0.0
        self.kv = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        names = {"vllm": ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"),
                 "llamacpp": ("llamacpp:requests_deferred", "llamacpp:requests_processing",
                              "llamacpp:kv_cache_usage_ratio")}[self.engine.kind]
        while not self._stop.is_set():
            try:
                samples = self.engine.metrics()
            except OSError:
                return
            waiting, running, kv = (sum(v for _, v in samples.get(n, [])) for n in names)
            self.waiting = max(self.waiting, waiting)
            self.running = max(self.running, running)
            self.kv = max(self.kv, kv)
            self._stop.wait(self.every)

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def incident(engine: Engine, version: str, name: str, act: Callable[[], dict[str, Any]],
             settle: Callable[[int], None] | None = None) -> Recording:
    """Run `act` on a live engine; the recording holds the start-up section, the incident's log lines and the
    change of every counter across it."""
    header = startup_section(engine)
    start = engine.log_size()
    before = counters(engine)
    with Peaks(engine, 0.5 if engine.kind == "vllm" else 0.05) as peaks:
        seen = act()
        if settle:
            settle(start)
    after = counters(engine)
    truth = {key: after[key] - before[key] for key in before}
    truth.update(seen)
    truth["peak_waiting"] = peaks.waiting
    truth["peak_running"] = peaks.running
    log = header + engine.log.read_bytes()[start:].decode(errors="replace")
    return Recording(name, engine.kind, version, " ".join(engine.argv), log, truth, metrics_text(engine))


def clients(out: bed.Outcomes) -> dict[str, Any]:
    return {"client_" + str(status): n for status, n in sorted(out.by_status.items(), key=str)} | {
        "client_completion_tokens": out.completion_tokens}


# ---- vLLM -------------------------------------------------------------------------------------------------------

VLLM_VERSION = "0.32.0"


def vllm_preemption(engine: Engine) -> Recording:
    """Ten 250 + 250-token requests on a 1,024-token cache with max_num_seqs 4: six at once — four are admitted
    (8 blocks of prompt each fill the 32) and outgrow the cache, so they are preempted (V1 recomputes them
    later) — then four more 2 s apart, so the incident spans at least one 10 s stats line and the log shows the
    queue. Never more than the 10 the queue holds."""
    return incident(engine, VLLM_VERSION, "preemption",
                    lambda: clients(drive(engine, [completion(250, 250)] * 10, stagger=2.0, at_once=6)),
                    lambda start: bed.wait_for_stats(engine, start))


def vllm_refusals(engine: Engine) -> Recording:
    """Thirty requests at once with --max-num-queued-reqs 10: the engine refuses the overflow with HTTP 503."""
    return incident(engine, VLLM_VERSION, "refusals",
                    lambda: clients(drive(engine, [completion(250, 200)] * 30)),
                    lambda start: bed.wait_for_stats(engine, start))


def vllm_client_errors(engine: Engine) -> Recording:
    """Three 400s (output cap above max_model_len twice, malformed JSON once) and two 404s (unknown model)."""
    bodies: list[Any] = [completion(5, 4000), completion(5, 9000), "{not json",
                         completion(5, 4) | {"model": "no-such-model"}, completion(5, 4) | {"model": "gpt-4"}]
    return incident(engine, VLLM_VERSION, "client_errors", lambda: clients(drive(engine, bodies)))


def vllm_client_timeouts(engine: Engine) -> Recording:
    """Three clients that give up after 1 s on 250-token answers; the engine finishes them anyway."""
    return incident(engine, VLLM_VERSION, "client_timeouts",
                    lambda: clients(drive(engine, [completion(250, 250)] * 3, timeout=1.0)),
                    lambda start: bed.wait_for_stats(engine, start))


def vllm_death(engine: Engine) -> Recording:
    """kill -9 of the EngineCore process while six long requests run, then four more requests: every one of
    them fails with HTTP 500, and the API server exits."""
    def act() -> dict[str, Any]:
        result: dict[str, Any] = {}

        def load() -> None:
            result["first"] = drive(engine, [completion(100, 400)] * 6, timeout=60)

        thread = threading.Thread(target=load)
        thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and engine.counter("vllm:num_requests_running") < 2:
            time.sleep(0.1)
        time.sleep(1.0)  # a few tokens into every answer: 6 × 400 tokens take about ten seconds here
        cores = [pid for pid in engine.children() if "EngineCore" in _cmdline(pid)]
        for pid in cores:
            os.kill(pid, signal.SIGKILL)
        thread.join(90)
        later = drive(engine, [completion(5, 8)] * 4, timeout=20)
        engine.proc.wait(60)
        first: bed.Outcomes = result["first"]
        both = bed.Outcomes(first.results + later.results, first.completion_tokens + later.completion_tokens)
        return clients(both) | {"killed_engine_core": len(cores), "exit_code": engine.proc.returncode}

    header = startup_section(engine)
    start = engine.log_size()
    before = counters(engine)
    seen = act()
    log = header + engine.log.read_bytes()[start:].decode(errors="replace")
    truth = {"preemptions_before_death": before["preemptions"], **seen}
    return Recording("death", "vllm", VLLM_VERSION, " ".join(engine.argv), log, truth)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() + \
            Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return ""


VLLM_RUNTIME = (vllm_preemption, vllm_refusals, vllm_client_errors, vllm_client_timeouts)

# Start-up failures: each is one engine start that exits. (name, extra flags, base flags, environment, what happened)
VLLM_STARTUP: tuple[tuple[str, tuple[str, ...], dict[str, str], str], ...] = (
    ("startup_blocks_below_max_model_len", ("--num-gpu-blocks-override", "8"), {},
     "8 blocks of 32 tokens, one kept back: 7 × 32 = 224 KV tokens, max_model_len 512: not one request fits"),
    ("startup_small_blocks", ("--block-size", "16"), {},
     "32 blocks of 16 tokens, one kept back: 31 × 16 = 496 KV tokens, max_model_len 512: not one request fits"),
    ("startup_invalid_block_size", ("--block-size", "48"), {},
     "block size 48: not one of the sizes vLLM accepts"),
    ("startup_kv_space_too_large", (), {"VLLM_CPU_KVCACHE_SPACE": "4096"},
     "VLLM_CPU_KVCACHE_SPACE=4096 GiB: more than the machine's memory"),
)


def vllm_startup(log: Path, name: str, extra: tuple[str, ...], env: dict[str, str], what: str) -> Recording:
    base = [a for a in bed.VLLM_ARGS]
    for flag in extra[::2]:  # an extra flag replaces the base one
        if flag in base:
            i = base.index(flag)
            del base[i:i + 2]
    if "VLLM_CPU_KVCACHE_SPACE" in env:  # without the override the space itself sizes the cache
        i = base.index("--num-gpu-blocks-override")
        del base[i:i + 2]
    engine = bed.start_vllm(log, *extra, env=env, base=base, expect_exit=True, wait=300)
    text = engine.log.read_text(errors="replace")
    truth = {"exit_code": engine.proc.returncode, "served": False, "what": what,
             "environment": " ".join(f"{k}={v}" for k, v in env.items())}
    return Recording(name, "vllm", VLLM_VERSION, " ".join(engine.argv), text, truth)


# ---- llama.cpp --------------------------------------------------------------------------------------------------

LLAMACPP_VERSION = "0c1e570"  # the llama.cpp commit the llama-cpp-python 0.3.36 sdist bundles


def llamacpp_context_exceeded(engine: Engine) -> Recording:
    """Four 300 + 200-token requests on 512 unified KV cells: the cells run out, llama.cpp retries the batch
    smaller, then fails the requests it cannot fit with HTTP 500 "Context size has been exceeded". It never
    preempts."""
    return incident(engine, LLAMACPP_VERSION, "context_exceeded",
                    lambda: clients(drive(engine, [completion(300, 200)] * 4)))


def llamacpp_slots_full(engine: Engine) -> Recording:
    """Forty 20 + 100-token requests on 4 slots (4 × 120 tokens fit the 512 cells): most wait for a slot
    (deferred), all succeed."""
    return incident(engine, LLAMACPP_VERSION, "slots_full",
                    lambda: clients(drive(engine, [completion(20, 100)] * 40)))


def llamacpp_oversize(engine: Engine) -> Recording:
    """One prompt longer than a slot's context: refused before any allocation (HTTP 400), not out of memory."""
    return incident(engine, LLAMACPP_VERSION, "oversize_request",
                    lambda: clients(drive(engine, [completion(700, 10)])))


LLAMACPP_RUNTIME = (llamacpp_slots_full, llamacpp_oversize, llamacpp_context_exceeded)
