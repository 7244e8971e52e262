"""Saved logs into a store, with no daemon: what `advise --log` and `report --log` stand on.

A log copied from another node goes through the same parsers as the daemon's, and its records land in
a store (usually `:memory:`) where the same read queries, rules and views work on it. Each file is its
own engine instance, named by its path (or by `engine` when the caller names it), so two engines'
logs are never judged as one. Records carry their own times; lines without a time are dated by the
file's modification time, as `scan` does; `-` is standard input (its lines dated by now).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import timezone, tzinfo
from pathlib import Path

from agent.errors import AgentError
from agent.offline.saved import FileScan, scan_stream
from agent.records import Server
from agent.sinks.store import Store
from agent.sources.bounded import open_saved


def load_logs(paths: Sequence[Path], store: Store, *, server: Server = Server.AUTO,
              tz: tzinfo = timezone.utc) -> list[FileScan]:
    """Parse each saved log and commit its records to `store`; return what each file gave (without its
    records, which are in the store). An unreadable file is an AgentError naming it."""
    out: list[FileScan] = []
    for path in paths:
        if str(path) == "-":  # standard input, as `scan -` reads it
            scan = scan_stream(sys.stdin.buffer, "-", server, time.time(), tz)
            store.commit(scan.records, now=time.time())
            scan.records = []
            out.append(scan)
            continue
        try:
            with open_saved(path) as handle:
                scan = scan_stream(handle, str(path), server, path.stat().st_mtime, tz)
        except OSError as exc:
            raise AgentError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        store.commit(scan.records, now=path.stat().st_mtime)
        scan.records = []
        out.append(scan)
    return out
