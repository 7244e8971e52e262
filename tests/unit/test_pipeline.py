"""The daemon's step, driven in-process with its own clock: records, counters and the snapshot."""

from __future__ import annotations

from pathlib import Path

from agent.config import load_config
from agent.daemon.loop import Daemon
from agent.daemon.totals import Totals
from agent.sinks.queries import Queries
from agent.sinks.store import Store

OOM = ("ERROR 11-29 09:00:01 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
       "2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free.")
STATS = ("INFO 11-29 09:00:02 [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
         "throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: 2 reqs, GPU KV cache usage: 42.0%, Prefix cache "
         "hit rate: 0.0%")


def test_totals_continue_across_a_restart_and_a_rebuild() -> None:
    totals = Totals({("source_lines_total", ("a",)): 100.0})
    totals.observe(("source_lines_total", ("a",)), 5)  # the new process's tailer has read 5 lines
    assert totals.values[("source_lines_total", ("a",))] == 105
    totals.observe(("source_lines_total", ("a",)), 7)
    assert totals.values[("source_lines_total", ("a",))] == 107
    totals.rebase(["source_lines_total"])  # a reload replaced the tailer: it counts from 0 again
    totals.observe(("source_lines_total", ("a",)), 1)
    assert totals.values[("source_lines_total", ("a",))] == 108
    assert totals.take_dirty() == {("source_lines_total", ("a",)): 108}
    totals.absorb(("events_total", ("a", "vllm", "oom")), 1)  # already written by the store itself
    assert totals.take_dirty() == {}


