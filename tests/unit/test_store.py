"""The store on real SQLite: schema version, one-transaction commits, idempotent replays, cursors."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agent.bookkeeping import Cursor, JournalCursor
from agent.errors import StoreError
from agent.records import Event, EventKind, Phase, Server, ServerStats, Severity
from agent.sinks.store import SCHEMA_VERSION, Store


def line(offset: int, text: str = "x", key: str = "1:2:ab", path: str = "/var/log/a.log") -> Event:
    """The record made from the line at `offset` of file incarnation `key` (its text as the message)."""
    return Event(None, "src", Server.VLLM, EventKind.HTTP_503, Severity.WARNING, Phase.ADMISSION, text, {}, path,
                 offset, key)


def texts(store: Store) -> list[str]:
    return [row[0] for row in store._query("SELECT message FROM events ORDER BY rowid", ())]


def cursor(offset: int, key: str = "1:2:ab") -> Cursor:
    return Cursor("src", "/var/log/a.log", 1, 2, "8:00", offset, key, 100.0)


def test_a_new_file_is_migrated_and_in_wal_mode(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "agent.db"
    with Store.open(db) as store:
        assert store.schema_version == SCHEMA_VERSION
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_keeps_everything(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with Store.open(db) as store:
        store.commit([line(0, "a")], [cursor(2), JournalCursor("j", "s=1;i=2")])
    with Store.open(db) as store:
        assert texts(store) == ["a"]
        assert store.cursors("src") == [cursor(2)]
        assert store.journal_cursor("j") == "s=1;i=2"
        assert store.journal_cursor("other") is None


def test_replayed_lines_are_not_inserted_twice(store: Store) -> None:
    assert store.commit([line(0, "a"), line(2, "b")]).inserted == 2
    assert store.commit([line(2, "b"), line(4, "c")]).inserted == 1
    assert texts(store) == ["a", "b", "c"]
    assert store.commit([line(0, "a", key="1:2:cd")]).inserted == 1  # same path and offset, another file incarnation
    # the key is the file's identity, never its name: the same incarnation read under its rotated name
    assert store.commit([line(0, "a", path="/var/log/a.log.1")]).inserted == 0


def test_a_near_cursor_fingerprint_is_kept(store: Store) -> None:
    store.commit([], [Cursor("src", "/var/log/a.log", 1, 2, "8:00", 9, "k", 100.0, "9:ff")])
    assert store.cursors("src")[0].near == "9:ff"


def test_an_unknown_record_type_writes_nothing(store: Store) -> None:
    with pytest.raises(StoreError, match="no table for record type str"):
        store.commit([line(0), "not a record"], [cursor(2)])
    assert texts(store) == [] and store.cursors("src") == []


def test_a_failed_transaction_leaves_lines_and_cursors_as_they_were(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with Store.open(db) as store:
        store.commit([line(0, "a")], [cursor(2)])
    with sqlite3.connect(db) as conn:  # a trigger makes the cursor write fail after the lines went in
        conn.execute("CREATE TRIGGER no_cursors BEFORE INSERT ON cursors BEGIN SELECT RAISE(ABORT, 'full'); END")
    with Store.open(db) as store:
        with pytest.raises(StoreError, match="cannot write"):
            store.commit([line(2, "b")], [cursor(4)])
        assert texts(store) == ["a"]
        assert store.cursors("src") == [cursor(2)]


def test_expired_cursors_are_deleted_unless_refreshed_in_the_same_batch(store: Store) -> None:
    store.commit([], [cursor(2), cursor(5, key="k2")])
    store.commit([], [cursor(7)], expired=[cursor(2), cursor(5, key="k2")])
    assert store.cursors("src") == [cursor(7)]


def test_a_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    Store.open(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                     "VALUES ('deepinfer-agent', '9999_from_the_future', '2030-01-01')")
    with pytest.raises(StoreError, match=r"9999_from_the_future.*upgrade the agent"):
        Store.open(db)


def test_an_unusable_path_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="cannot open the store"):
        Store.open(tmp_path / "file" / "agent.db")


def test_two_processes_creating_the_store_at_once_both_succeed(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    script = "import sys; from agent.sinks.store import Store; Store.open(sys.argv[1]).close()"
    root = Path(__file__).parent.parent.parent
    procs = [subprocess.Popen([sys.executable, "-c", script, str(db)], cwd=root, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    errors = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    with Store.open(db) as store:
        assert store.schema_version == SCHEMA_VERSION


def _from_the_future(db: Path) -> None:
    Store.open(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                     "VALUES ('deepinfer-agent', '9999_from_the_future', '2030-01-01')")


def test_the_daemon_stops_on_a_newer_store_instead_of_retrying_for_ever(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    _from_the_future(db)
    config = tmp_path / "config.yaml"
    config.write_text(f"store: {{path: {db}}}\nnvml: {{enabled: false}}\nmetrics: {{listen: 127.0.0.1, port: 0}}\n")
    done = subprocess.run([sys.executable, "-m", "agent", "run", "--config", str(config)], capture_output=True,
                          text=True, timeout=60, check=False)  # today's agent buffers and retries for ever
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "9999_from_the_future" in last and "newer agent" in last, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["report", "--db"], ["advise", "--db"]])
def test_readers_refuse_a_newer_store(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "agent.db"
    _from_the_future(db)
    done = subprocess.run([sys.executable, "-m", "agent", *command, str(db)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and "newer agent" in done.stderr, done.stderr


def test_a_store_deleted_under_the_daemon_is_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import time

    from agent.config import load_config
    from agent.daemon.loop import Daemon

    db = tmp_path / "agent.db"
    (tmp_path / "vllm.log").write_text("")
    config = tmp_path / "config.yaml"
    config.write_text(f"sources: [{{path: {tmp_path / 'vllm.log'}, server: vllm, name: vllm}}]\n"
                      f"store: {{path: {db}}}\nnvml: {{enabled: false}}\n")
    daemon = Daemon(load_config(config))
    now = time.time()
    daemon.start(now)
    daemon.run_once(now)
    for path in tmp_path.glob("agent.db*"):
        path.unlink()
    with (tmp_path / "vllm.log").open("a") as out:
        out.write('(APIServer pid=1) INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 429 Too Many Requests\n')
    daemon.run_once(now + 1)
    daemon.close(now + 2)
    said = [r.getMessage() for r in caplog.records
            if r.levelname == "WARNING" and "deleted or replaced" in r.getMessage()]
    assert len(said) == 1 and str(db) in said[0]


def test_a_count_beyond_sqlites_integer_is_stored_as_unreadable(store: Store) -> None:
    """A garbled or hostile stats line can print a 30-digit count; sqlite3 refuses it with OverflowError (not a
    sqlite3.Error), which would fail the batch and, with its cursor, every retry. It is stored as NULL."""
    huge = int("1" * 30)
    store.commit([ServerStats(1.0, "src", Server.VLLM, running=huge, waiting=3, preemptions=-huge,
                              kv_used_tokens=(1 << 63) - 1, path="/var/log/a.log", offset=0),
                  Event(1.0, "src", Server.VLLM, EventKind.XID, Severity.ERROR, Phase.RUNTIME, "x", {"gpu": huge},
                        "/var/log/a.log", 9, None)],
                 [cursor(10)])
    rows = store._query("SELECT running, waiting, preemptions, kv_used_tokens FROM server_stats", ())
    assert [tuple(r) for r in rows] == [(None, 3, None, (1 << 63) - 1)]
    assert [tuple(r) for r in store._query("SELECT gpu FROM events", ())] == [(None,)]
    assert store.cursors("src") == [cursor(10)]
