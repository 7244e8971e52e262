"""What the load test watches while a level runs: the engine's /metrics (through agent.sources.scrape), GPU memory
(through agent.sources.nvml, where a driver is), and OOM / preemption events from the engine's log (through the
project's parsers, agent.offline.saved) or from the agent's store.
"""

from __future__ import annotations

import ctypes.util
import io
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from agent.errors import AgentError
from agent.offline.saved import scan_stream
from agent.records import Event, EventKind, Server, ServerStats
from agent.sinks.queries import Queries
from agent.sinks.store import Store
from agent.sources.scrape import Scraper


@dataclass
class Peaks:
    """The highest values the engine showed during one level, and the events counted for it."""

    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None
    gpu_memory: int | None = None
    preemptions: int = 0
    oom: int = 0
    engine_dead: int = 0
    scrape_lost: bool = False  # the engine's /metrics answered, then stopped answering during the level
    samples: int = 0
    queued_samples: int = 0

    def stats(self, s: ServerStats) -> None:
        self.samples += 1
        if s.waiting:
            self.queued_samples += 1
        if s.running is not None:
            self.running = max(self.running or 0, s.running)
        if s.waiting is not None:
            self.waiting = max(self.waiting or 0, s.waiting)
        if s.kv_usage_ratio is not None:
            self.kv_usage = max(self.kv_usage or 0.0, s.kv_usage_ratio)


class LevelEvents(NamedTuple):
    """What the engine's log or the agent's store recorded for one level."""

    oom: int = 0
    preemptions: int = 0
    engine_dead: int = 0

    @classmethod
    def of(cls, counts: Callable[[EventKind], int]) -> LevelEvents:
        return cls(counts(EventKind.OOM), counts(EventKind.PREEMPTION), counts(EventKind.ENGINE_DEAD))


def event_count(event: Event) -> int:
    count = event.fields.get("count")
    return int(count) if isinstance(count, int | float) and count > 0 else 1


# How each error class reads in a verdict, in the order a cause is named (the first present governs).
_FAILURE_WORDS = {"http_503": "refused (503)", "http_429": "refused (429)", "http_5xx": "failed (5xx)",
                  "timeout": "client timeout(s)", "connection": "connection(s) lost",
                  "bad_answer": "bad_answer (answers that were not completions)", "other": "other error(s)"}


def level_verdict(level: int, errors: Counter[str], peaks: Peaks) -> tuple[bool, str]:
    """Did the level break, and on what. The cause named is the one the clients felt, most severe first: the
    engine dying, an OOM, then the requests that failed (refused, 5xx, timed out), and only when none failed the
    engine's own distress (preemptions, then sustained queueing). Preemptions beside failures are named as
    context, never as the cause: a real vLLM preempted 13 times while its clients timed out."""
    failed = sum(errors.values())
    order = [*_FAILURE_WORDS, *sorted(set(errors) - set(_FAILURE_WORDS))]
    detail = ", ".join(f"{errors[kind]} {_FAILURE_WORDS.get(kind, kind)}" for kind in order if errors[kind])
    also = f" (also {peaks.preemptions} preemption(s))" if peaks.preemptions else ""
    if peaks.engine_dead or (peaks.scrape_lost and errors["connection"] + errors["http_5xx"]):
        return True, f"the engine died: {failed} request(s) failed ({detail})" if failed else "the engine died"
    if peaks.oom:
        return True, f"{peaks.oom} OOM event(s)" + (f"; {failed} request(s) failed ({detail})" if failed else "")
    if failed:
        return True, f"{failed} failed request(s): {detail}{also}"
    if peaks.preemptions:
        return True, f"{peaks.preemptions} preemption(s)"
    # Sustained queueing: the engine never ran all `level` clients at once, and requests waited in most
    # samples (a request between two engine steps waits for a moment at every level: one sample is noise).
    if (peaks.running is not None and peaks.running < level and peaks.samples
            and peaks.queued_samples * 2 >= peaks.samples):
        return True, (f"queueing: the engine ran at most {peaks.running} of {level} at once, "
                      f"{peaks.waiting} waiting at the peak")
    return False, ""



