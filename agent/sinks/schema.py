"""The store's schema as SQL, one migration per shipped step: append new steps, never edit a shipped one.

`agent/sinks/store.py` applies them with sqlite-utils' `Migrations` (which records each applied step
in `_sqlite_migrations` and runs it in one transaction with that record).

Keys: a record from a file is located by (path, offset); records from no file (NVML, scrapes) are keyed
by time, GPU and, for events, the message (two different Xids on one GPU in one poll are two events).
NULLs are folded with coalesce(): SQLite treats NULLs as distinct in a unique index, which would let
replays through. `at` is the record's own time, or the commit's clock when the line had none.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("0001_lines_and_cursors", """
CREATE TABLE lines (
    file_key TEXT NOT NULL, offset INTEGER NOT NULL, source TEXT NOT NULL, path TEXT NOT NULL,
    text TEXT NOT NULL, ts REAL, stream TEXT, truncated INTEGER NOT NULL,
    PRIMARY KEY (file_key, offset));
CREATE INDEX lines_source ON lines (source);
CREATE TABLE cursors (
    source TEXT NOT NULL, file_key TEXT NOT NULL, path TEXT NOT NULL, dev INTEGER NOT NULL,
    inode INTEGER NOT NULL, fingerprint TEXT NOT NULL, offset INTEGER NOT NULL, seen_seconds REAL NOT NULL,
    PRIMARY KEY (source, file_key));
CREATE TABLE journal_cursors (source TEXT PRIMARY KEY, cursor TEXT NOT NULL);
"""),
    ("0002_daemon_records", """
CREATE TABLE events (
    at REAL NOT NULL, ts REAL, source TEXT NOT NULL, server TEXT NOT NULL, kind TEXT NOT NULL,
    severity TEXT NOT NULL, phase TEXT NOT NULL, message TEXT NOT NULL, fields TEXT NOT NULL,
    path TEXT, offset INTEGER, gpu INTEGER);
CREATE UNIQUE INDEX events_key ON events (source, kind, coalesce(ts, -1), coalesce(path, ''),
    coalesce(offset, -1), coalesce(gpu, -1), CASE WHEN path IS NULL THEN message ELSE '' END);
CREATE INDEX events_at ON events (at);
CREATE INDEX events_source_at ON events (source, at);
CREATE INDEX events_kind_at ON events (kind, at);
CREATE TABLE server_stats (
    at REAL NOT NULL, ts REAL, source TEXT NOT NULL, server TEXT NOT NULL, running INTEGER, waiting INTEGER,
    swapped INTEGER, kv_usage_ratio REAL, prompt_tps REAL, gen_tps REAL, prefix_hit_ratio REAL,
    preemptions INTEGER, kv_used_tokens INTEGER, path TEXT, offset INTEGER);
CREATE UNIQUE INDEX server_stats_key ON server_stats (source, coalesce(path, ''),
    coalesce(offset, -1), coalesce(ts, -1));
CREATE INDEX server_stats_at ON server_stats (at);
CREATE INDEX server_stats_source_at ON server_stats (source, at);
CREATE TABLE capacity_facts (
    at REAL NOT NULL, ts REAL, source TEXT NOT NULL, name TEXT NOT NULL, value);
CREATE UNIQUE INDEX capacity_facts_key ON capacity_facts (source, name, coalesce(ts, -1), value);
CREATE INDEX capacity_facts_at ON capacity_facts (at);
CREATE TABLE facts_latest (
    source TEXT NOT NULL, name TEXT NOT NULL, value, ts REAL, at REAL NOT NULL, PRIMARY KEY (source, name));
CREATE TABLE gpu_samples (
    ts REAL NOT NULL, gpu INTEGER NOT NULL, uuid TEXT NOT NULL, name TEXT NOT NULL, pci_bus_id TEXT,
    memory_total_bytes INTEGER, memory_reserved_bytes INTEGER, memory_free_bytes INTEGER,
    memory_used_bytes INTEGER, utilization_gpu_ratio REAL, utilization_memory_ratio REAL,
    temperature_celsius REAL, power_watts REAL, power_limit_watts REAL, UNIQUE (uuid, ts));
CREATE INDEX gpu_samples_ts ON gpu_samples (ts);
CREATE TABLE gpu_process_samples (
    ts REAL NOT NULL, gpu INTEGER NOT NULL, uuid TEXT NOT NULL, pid INTEGER NOT NULL,
    used_memory_bytes INTEGER, UNIQUE (uuid, pid, ts));
CREATE INDEX gpu_process_samples_ts ON gpu_process_samples (ts);
CREATE INDEX gpu_process_samples_uuid_ts ON gpu_process_samples (uuid, ts);
CREATE TABLE totals (
    metric TEXT NOT NULL, labels TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (metric, labels));
"""),
    ("0003_findings_and_load_steps", """
CREATE TABLE findings (
    ts REAL NOT NULL, since REAL NOT NULL, rule TEXT NOT NULL, engine TEXT NOT NULL, severity TEXT NOT NULL,
    message TEXT NOT NULL, knob TEXT, direction TEXT, current, recommended, evidence TEXT NOT NULL,
    arithmetic TEXT NOT NULL, window_seconds REAL, active INTEGER NOT NULL, UNIQUE (rule, engine, ts));
