"""The agent's source loop in miniature, for the crash test: follow a glob into a store until killed.

It uses exactly the public API the daemon's pipeline uses: `FileTailer` resumed from `Store.cursors`,
`poll(now)` → `Store.commit(lines, cursors, expired)` in one transaction, `Waker` for inotify wake-ups.
Usage: python -m tests.integration.tail_driver DB PATTERN
"""

from __future__ import annotations

import signal
import sys
import time

from agent.sinks.store import Store
from agent.sources.tailer import FileTailer, TailOptions
from agent.sources.wake import Waker

SOURCE = "crash"


def main(db: str, pattern: str) -> None:
    store = Store.open(db)
    tailer = FileTailer(SOURCE, pattern, TailOptions(start_at="beginning", rotate_wait_seconds=1.0),
                        store.cursors(SOURCE))
    waker = Waker(use_inotify=True)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    while not stopping:
        batch = tailer.poll(time.time())
        store.commit(batch.lines, batch.cursors, batch.expired)
        waker.watch(tailer.watch_dirs())
        if not batch.more:
            waker.wait(0.05)
    batch = tailer.close(time.time())
    store.commit(batch.lines, batch.cursors)
    waker.close()
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
