"""The process around the daemon: logging, signals, systemd notify, the metrics server, the main loop.

`serve` is what `deepinfer-agent run` calls. SIGTERM / SIGINT stop the loop (everything held is
flushed and committed, exit 0); SIGHUP re-reads the config and rules (a bad file keeps the running
config). Under systemd (`Type=notify`) it reports READY after a first step has found and positioned
every source, pings WATCHDOG every loop, and STOPPING on the way out. Logs go to stderr, one line per
message; under journald each line starts with its syslog priority (`<3>`, `<4>`, `<6>`) so
`journalctl -p warning` works.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from agent.config import Config, load_config
from agent.daemon.loop import Daemon
from agent.daemon.sdnotify import Notifier
from agent.errors import AgentError
from agent.sinks.exporter import MetricsServer

# The shortest time between two steps when woken by writes: ≤ 10 commits a second in a storm, for at
# most this much added latency from an append to the store and /metrics.
MIN_STEP_SECONDS = 0.1

log = logging.getLogger("deepinfer")

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"<{_PRIORITY.get(record.levelno, 6)}>{record.name}: {super().format(record)}"


def setup_logging(level: int = logging.INFO) -> None:
    """One line per message on stderr; syslog priorities when stderr is the journal (JOURNAL_STREAM)."""
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def raise_fd_limit() -> int:
    """Raise the soft limit on open files to the hard limit (a busy node has many logs; the metrics port
    takes a descriptor per connection) and return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
    return int(soft)


class _Metrics:
    """The metrics server, moved to a new address when a reload changes metrics.listen or metrics.port."""

    def __init__(self, daemon: Daemon, listen: str, port: int) -> None:
        self.daemon = daemon
        self.bound = (listen, port)  # as configured (port 0: any free port)
        self.server = MetricsServer(daemon.snapshot, listen, port)

    def follow_config(self) -> None:
        wanted = (self.daemon.config.metrics.listen, self.daemon.config.metrics.port)
        if wanted == self.bound:
            return
        try:
            moved = MetricsServer(self.daemon.snapshot, *wanted)
        except OSError as exc:
            log.warning("metrics stay on http://%s:%d/metrics: cannot bind %s:%d (%s); restart the agent once "
                        "the address is free", self.server.host, self.server.port, wanted[0], wanted[1],
                        exc.strerror or exc)
            self.bound = wanted  # said once; the next reload tries again
            return
        moved.start()
        old = self.server
        self.server, self.bound = moved, wanted
        old.close()
        log.info("metrics on http://%s:%d/metrics (moved by a config reload)", moved.host, moved.port)

    def close(self) -> None:
        self.server.close()


def serve(config_path: Path, config: Config, *, once: bool = False, nvml_library: str | None = None) -> int:
    """Run the agent until a stop signal; return the exit code."""
    fd_limit = raise_fd_limit()
    daemon = Daemon(config, nvml_library=nvml_library, load_config=lambda: load_config(config_path))
    # Bind first: a port already taken fails the start at once, before any source is opened.
    try:
        metrics = None if once else _Metrics(daemon, config.metrics.listen, config.metrics.port)
    except OSError as exc:
        raise AgentError(f"cannot serve metrics on {config.metrics.listen}:{config.metrics.port}: "
                         f"{exc.strerror or exc} (another process holds the port? set metrics.port)") from exc
    daemon.start(time.time())
    for line in daemon.describe():
        log.info("watching %s", line)
    log.info("open-file limit %d", fd_limit)
    # One step before the agent says it is up: every source is found and positioned (a file present at the
    # first start is read from its end), so a line written after READY, or after the metrics address is
    # logged, is never taken for one that was there before the agent. (The step is bounded by the read
    # budgets; connections to the bound port wait in its backlog meanwhile.)
    daemon.run_once(time.time())
    if metrics is None:
        daemon.close(time.time())
        return 0
    server = metrics.server
    server.start()
    log.info("metrics on http://%s:%d/metrics", server.host, server.port)
    stop, reload = threading.Event(), threading.Event()

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()
        daemon.waker.wake()

    def on_hup(_signum: int, _frame: FrameType | None) -> None:
        reload.set()
        daemon.waker.wake()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_hup)
    notifier = Notifier()
    notifier.ready(f"watching {len(config.sources)} log source(s)")
    watchdog_every = notifier.watchdog_interval_seconds
    last_ping = [0.0]

    def on_tick() -> None:
        metrics.follow_config()
        if watchdog_every is not None and time.monotonic() - last_ping[0] >= watchdog_every:
            notifier.watchdog()
            last_ping[0] = time.monotonic()

    try:
        run_forever(daemon, stop, reload, on_tick)
    finally:
        notifier.stopping()
        metrics.close()
    log.info("stopped")
    return 0


def run_forever(daemon: Daemon, stop: threading.Event, reload: threading.Event,
                on_tick: Callable[[], None] | None = None) -> None:
    """Step until `stop` is set; `reload` (SIGHUP) re-reads the config between steps."""
    while not stop.is_set():
        now = time.time()
        started = time.monotonic()
        if reload.is_set():
            reload.clear()
            daemon.reload(now)
        more = daemon.run_once(now)
        daemon.waker.watch(daemon.watch_dirs())
        if on_tick is not None:
            on_tick()
        if not more and not stop.is_set():
            daemon.waker.wait(daemon.wait_interval())
            # A storm wakes the waker on every write; steps closer together than MIN_STEP_SECONDS would
            # only multiply small transactions (the daemon's largest cost under load), so the rest of the
            # step period is waited out and the lines that arrive meanwhile land in one commit.
            rest = MIN_STEP_SECONDS - (time.monotonic() - started)
            if rest > 0:
                stop.wait(rest)
    daemon.close(time.time())