def test_one_step_classifies_stores_and_publishes(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(f"{STATS}\n{OOM}\n")
    config_path = tmp_path / "config.yaml"
    config_path.write_text("sources: [{path: vllm.log, server: vllm, name: vllm, start_at: beginning}]\n"
                           "nvml: {enabled: false}\nstore: {path: agent.db}\n")
    daemon = Daemon(load_config(config_path))
    daemon.start(1000.0)
    daemon.run_once(1000.0)
    daemon.run_once(1002.0)  # quiet for more than a second: the open traceback is closed
    snap = daemon.snapshot()
    assert snap.totals[("events_total", ("vllm", "vllm", "oom"))] == 1
    assert snap.totals[("events_total", ("vllm", "vllm", "pending"))] == 1
    assert snap.totals[("source_lines_total", ("vllm",))] == 2
    assert snap.servers["vllm"].waiting == 2
    daemon.close(1003.0)
    again = Daemon(load_config(config_path))  # a restart: cursors and counters come back from the store
    again.start(1004.0)
    again.run_once(1004.0)
    snap = again.snapshot()
    assert snap.totals[("events_total", ("vllm", "vllm", "oom"))] == 1
    assert snap.totals[("source_lines_total", ("vllm",))] == 2, "no line is read twice after a restart"
    again.close(1005.0)


TRACE = [
    "(EngineCore_DP0 pid=990) ERROR 11-29 09:00:01 [core.py:700] EngineCore encountered a fatal error.",
    "(EngineCore_DP0 pid=990) ERROR 11-29 09:00:01 [core.py:700] Traceback (most recent call last):",
    '(EngineCore_DP0 pid=990) ERROR 11-29 09:00:01 [core.py:700]   File "core.py", line 701, in run_engine_core',
    "(EngineCore_DP0 pid=990) ERROR 11-29 09:00:01 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free.",
]


def test_a_crash_inside_an_open_traceback_loses_nothing(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(f"{STATS}\n" + "".join(line + "\n" for line in TRACE[:2]))
    config_path = tmp_path / "config.yaml"
    config_path.write_text("sources: [{path: vllm.log, server: vllm, name: vllm, start_at: beginning}]\n"
                           "nvml: {enabled: false}\nstore: {path: agent.db}\n")
    first = Daemon(load_config(config_path))
    first.start(1000.0)
    first.run_once(1000.0)  # the traceback is open: its event is not out yet
    # kill -9 now: no close(), nothing flushed. The persisted cursor waits at the traceback's first line.
    with log.open("a") as handle:
        handle.write("".join(line + "\n" for line in TRACE[2:]))
    again = Daemon(load_config(config_path))
    again.start(1001.0)
    again.run_once(1001.0)
    again.run_once(1003.0)  # quiet: the traceback is complete
    totals = again.snapshot().totals
    assert totals[("events_total", ("vllm", "vllm", "engine_dead"))] == 1, "the traceback's head was re-read"
    assert totals[("events_total", ("vllm", "vllm", "oom"))] == 1
    assert totals[("events_total", ("vllm", "vllm", "pending"))] == 1, "the re-read stats line stored nothing twice"
    again.close(1004.0)


STARTUP = "INFO 11-29 08:59:00 [kv_cache_utils.py:1087] GPU KV cache size: 98,304 tokens"


def test_the_stages_run_one_at_a_time_with_a_clock_and_publish_each_engines_capacity(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(f"{STARTUP}\n{STATS}\n")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        "sources: [{path: vllm.log, server: vllm, name: vllm, start_at: beginning}]\n"
        "nvml: {enabled: false}\nstore: {path: agent.db}\n"
        "model: {preset: qwen2.5-7b, weights_gib: 14.2}\ngpu: {vram_gib: 24, overhead_gib: 1.6}\n"
        "server: {gpu_memory_fraction: 0.9, max_model_len: 8192}\n")
    daemon = Daemon(load_config(config_path))
    daemon.start(1000.0)
    ingested = daemon.ingest(1000.0)
    assert {type(r).__name__ for r in ingested.records} == {"CapacityFact", "ServerStats", "Event"}
    assert daemon.snapshot().totals.get(("events_total", ("vllm", "vllm", "pending"))) is None, "not yet committed"
    result = daemon.commit(ingested, 1000.0)
    assert [e.kind.value for e in result.new_events] == ["pending"]
    assert daemon.judge(1000.0) == []
    daemon.publish(1000.0)
    snap = daemon.snapshot()
    assert snap.budget["max_concurrency"] == 13  # the budget method's worked example
    cap = snap.capacities["vllm"]
    assert (cap.governs, cap.paper_max_concurrency, cap.max_concurrency) == ("engine", 13, 12)
    daemon.close(1001.0)


def test_a_reload_with_an_empty_config_keeps_the_running_one(tmp_path: Path) -> None:
    """An editor that truncated the file, then a SIGHUP: the sources, NVML off and the port stay as they were."""
    (tmp_path / "vllm.log").write_text(f"{OOM}\n")
    config_path = tmp_path / "config.yaml"
    config_path.write_text("sources: [{path: vllm.log, server: vllm, name: vllm, start_at: beginning}]\n"
                           "nvml: {enabled: false}\nstore: {path: agent.db}\nmetrics: {port: 9999}\n")
    daemon = Daemon(load_config(config_path), load_config=lambda: load_config(config_path))
    daemon.start(1000.0)
    daemon.run_once(1000.0)
    config_path.write_text("")
    assert daemon.reload(1001.0) is False
    assert [s.name for s in daemon.config.sources] == ["vllm"]
    assert daemon.config.nvml.enabled is False and daemon.config.metrics.port == 9999
    daemon.run_once(1001.5)  # the next step publishes the reload's outcome
    snap = daemon.snapshot()
    assert snap.totals[("config_reload_errors_total", ())] == 1 and snap.config_last_reload_ok is False
    daemon.close(1002.0)


REFUSAL = '(APIServer pid=3646) INFO:     10.0.0.9:40000 - "POST /v1/chat/completions HTTP/1.1" 429 Too Many Requests'


def stored_refusals(db: Path) -> list[int]:
    with Store.open_readonly(db) as store:
        return sorted(e.offset or 0 for e in Queries(store).recent_events(1000) if e.kind.value == "http_429")


def test_steps_sooner_than_the_commit_spacing_are_held_and_a_crash_loses_nothing(tmp_path: Path) -> None:
    """Held steps have moved no stored cursor: after a kill -9 their lines are read again, stored once."""
    log = tmp_path / "vllm.log"
    line = REFUSAL + "\n"
    log.write_text(line)
    config_path = tmp_path / "config.yaml"
    config_path.write_text("sources: [{path: vllm.log, server: vllm, name: vllm, start_at: beginning}]\n"
                           "nvml: {enabled: false}\nstore: {path: agent.db, commit_seconds: 1}\n")
    first = Daemon(load_config(config_path))
    first.start(1000.0)
    first.run_once(1000.0)  # the first write goes out at once
    assert stored_refusals(tmp_path / "agent.db") == [0]
    with log.open("a") as handle:
        handle.write(line * 2)
    first.run_once(1000.2)  # within a second of that write: held
    assert stored_refusals(tmp_path / "agent.db") == [0]
    assert first.snapshot().totals[("events_total", ("vllm", "vllm", "http_429"))] == 1, "counters follow the store"
    # kill -9 now: nothing held is written, and the stored cursor is still after the first line.
    again = Daemon(load_config(config_path))
    again.start(1001.0)
    again.run_once(1001.0)
    offsets = [0, len(line), 2 * len(line)]
    assert stored_refusals(tmp_path / "agent.db") == offsets
    with log.open("a") as handle:
        handle.write(line)
    again.run_once(1001.1)  # held again; a stop (SIGTERM) writes it before the store closes
    assert stored_refusals(tmp_path / "agent.db") == offsets
    again.close(1001.2)
    assert stored_refusals(tmp_path / "agent.db") == [*offsets, 3 * len(line)]
    with Store.open_readonly(tmp_path / "agent.db") as store:
        assert store.load_totals()[("events_total", ("vllm", "vllm", "http_429"))] == 4
