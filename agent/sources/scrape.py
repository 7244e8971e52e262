"""The engine scrape source: poll an engine's own Prometheus `/metrics` and turn it into the same records
the log parsers produce (ServerStats, CapacityFacts, preemption / pending / queue_full Events).

Logs alone miss things: vLLM V0 warns on every 50th preemption only and V1 logs none before 0.12, access
logs can be off, and the KV usage an engine computes is exact where a log line is rounded. One
`Scraper` per configured target; `poll(now)` fetches only when the target's interval has passed on the
caller's clock (no sleeping, no thread), so the loop and the tests step it.

What each engine's metrics mean, and how counters and histograms become increases and windows
(baselines, restarts, data-parallel series), is agent/sources/engine_metrics.py; this module fetches,
keeps the target's health, and turns a reading into records: counter increases into events, each
latency or length histogram's window into a `HistogramWindow` (the scrapes of a minute added up; only
signals whose requests finished in it).

`counted()` names the event kinds the target counts exactly from the engine's own counters; the daemon
then drops the same kinds from the log of the engine the target shares a name with, so one engine's
preemptions are not counted twice (docs/sources.md, "One engine, two witnesses").

A failed scrape never raises out of `poll`: the target is down, the failure is counted and logged once
per failure episode, and the next interval tries again. Self-metrics are plain data (`stats()`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from agent import histograms, http
from agent.config import ScrapeTarget
from agent.prom import Samples, exposition_samples
from agent.records import (
    CapacityFact,
    Event,
    EventKind,
    HistogramWindow,
    Phase,
    Record,
    Server,
    ServerStats,
    Severity,
)
from agent.sources.engine_metrics import READERS, Deltas, Reading, first

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 << 20  # a vLLM exposition with many histograms is well under 1 MiB
HISTOGRAM_SECONDS = 60.0  # histogram windows are stored at most this often per target and signal
_PREFIXES = ((Server.VLLM, "vllm:"), (Server.SGLANG, "sglang:"), (Server.LLAMACPP, "llamacpp:"), (Server.TGI, "tgi_"))
_ENABLE_HINT = {
    Server.VLLM: "vLLM serves /metrics on its API port",
    Server.SGLANG: "SGLang needs --enable-metrics",
    Server.TGI: "TGI serves /metrics on its API port and on --prometheus-port (default 9000)",
    Server.LLAMACPP: "llama-server needs --metrics",
}


@dataclass(frozen=True)
class ScrapeStats:
    """A snapshot of one target's self-metrics; counters only grow while the agent runs.

    `scrapes_total` counts attempts, `errors_total` the failed ones; `up` is whether the last attempt
    succeeded (False before the first); `last_error` is kept after recovery so an operator can see
    what it was. `server` is the configured engine, or the detected one for `auto`.
    """

    target: str
    url: str
    server: Server
    up: bool = False
    scrapes_total: int = 0
    errors_total: int = 0
    last_error: str | None = None
    last_duration_seconds: float | None = None
    last_success_seconds: float | None = None


Scraped = Record | HistogramWindow


class _HttpStatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class _ScrapeError(Exception):
    """A response that is not an error at the HTTP level but cannot be used."""


def _detect(samples: Samples) -> Server | None:
    for server, prefix in _PREFIXES:
        if any(name.startswith(prefix) for name in samples):
            return server
    return None


class Scraper:
    """Polls one engine's `/metrics` on the caller's clock and keeps what the next scrape compares with.

    `source` is the name records and self-metrics carry (the config's `name`, default the URL).
    A body over `max_body_bytes` is refused (a wrong URL serving a file must not fill memory).
    `clock` only measures how long a scrape took; scheduling follows the `now` given to `poll`.
    """

    def __init__(self, url: str, *, server: Server = Server.VLLM, source: str | None = None,
                 interval_seconds: float = 10.0, timeout_seconds: float = 2.0, max_body_bytes: int = MAX_BODY_BYTES,
                 histogram_seconds: float = HISTOGRAM_SECONDS, clock: Callable[[], float] = time.perf_counter) -> None:
        if server in (Server.KERNEL, Server.NVML):
            raise ValueError(f"scrape needs an engine (vllm, sglang, tgi, llamacpp or auto), not {server.value}")
        self.url = url
        self.server = server
        self.source = source or url
        self.interval_seconds = interval_seconds
        self.timeout_seconds = timeout_seconds
        self.max_body_bytes = max_body_bytes
        self._clock = clock
        # Engines are local: never send their scrape through an http_proxy from the environment.
        self._next_at = -math.inf
        self._detected: Server | None = None if server is Server.AUTO else server
        self._deltas = Deltas()
        self._counted: frozenset[EventKind] = frozenset()
        self.histogram_seconds = histogram_seconds
        self._held: dict[str, histograms.Buckets] = {}  # signal → requests since the last stored window
        self._held_since: float | None = None
        self._since_start: dict[str, histograms.Buckets] = {}  # signal → every window since the agent started
        self._start_time: float | None = None
        self._last_ok_at: float | None = None
        self._waiting = 0
        self._facts: dict[str, float | str] = {}
        self._up = False
        self._failing = False
        self._scrapes = 0
        self._errors = 0
        self._last_error: str | None = None
        self._last_duration: float | None = None

    @classmethod
    def from_target(cls, target: ScrapeTarget) -> Scraper:
        """A scraper for one `ScrapeTarget` of the config."""
        return cls(target.url, server=target.server, source=target.target_name(),
                   interval_seconds=target.interval_seconds, timeout_seconds=target.timeout())

    # -- state the metrics and status read -------------------------------------------------------

    def histograms_since_start(self, now: float) -> list[HistogramWindow]:
        """Each signal's requests since the agent started, on the engine's own buckets (untrimmed, so the
        exporter's `le` series stay the same from scrape to scrape): a cumulative histogram to export."""
        server = self._detected or Server.AUTO
        return [HistogramWindow(now, self.source, server, signal, h.bounds, h.counts, h.sum)
                for signal, h in sorted(self._since_start.items())]

    def counted(self) -> frozenset[EventKind]:
        """The event kinds this target counts exactly (its last successful reading had their counters);
        empty before the first success. Kept while the target is down: its counters catch up later."""
        return self._counted

    def stats(self) -> ScrapeStats:
        return ScrapeStats(self.source, self.url, self._detected or self.server, self._up, self._scrapes,
                           self._errors, self._last_error, self._last_duration, self._last_ok_at)

    # -- the poll --------------------------------------------------------------------------------

    def poll(self, now: float) -> list[Scraped]:
        """Scrape when the interval has passed (at once on the first call); [] otherwise or on failure.

        A clock that went back by more than an interval does not stall the target: it is due again.
        """
        if now < self._next_at and self._next_at - now <= self.interval_seconds:
            return []
        self._next_at = now + self.interval_seconds
        self._scrapes += 1
        started = self._clock()
        try:
            samples = exposition_samples(self._fetch())
            records = self._records(samples, now)
        except (OSError, ValueError, _ScrapeError, _HttpStatusError, http.HttpTimeoutError,
                http.HttpConnectionError) as exc:
            self._last_duration = self._clock() - started
            self._fail(exc)
            return []
        except Exception as exc:  # a parser or mapping bug must cost this target, never the agent
            self._last_duration = self._clock() - started
            if not self._failing:
                log.exception("scrape %s: unexpected error reading %s", self.source, self.url)
                self._failing = True
            self._fail(exc)
            return []
        self._last_duration = self._clock() - started
        if self._failing:
            log.info("scrape %s: %s answers again", self.source, self.url)
        self._up, self._failing, self._last_ok_at = True, False, now
        return records

    def _fetch(self) -> str:
        try:
            reply = http.get(self.url, timeout_seconds=self.timeout_seconds, max_body_bytes=self.max_body_bytes,
                             headers={"Accept": "text/plain;version=0.0.4"})
        except http.HttpBodyTooLargeError as exc:
            raise _ScrapeError(f"{exc}; is this a /metrics URL?") from exc
        if reply.status >= 400:
            raise _HttpStatusError(reply.status)
        return reply.body.decode("utf-8", errors="replace")

    def _fail(self, exc: BaseException) -> None:
        self._up = False
        self._errors += 1
        self._last_error = self._describe(exc)
        if not self._failing:
            retry = f"every {self.interval_seconds:g} s" if self.interval_seconds > 0 else "at every step"
            log.warning("scrape %s: %s: %s; the target is down until a scrape succeeds (retried %s)",
                        self.source, self.url, self._last_error, retry)
        self._failing = True

    def _describe(self, exc: BaseException) -> str:
        server = self._detected or self.server
        hint = _ENABLE_HINT.get(server, "")
        if isinstance(exc, _HttpStatusError):
            text = f"HTTP {exc.status} {_reason(exc.status)}".rstrip()
            return f"{text} ({hint}; check the URL's port and path)" if exc.status in (404, 501) and hint else text
        if isinstance(exc, http.HttpTimeoutError):
            return f"no answer within {self.timeout_seconds:g} s"
        if isinstance(exc, http.HttpConnectionError):
            return f"cannot connect: {str(exc).split(': ', 1)[-1][:300]}"
        if isinstance(exc, ValueError):
            return f"not a Prometheus text exposition: {str(exc)[:200]}"
        if isinstance(exc, _ScrapeError | OSError):
            return str(exc)[:300] or type(exc).__name__
        return f"unexpected {type(exc).__name__}: {str(exc)[:300]} (a bug: please report it)"

    # -- exposition → records -------------------------------------------------------------------

    def _records(self, samples: Samples, now: float) -> list[Scraped]:
        server: Server = self.server
        if server is Server.AUTO:
            server = _detect(samples) or Server.AUTO
        prefix = dict(_PREFIXES).get(server)
        if prefix is None or not any(name.startswith(prefix) for name in samples):
            found = _detect(samples)
            raise _ScrapeError(f"no {server.value} metrics in the response"
                               + (f" (it has {found.value} metrics: set server: {found.value})" if found else
                                  f" ({_ENABLE_HINT.get(server, 'is this an engine /metrics URL?')})"))
        self._detected = server
        had_baseline = self._deltas.baseline
        start = first(samples, "process_start_time_seconds")
        self._deltas.begin(start is not None and self._start_time is not None and start != self._start_time)
        elapsed = now - self._last_ok_at if self._last_ok_at is not None and now > self._last_ok_at else None
        reading = READERS[server](samples, self._deltas, elapsed)
        # Only a whole successful reading moves the comparison point.
        self._deltas.commit()
        self._counted = reading.counted()
        self._start_time = start if start is not None else self._start_time
        return self._emit(server, reading, now, had_baseline)

    def _emit(self, server: Server, r: Reading, now: float, had_baseline: bool) -> list[Scraped]:
        out: list[Scraped] = []
        for name, value in r.facts.items():
            if self._facts.get(name) != value:  # on the first scrape, and when the engine came back changed
                out.append(CapacityFact(now, self.source, name, value))
                self._facts[name] = value
        count = r.preemptions[0] if r.preemptions is not None and had_baseline else None
        out.append(ServerStats(now, self.source, server, running=r.running, waiting=r.waiting, swapped=r.swapped,
                               kv_usage_ratio=r.kv_usage_ratio, prompt_tps=r.prompt_tps, gen_tps=r.gen_tps,
                               prefix_hit_ratio=r.prefix_hit_ratio, preemptions=count,
                               kv_used_tokens=r.kv_used_tokens))
        if r.waiting is not None:
            before, self._waiting = self._waiting, r.waiting
            if r.waiting > 0 and before == 0:
                out.append(Event(now, self.source, server, EventKind.PENDING, Severity.INFO, Phase.QUEUE,
                                 f"queue became non-empty: {r.waiting} waiting, {r.running} running",
                                 {"waiting": r.waiting, "running": r.running}))
        if r.preemptions is not None and r.preemptions[0] > 0:
            out.append(Event(now, self.source, server, EventKind.PREEMPTION, Severity.WARNING, Phase.RUNTIME,
                             f"{r.preemptions[0]} preemptions since the last scrape",
                             {"count": r.preemptions[0], "total_preemptions": r.preemptions[1]}))
        for reason, (rejected, status) in r.rejections.items():
            fields: dict[str, float | int | str | bool | None] = {"count": rejected, "reason": reason}
            if status is not None:
                fields["status"] = status
            out.append(Event(now, self.source, server, EventKind.QUEUE_FULL, Severity.WARNING, Phase.ADMISSION,
                             f"{rejected} requests rejected at admission ({reason}) since the last scrape", fields))
        out.extend(self._histogram_windows(server, r, now))
        return out

    def _histogram_windows(self, server: Server, r: Reading, now: float) -> list[HistogramWindow]:
        """The scrapes' histogram windows, added up and stored once per `histogram_seconds` (a day of 10 s
        scrapes would be 8,640 rows per signal and engine; the rules' windows are minutes), trimmed to the
        buckets that hold requests; a signal without requests stores nothing."""
        for signal, window in r.histograms.items():
            since = self._since_start.get(signal)
            self._since_start[signal] = window if since is None else histograms.add([since, window]) or window
            if window.count > 0:
                held = self._held.get(signal)
                self._held[signal] = window if held is None else histograms.add([held, window]) or window
        if self._held_since is None or now < self._held_since:
            self._held_since = now
        if now - self._held_since < self.histogram_seconds:
            return []
        out = []
        for signal, window in sorted(self._held.items()):
            kept = histograms.trim(window)
            out.append(HistogramWindow(now, self.source, server, signal, kept.bounds, kept.counts, kept.sum))
        self._held, self._held_since = {}, now
        return out
