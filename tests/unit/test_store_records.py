"""The daemon's tables on real SQLite files: keys that make replays harmless, totals, retention, readers."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sqlite_utils import Database  # only to build a store as the previous release left it

from agent.errors import StoreError
from agent.records import (
    CapacityFact,
    Event,
    EventKind,
    GpuProcessSample,
    GpuSample,
    Phase,
    Server,
    ServerStats,
    Severity,
)
from agent.sinks.queries import Queries
from agent.sinks.store import MIGRATIONS, SCHEMA_VERSION, Store

ROOT = Path(__file__).parent.parent.parent


def event(offset: int | None, ts: float | None = 100.0, kind: EventKind = EventKind.OOM, source: str = "vllm",
          path: str | None = "/var/log/vllm.log", **fields: float | int | str | None) -> Event:
    return Event(ts, source, Server.VLLM, kind, Severity.ERROR, Phase.RUNTIME, f"{kind.value} at {offset}",
                 fields, path if offset is not None else None, offset)


def stats(ts: float | None, offset: int | None = None, source: str = "vllm", running: int = 3) -> ServerStats:
    return ServerStats(ts, source, Server.VLLM, running=running, waiting=1, kv_usage_ratio=0.5,
                       path="/var/log/vllm.log" if offset is not None else None, offset=offset)


def gpu(ts: float, index: int = 0, used: int = 10) -> GpuSample:
    return GpuSample(ts, index, f"GPU-{index}", "H200", "0000:01:00.0", 100, 1, 89, used, 0.5, 0.25, 40.0, 300.0,
                     700.0)


def test_a_mixed_batch_is_stored_and_read_back(tmp_path: Path) -> None:
    with Store.open(tmp_path / "agent.db") as store:
        xid = Event(50.0, "nvml", Server.NVML, EventKind.XID, Severity.CRITICAL, Phase.RUNTIME, "Xid 79",
                    {"gpu": 1, "xid": 79, "uuid": "GPU-1"})
        result = store.commit([event(0, fields_n=1), stats(100.0, 10), CapacityFact(90.0, "vllm", "kv_cache_tokens",
                               176240.0), CapacityFact(90.0, "vllm", "model", "Qwen"), gpu(100.0),
                               GpuProcessSample(100.0, 0, "GPU-0", 4242, 8), xid], now=200.0)
        assert result.inserted == 7
        assert result.new_events == (event(0, fields_n=1), xid)
        assert result.event_counts() == {("vllm", "vllm", "oom"): 1, ("nvml", "nvml", "xid"): 1}
        assert Queries(store).recent_events(10) == [event(0, fields_n=1), xid]
        assert Queries(store).latest_stats() == {"vllm": stats(100.0, 10)}
        assert Queries(store).latest_facts() == {"vllm": {"kv_cache_tokens": 176240.0, "model": "Qwen"}}
        assert Queries(store).latest_gpu_samples() == [gpu(100.0)]
        assert Queries(store).latest_gpu_processes() == [GpuProcessSample(100.0, 0, "GPU-0", 4242, 8)]
    with sqlite3.connect(tmp_path / "agent.db") as conn:  # enums as their lowercase values, fields as JSON
        assert conn.execute("SELECT server, kind, severity, phase, fields FROM events WHERE gpu = 1").fetchone() == (
            "nvml", "xid", "critical", "runtime", '{"gpu":1,"uuid":"GPU-1","xid":79}')


def test_a_replay_inserts_nothing_twice_and_counts_nothing(store: Store) -> None:
    batch = [event(0), event(0, kind=EventKind.PREEMPTION), stats(100.0, 10), stats(101.0),
             CapacityFact(90.0, "vllm", "gpu_blocks", 100.0), gpu(100.0), GpuProcessSample(100.0, 0, "GPU-0", 1, 2)]
    assert store.commit(batch, now=1.0).inserted == 7
    again = store.commit(batch, now=2.0)
    assert again.inserted == 0 and again.new_events == ()
    assert store.load_totals() == {("events_total", ("vllm", "vllm", "oom")): 1.0,
                                   ("events_total", ("vllm", "vllm", "preemption")): 1.0}


def test_records_without_a_time_are_keyed_without_it_and_dated_by_the_commit(store: Store) -> None:
    assert store.commit([event(7, ts=None), stats(None, 7)], now=500.0).inserted == 2
    assert store.commit([event(7, ts=None), stats(None, 7)], now=900.0).inserted == 0  # a replay after a restart
    assert [e.ts for e in Queries(store).recent_events()] == [500.0]  # read back with when it was stored
    assert [s.ts for s in Queries(store).window_stats(0.0)] == [500.0]


def test_the_same_offset_in_a_rotated_file_is_a_new_record_when_its_time_differs(store: Store) -> None:
    assert store.commit([event(0, ts=100.0), stats(100.0, 0)]).inserted == 2
    assert store.commit([event(0, ts=200.0), stats(200.0, 0)]).inserted == 2


def test_events_from_no_file_are_told_apart_by_gpu_and_message(store: Store) -> None:
    def xid(gpu_index: int, code: int) -> Event:
        return Event(5.0, "nvml", Server.NVML, EventKind.XID, Severity.ERROR, Phase.RUNTIME, f"Xid {code}",
                     {"gpu": gpu_index, "xid": code})
    assert store.commit([xid(0, 79), xid(1, 79), xid(0, 48), xid(0, 79)]).inserted == 3


def test_latest_fact_is_the_newest_by_time_not_the_last_written(store: Store) -> None:
    store.commit([CapacityFact(200.0, "vllm", "max_num_seqs", 64.0)])
    store.commit([CapacityFact(100.0, "vllm", "max_num_seqs", 256.0)])  # an old line read again later
    assert Queries(store).latest_facts("vllm") == {"vllm": {"max_num_seqs": 64.0}}
    assert Queries(store).latest_facts("other") == {}


def test_queries_filter_by_time_and_source(store: Store) -> None:
    store.commit([stats(float(t), t, source=s, running=t) for t in range(10) for s in ("a", "b")]
                 + [event(t, ts=float(t)) for t in range(10)])
    assert [s.running for s in Queries(store).window_stats(3.0, 6.0, source="a")] == [3, 4, 5]
    assert {k: v.running for k, v in Queries(store).latest_stats().items()} == {"a": 9, "b": 9}
    assert list(Queries(store).latest_stats("b")) == ["b"]
    assert [e.offset for e in Queries(store).recent_events(3)] == [9, 8, 7]
    assert [e.offset for e in Queries(store).recent_events(100, since=8.0)] == [9, 8]
    assert Queries(store).event_counts(2.0, 5.0) == {("vllm", "vllm", "oom"): 3}
    assert Queries(store).event_totals() == {("vllm", "vllm", "oom"): 10}


def test_totals_survive_a_reopen_and_events_bump_their_own(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with Store.open(db) as store:
        store.commit([event(0)], totals={("lines_total", ("vllm",)): 10.0})
        store.commit([event(1)], totals={("lines_total", ("vllm",)): 25.0, ("xid_errors_total", ("0", "79")): 1})
    with Store.open(db) as store:
        assert store.load_totals() == {("lines_total", ("vllm",)): 25.0, ("xid_errors_total", ("0", "79")): 1.0,
                                       ("events_total", ("vllm", "vllm", "oom")): 2.0}


def test_xid_counters_move_in_the_commit_once_per_new_event(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a.db") as store:
        x = Event(5.0, "nvml", Server.NVML, EventKind.XID, Severity.ERROR, Phase.RUNTIME, "Xid 79",
                  {"gpu": 0, "xid": 79})
        store.commit([x, event(0)])
        store.commit([x])
        assert store.load_totals() == {("gpu_xid_errors_total", ("0", "79")): 1.0,
                                       ("events_total", ("nvml", "nvml", "xid")): 1.0,
                                       ("events_total", ("vllm", "vllm", "oom")): 1.0}


def test_retention_by_age_prunes_oldest_first_in_batches_and_keeps_cursors_totals_facts(tmp_path: Path) -> None:
    with Store.open(tmp_path / "agent.db", retention_days=1.0, prune_batch_rows=7) as store:
        day = 86400.0
        store.commit([stats(float(t), t) for t in range(10)] + [gpu(float(t)) for t in range(10)]
                     + [CapacityFact(0.0, "vllm", "gpu_blocks", 5.0)], totals={("x", ()): 1.0})
        store.commit([stats(day + 50, 99)])
        assert store.prune(day + 5.5) == 7  # 13 rows are older than a day (6 stats + 6 samples + 1 fact)
        assert store.prune(day + 5.5) == 6
        assert store.prune(day + 5.5) == 0
        assert [s.ts for s in Queries(store).window_stats(0.0)] == [6.0, 7.0, 8.0, 9.0, day + 50]
        assert Queries(store).latest_facts() == {"vllm": {"gpu_blocks": 5.0}}
        assert store.load_totals() == {("x", ()): 1.0}


def test_retention_by_size_prunes_until_the_live_data_fits(tmp_path: Path) -> None:
    with Store.open(tmp_path / "agent.db", max_bytes=1_000_000, prune_batch_rows=500) as store:
        store.commit([stats(float(t), t) for t in range(20_000)])
        assert store.used_bytes() > 2_000_000
        rounds = 0
        while store.prune(1e9) and rounds < 100:
            rounds += 1
        assert store.used_bytes() <= 1_000_000 and rounds > 1
        left = Queries(store).window_stats(0.0)
        assert 4_000 < len(left) < 8_000  # about what a megabyte holds: not everything went
        assert left[-1].ts == 19_999.0 and left[0].ts == 20_000 - len(left)  # the oldest went


def test_the_file_and_its_wal_are_created_0640(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with Store.open(db) as store:
        store.commit([event(0)])
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes["agent.db"] == 0o640
    assert modes.get("agent.db-wal", 0o640) == 0o640 and modes.get("agent.db-shm", 0o640) == 0o640
    assert "agent.db-wal" in modes


def test_a_readonly_store_reads_and_refuses_to_write(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with Store.open(db) as store:
        store.commit([event(0)])
    with Store.open_readonly(db) as reader:
        assert Queries(reader).event_totals() == {("vllm", "vllm", "oom"): 1}
        assert reader.db_bytes() > 0
        with pytest.raises(StoreError, match="cannot write"):
            reader.commit([event(1)])
    with pytest.raises(StoreError, match="no store there"):
        Store.open_readonly(tmp_path / "missing.db")


# A second process holds a transaction open until told to go (a line on stdin).
HOLDER = """
import sqlite3, sys
mode, path = sys.argv[1], sys.argv[2]
if mode == "read":
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM server_stats").fetchone()  # the read snapshot is now held
else:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO server_stats (at, source, server) VALUES (1, 'held', 'vllm')")
print("holding", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


def _hold(mode: str, db: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, mode, str(db)], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()  # the transaction is open
    return proc


def test_a_reader_in_another_process_never_blocks_the_writer_and_vice_versa(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with Store.open(db, busy_timeout_ms=0) as writer:  # no waiting allowed: any lock conflict would raise
        writer.commit([stats(1.0, 1)])
        reader_proc = _hold("read", db)  # a reader in the middle of a read transaction
        try:
            assert writer.commit([stats(2.0, 2)]).inserted == 1
        finally:
            reader_proc.communicate("go\n")
        writer_proc = _hold("write", db)  # another writer holding an uncommitted insert
        try:
            with Store.open_readonly(db, busy_timeout_ms=0) as reader:
                assert len(Queries(reader).window_stats(0.0)) == 2  # reads the last committed state at once
        finally:
            writer_proc.communicate("go\n")
        assert reader_proc.returncode == 0 and writer_proc.returncode == 0


def test_a_store_from_before_the_daemon_tables_is_upgraded_in_place(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    old = Database(db)
    MIGRATIONS.apply(old, stop_before="0002_daemon_records")  # what the previous release left
    old.close()
    with pytest.raises(StoreError, match="start the agent once to upgrade it"):
        Store.open_readonly(db)
    with Store.open(db) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.commit([event(0)]).inserted == 1



def test_migrations_only_ever_append_and_a_0004_store_gains_the_histogram_table(tmp_path: Path) -> None:
    from agent.sinks.store import KNOWN_MIGRATIONS

    # Shipped steps are never renamed, reordered or removed: a store records the names it has applied.
    assert KNOWN_MIGRATIONS[:5] == ("0001_lines_and_cursors", "0002_daemon_records", "0003_findings_and_load_steps",
                                    "0004_file_identity_keys", "0005_histogram_windows")
    db = tmp_path / "agent.db"
    old = Database(db)
    MIGRATIONS.apply(old, stop_before="0005_histogram_windows")  # what the previous release left
    old.execute("INSERT INTO events (at, ts, source, server, kind, severity, phase, message, fields) "
                "VALUES (1, 1, 'vllm', 'vllm', 'oom', 'critical', 'runtime', 'm', '{}')")
    old.conn.commit()
    old.close()
    with pytest.raises(StoreError, match="lacks 0005_histogram_windows"):
        Store.open_readonly(db)
    with Store.open(db) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.query("SELECT count(*) FROM events") == [(1,)], "rows written before stay"
        assert store.query("SELECT count(*) FROM histogram_windows") == [(0,)]