class Watcher:
    """Samples the engine during a level: /metrics through agent.sources.scrape, NVML, the log, the store.

    Blocking calls (urllib in the scraper, NVML, file reads, SQLite) run in worker threads so the
    request loop never waits for them.
    """

    def __init__(self, *, metrics_url: str | None = None, log_path: Path | None = None, db_path: Path | None = None,
                 gpu: bool = False, nvml_library: str | None = None) -> None:
        self._scraper = Scraper(metrics_url, server=Server.AUTO, interval_seconds=0.0,
                                timeout_seconds=2.0) if metrics_url else None
        self._log_path = log_path
        self._db_path = db_path
        self._log_offset = self._log_size()
        self._gpu: Any = None
        if gpu and (nvml_library is not None or ctypes.util.find_library("nvidia-ml") is not None):
            from agent.sources.nvml import GpuPoller  # only where a driver is: it imports pynvml

            self._gpu = GpuPoller(library_path=nvml_library)

    @property
    def metrics_url(self) -> str | None:
        return self._scraper.url if self._scraper is not None else None

    def _log_size(self) -> int:
        try:
            return self._log_path.stat().st_size if self._log_path is not None else 0
        except OSError:
            return 0

    def sample(self, peaks: Peaks) -> None:
        """One scrape and one NVML poll, folded into `peaks` (blocking: run it in a thread)."""
        now = time.time()
        if self._scraper is not None:
            was_up = self._scraper.stats().up
            records = self._scraper.poll(now)
            if was_up and not self._scraper.stats().up:
                peaks.scrape_lost = True
            for record in records:
                if isinstance(record, ServerStats):
                    peaks.stats(record)
                elif isinstance(record, Event) and record.kind is EventKind.PREEMPTION:
                    peaks.preemptions += event_count(record)
        if self._gpu is not None:
            used = [g.memory_used_bytes for g in self._gpu.poll(now).gpus if g.memory_used_bytes is not None]
            if used:
                peaks.gpu_memory = max(peaks.gpu_memory or 0, max(used))

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()

    def events_since_last(self, started: float, ended: float) -> LevelEvents:
        """OOM events, preemptions and engine deaths the log appended since the last call, or the store holds for
        the window; the larger of the two sources for each (they see the same engine)."""
        counts = self._log_events() if self._log_path is not None else LevelEvents()
        if self._db_path is not None:
            counts = LevelEvents(*(max(a, b) for a, b in zip(counts, self._db_events(started, ended), strict=True)))
        return counts

    def _log_events(self) -> LevelEvents:
        assert self._log_path is not None
        try:
            with self._log_path.open("rb") as handle:
                size = handle.seek(0, io.SEEK_END)
                if size < self._log_offset:  # truncated or replaced: start again
                    self._log_offset = 0
                handle.seek(self._log_offset)
                data = handle.read(size - self._log_offset)
        except OSError:
            return LevelEvents()
        complete = data[:data.rfind(b"\n") + 1]  # a half-written last line waits for the next window
        self._log_offset += len(complete)
        scan = scan_stream(io.BytesIO(complete), str(self._log_path), Server.AUTO, time.time())
        events = [r for r in scan.records if isinstance(r, Event)]
        return LevelEvents.of(lambda kind: sum(event_count(e) for e in events if e.kind is kind))

    def _db_events(self, started: float, ended: float) -> LevelEvents:
        assert self._db_path is not None
        try:
            with Store.open_readonly(self._db_path) as store:
                counts = Queries(store).event_counts(started, ended)
        except AgentError:
            return LevelEvents()
        return LevelEvents.of(lambda k: sum(n for (_, _, kind), n in counts.items() if kind == k.value))
