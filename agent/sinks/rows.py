"""Record → SQLite row, one entry per record type: the INSERT and the function that builds its row.

Kept apart from the store so that what a table holds is read in one place. Every INSERT is OR IGNORE
on the table's unique key (a replay stores nothing twice), except load steps, where a re-run level
replaces the old result. `now` is the commit's clock, stored as `at` for records without a time.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from agent.records import (
    CapacityFact,
    Event,
    GpuProcessSample,
    GpuSample,
    HistogramWindow,
    RequestSample,
    ServerStats,
)
from agent.verdicts import Finding, LoadStep

INT64 = (-(1 << 63), (1 << 63) - 1)  # what a SQLite INTEGER holds


def _int64(value: int | None) -> int | None:
    """A count as stored: None when it is beyond SQLite's INTEGER. A log line can print any number of digits
    (a garbled line, a hostile one); no engine counts past 2^63, so such a number is unreadable, not a count,
    and storing it must not fail the whole batch (sqlite3 raises OverflowError, not one of its own errors)."""
    return value if value is None or INT64[0] <= value <= INT64[1] else None


def _gpu_of(fields: Mapping[str, object]) -> int | None:
    gpu = fields.get("gpu")
    return _int64(gpu) if isinstance(gpu, int) and not isinstance(gpu, bool) else None


def _event_row(e: Event, now: float) -> tuple[Any, ...]:
    return (now if e.ts is None else e.ts, e.ts, e.source, e.server.value, e.kind.value, e.severity.value,
            e.phase.value, e.message, json.dumps(dict(e.fields), sort_keys=True, separators=(",", ":"), default=str),
            e.path, e.offset, _gpu_of(e.fields), e.file_key or None)


def _stats_row(s: ServerStats, now: float) -> tuple[Any, ...]:
    return (now if s.ts is None else s.ts, s.ts, s.source, s.server.value, _int64(s.running), _int64(s.waiting),
            _int64(s.swapped), s.kv_usage_ratio, s.prompt_tps, s.gen_tps, s.prefix_hit_ratio, _int64(s.preemptions),
            _int64(s.kv_used_tokens), s.path, s.offset, s.file_key)  # not `line`: the daemon's rows have none


def _request_row(r: RequestSample, now: float) -> tuple[Any, ...]:
    return (now if r.ts is None else r.ts, r.ts, r.source, r.server.value, *r[3:8])  # not `line`


def _fact_row(f: CapacityFact, now: float) -> tuple[Any, ...]:
    return (now if f.ts is None else f.ts, f.ts, f.source, f.name, f.value)


def _histogram_row(h: HistogramWindow, now: float) -> tuple[Any, ...]:
    finite = [b for b in h.bounds if math.isfinite(b)]
    return (h.ts, h.source, h.server.value, h.signal, h.count, h.sum, json.dumps(finite, separators=(",", ":")),
            json.dumps(list(h.counts), separators=(",", ":")))


def _gpu_row(g: GpuSample, now: float) -> tuple[Any, ...]:
    return (g.ts, g.gpu, g.uuid, g.name, g.pci_bus_id, g.memory_total_bytes, g.memory_reserved_bytes,
            g.memory_free_bytes, g.memory_used_bytes, g.utilization_gpu_ratio, g.utilization_memory_ratio,
            g.temperature_celsius, g.power_watts, g.power_limit_watts)


def _process_row(p: GpuProcessSample, now: float) -> tuple[Any, ...]:
    return (p.ts, p.gpu, p.uuid, p.pid, p.used_memory_bytes)


def _json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), sort_keys=True, separators=(",", ":"), default=str)


def _finding_row(f: Finding, now: float) -> tuple[Any, ...]:
    return (f.ts, f.since, f.rule, f.engine, f.severity.value, f.message, f.knob.value if f.knob else None,
            f.direction.value if f.direction else None, f.current, f.recommended, _json(f.evidence), f.arithmetic,
            f.window_seconds, int(f.active))


def _load_step_row(s: LoadStep, now: float) -> tuple[Any, ...]:
    values = [getattr(s, name) for name in LOAD_STEP_COLUMNS]
    values[LOAD_STEP_COLUMNS.index("errors")] = _json(s.errors)
    values[LOAD_STEP_COLUMNS.index("broke")] = int(s.broke)
    return tuple(values)


LOAD_STEP_COLUMNS = tuple(f.name for f in dataclasses.fields(LoadStep))


class Table(NamedTuple):
    insert: str  # INSERT OR IGNORE of one row
    row: Callable[[Any, float], tuple[Any, ...]]  # (record, commit clock) -> row
    then: str | None = None  # a second statement run with the same row (facts_latest)


# record type → how to store it. `commit` takes a mixed batch of any type registered here.
TABLES: dict[type, Table] = {
    Event: Table("INSERT OR IGNORE INTO events (at, ts, source, server, kind, severity, phase, message, fields, "
                  "path, offset, gpu, file_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _event_row),
    ServerStats: Table("INSERT OR IGNORE INTO server_stats (at, ts, source, server, running, waiting, swapped, "
                        "kv_usage_ratio, prompt_tps, gen_tps, prefix_hit_ratio, preemptions, kv_used_tokens, "
                        "path, offset, file_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        _stats_row),
    RequestSample: Table("INSERT OR IGNORE INTO request_samples (at, ts, source, server, duration_s, status, path, "
                          "offset, file_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", _request_row),
    CapacityFact: Table(
        "INSERT OR IGNORE INTO capacity_facts (at, ts, source, name, value) VALUES (?, ?, ?, ?, ?)", _fact_row,
        # The newest by time wins, so a replay of old lines never turns the latest value back.
        "INSERT INTO facts_latest (source, name, value, ts, at) VALUES (?3, ?4, ?5, ?2, ?1) "
        "ON CONFLICT (source, name) DO UPDATE SET value = excluded.value, ts = excluded.ts, at = excluded.at "
        "WHERE excluded.at >= facts_latest.at"),
    HistogramWindow: Table("INSERT OR IGNORE INTO histogram_windows (ts, source, server, signal, count, sum, "
                            "bounds, counts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _histogram_row),
    GpuSample: Table("INSERT OR IGNORE INTO gpu_samples (ts, gpu, uuid, name, pci_bus_id, memory_total_bytes, "
                      "memory_reserved_bytes, memory_free_bytes, memory_used_bytes, utilization_gpu_ratio, "
                      "utilization_memory_ratio, temperature_celsius, power_watts, power_limit_watts) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _gpu_row),
    GpuProcessSample: Table("INSERT OR IGNORE INTO gpu_process_samples (ts, gpu, uuid, pid, used_memory_bytes) "
                             "VALUES (?, ?, ?, ?, ?)", _process_row),
    Finding: Table("INSERT OR IGNORE INTO findings (ts, since, rule, engine, severity, message, knob, direction, "
                    "current, recommended, evidence, arithmetic, window_seconds, active) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _finding_row),
    LoadStep: Table(f"INSERT OR REPLACE INTO load_steps ({', '.join(LOAD_STEP_COLUMNS)}) "
                     f"VALUES ({', '.join('?' * len(LOAD_STEP_COLUMNS))})", _load_step_row),
}