CREATE INDEX findings_ts ON findings (ts);
CREATE TABLE load_steps (
    run_id TEXT NOT NULL, target TEXT NOT NULL, level INTEGER NOT NULL, started REAL NOT NULL,
    ended REAL NOT NULL, requests INTEGER NOT NULL, ok INTEGER NOT NULL, errors TEXT NOT NULL,
    throughput_rps REAL, output_tokens_per_second REAL, latency_p50_seconds REAL, latency_p95_seconds REAL,
    latency_p99_seconds REAL, ttft_p50_seconds REAL, ttft_p95_seconds REAL, ttft_p99_seconds REAL,
    gpu_memory_peak_bytes INTEGER, kv_usage_peak_ratio REAL, running_peak INTEGER, waiting_peak INTEGER,
    oom_events INTEGER NOT NULL, preemption_events INTEGER NOT NULL, broke INTEGER NOT NULL,
    reason TEXT NOT NULL, PRIMARY KEY (run_id, level));
CREATE INDEX load_steps_started ON load_steps (started);
"""),
)

MIGRATIONS += (
    # A record from a file is keyed by the file's identity (the tailer's file_key: device, inode and first
    # bytes, one per incarnation) and its offset, never by the file's name: names repeat offsets after every
    # rotation, and second-resolution stamps of two files started in one second collide. Rows written
    # before (file_key NULL) keep their old key. The cursor gains `near`, a fingerprint of the bytes before
    # it (a file rewritten in place past the cursor keeps its first bytes, not these). The raw `lines`
    # table, which only tests read, goes: raw lines may hold prompts.
    ("0004_file_identity_keys", """
DROP TABLE lines;
ALTER TABLE cursors ADD COLUMN near TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN file_key TEXT;
DROP INDEX events_key;
CREATE UNIQUE INDEX events_key ON events (source, kind, coalesce(file_key, ''), coalesce(offset, -1),
    CASE WHEN file_key IS NULL THEN coalesce(ts, -1) ELSE 0 END,
    CASE WHEN file_key IS NULL THEN coalesce(path, '') ELSE '' END, coalesce(gpu, -1),
    CASE WHEN path IS NULL AND file_key IS NULL THEN message ELSE '' END);
ALTER TABLE server_stats ADD COLUMN file_key TEXT;
DROP INDEX server_stats_key;
CREATE UNIQUE INDEX server_stats_key ON server_stats (source, coalesce(file_key, ''),
    CASE WHEN file_key IS NULL THEN coalesce(path, '') ELSE '' END, coalesce(offset, -1),
    CASE WHEN file_key IS NULL THEN coalesce(ts, -1) ELSE 0 END);
"""),
)

MIGRATIONS += (
    # Scraped latency and length histograms: per scrape and signal, the requests that finished since the
    # previous scrape (agent/histograms.py). `bounds` is a JSON list of the finite upper bounds, `counts`
    # the cumulative counts at each of them and at +Inf (one more); `count` is that last one, repeated
    # so a window's requests can be summed without reading JSON. A scrape always has a time, so `ts` is
    # the only time column (as in gpu_samples), and the unique key serves the windows' reads.
    ("0005_histogram_windows", """
CREATE TABLE histogram_windows (
    ts REAL NOT NULL, source TEXT NOT NULL, server TEXT NOT NULL, signal TEXT NOT NULL, count REAL NOT NULL,
    sum REAL NOT NULL, bounds TEXT NOT NULL, counts TEXT NOT NULL, UNIQUE (source, signal, ts));
CREATE INDEX histogram_windows_ts ON histogram_windows (ts);
"""),
)

MIGRATIONS += (
    # Per-request durations from access lines and the engines' per-request lines (agent/records.py
    # `RequestSample`): what the timeout rules read without a scrape. Keyed like server_stats, by where the
    # line was, so a replay stores nothing twice.
    ("0006_request_samples", """
CREATE TABLE request_samples (
    at REAL NOT NULL, ts REAL, source TEXT NOT NULL, server TEXT NOT NULL, duration_s REAL NOT NULL,
    status INTEGER, path TEXT, offset INTEGER, file_key TEXT);
CREATE UNIQUE INDEX request_samples_key ON request_samples (source, coalesce(file_key, ''),
    CASE WHEN file_key IS NULL THEN coalesce(path, '') ELSE '' END, coalesce(offset, -1),
    CASE WHEN file_key IS NULL THEN coalesce(ts, -1) ELSE 0 END);
CREATE INDEX request_samples_source_at ON request_samples (source, at);
"""),
)

# Time-series tables retention prunes, with their time column. Cursors, totals and facts_latest are
# never pruned (they are small and bounded by the number of files, metrics and facts).
PRUNED = (("events", "at"), ("server_stats", "at"), ("capacity_facts", "at"), ("gpu_samples", "ts"),
          ("gpu_process_samples", "ts"), ("findings", "ts"), ("load_steps", "started"), ("histogram_windows", "ts"),
          ("request_samples", "at"))
