"""journald through real journal files written by systemd-journal-remote and a real `journalctl --follow`.

Waiting is on journalctl's pipe (`JournalSource.wait`, a select), never a sleep.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.records import LogLine
from agent.sinks.store import Store
from agent.sources.journal import JournalSource, journal_command

JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not JOURNAL_REMOTE.exists(), reason="needs systemd-journal-remote (Debian package)"),
]
BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")


def append_entries(directory: Path, *entries: dict[str, str | bytes]) -> None:
    """Append entries (journal export format) to DIR/remote.journal, as journald would have written them."""
    export = bytearray()
    for i, fields in enumerate(entries):
        base: dict[str, str | bytes] = {"__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + i), "_BOOT_ID": BOOT_ID}
        for key, value in {**base, **fields}.items():
            if isinstance(value, bytes):  # the length-prefixed form carries any bytes
                export += key.encode() + b"\n" + len(value).to_bytes(8, "little") + value + b"\n"
            else:
                export += f"{key}={value}\n".encode()
        export += b"\n"
    subprocess.run([str(JOURNAL_REMOTE), "-o", str(directory / "remote.journal"), "-"], input=bytes(export),
                   check=True, capture_output=True)


def unit_entry(message: str | bytes, unit: str = "vllm.service") -> dict[str, str | bytes]:
    return {"_SYSTEMD_UNIT": unit, "MESSAGE": message}


def pump(source: JournalSource, store: Store, want: int, timeout: float = 20.0) -> list[LogLine]:
    """Poll and commit until `want` lines arrived (or the timeout: the assertion then shows what did).

    Cursors go to the store and lines to `DELIVERED[store]`, an in-test sink keyed like the store's
    records (source and journal sequence number), committed together in each step."""
    got: list[LogLine] = []
    sink = DELIVERED.setdefault(id(store), {})
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        source.wait(0.5)
        batch = source.poll(time.time())
        store.commit([], batch.cursors)
        for line in batch.lines:
            sink.setdefault((line.source, line.path, line.offset), line)
        got.extend(batch.lines)
    return got


DELIVERED: dict[int, dict[tuple[str, str, int], LogLine]] = {}


def delivered(store: Store, source: str) -> list[str]:
    return [line.text for (name, _, _), line in DELIVERED.get(id(store), {}).items() if name == source]


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "journal"
    directory.mkdir()
    return directory


@pytest.fixture
def sources() -> Iterator[list[JournalSource]]:
    made: list[JournalSource] = []
    yield made
    for source in made:
        source.close()


def test_command_line_resumes_after_the_cursor() -> None:
    cmd = journal_command("journalctl", unit="vllm.service", kernel=False, directory=Path("/j"), cursor="s=1;i=2",
                          start_at="end")
    assert cmd[1:] == ["--follow", "--output=json", "--all", "--no-pager", "--quiet", "--directory", "/j",
                       "--merge", "--unit", "vllm.service", "--after-cursor", "s=1;i=2"]
    assert journal_command("journalctl", unit=None, kernel=True, directory=None, cursor=None,
                           start_at="end")[-3:] == ["_TRANSPORT=kernel", "--lines", "0"]


def test_unit_lines_follow_and_resume_exactly_once(journal_dir: Path, sources: list[JournalSource]) -> None:
    store = Store.open(":memory:")
    append_entries(journal_dir, unit_entry("first"), unit_entry("other", unit="sshd.service"),
                   unit_entry("second"))
    source = JournalSource("vllm", unit="vllm.service", directory=journal_dir, start_at="beginning")
    sources.append(source)
    got = pump(source, store, 2)
    assert [line.text for line in got] == ["first", "second"]
    assert got[0].ts == pytest.approx(1_700_000_000.0) and got[0].stream == "vllm.service"

    append_entries(journal_dir, unit_entry("third"))  # journalctl --follow sees the journal grow
    assert [line.text for line in pump(source, store, 1)] == ["third"]
    source.close()

    append_entries(journal_dir, unit_entry("fourth"))
    resumed = JournalSource("vllm", unit="vllm.service", directory=journal_dir, start_at="beginning",
                            cursor=store.journal_cursor("vllm"))
    sources.append(resumed)
    assert [line.text for line in pump(resumed, store, 1)] == ["fourth"]
    assert delivered(store, "vllm") == ["first", "second", "third", "fourth"]


def test_replayed_entries_are_not_stored_twice(journal_dir: Path, sources: list[JournalSource]) -> None:
    store = Store.open(":memory:")
    append_entries(journal_dir, unit_entry("one"), unit_entry("two"))
    for _ in range(2):  # a source that lost its cursor reads everything again
        source = JournalSource("vllm", unit="vllm.service", directory=journal_dir, start_at="beginning")
        sources.append(source)
        pump(source, store, 2)
    assert delivered(store, "vllm") == ["one", "two"]


def test_kernel_log_carries_xid_lines(journal_dir: Path, sources: list[JournalSource]) -> None:
    store = Store.open(":memory:")
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
    append_entries(journal_dir, unit_entry("not kernel"), {"_TRANSPORT": "kernel", "MESSAGE": xid})
    source = JournalSource("kernel", kernel=True, directory=journal_dir, start_at="beginning")
    sources.append(source)
    assert [line.text for line in pump(source, store, 1)] == [xid]


def test_kernel_lines_of_a_previous_boot_are_not_skipped(journal_dir: Path, sources: list[JournalSource]) -> None:
    """The Xid that preceded a reboot is still after the cursor when the agent comes back: --dmesg (this
    boot only) would skip it; the kernel source matches _TRANSPORT=kernel across boots."""
    store = Store.open(":memory:")
    before = "NVRM: Xid (PCI:0000:3b:00): 79, pid=7, GPU has fallen off the bus."
    append_entries(journal_dir, {"_TRANSPORT": "kernel", "MESSAGE": before, "_BOOT_ID": "0" * 31 + "1"},
                   {"_TRANSPORT": "kernel", "MESSAGE": "after the reboot"})
    kernel = JournalSource("kernel", kernel=True, directory=journal_dir, start_at="beginning")
    sources.append(kernel)
    assert [line.text for line in pump(kernel, store, 2)] == [before, "after the reboot"]


def test_a_journal_without_boot_ids_is_followed(journal_dir: Path, sources: list[JournalSource]) -> None:
    """Entries exported without _BOOT_ID carry the null boot id; journalctl --follow needs --merge then."""
    store = Store.open(":memory:")
    append_entries(journal_dir, {**unit_entry("no boot id"), "_BOOT_ID": "0" * 32})
    unit = JournalSource("vllm", unit="vllm.service", directory=journal_dir, start_at="beginning")
    sources.append(unit)
    assert [line.text for line in pump(unit, store, 1)] == ["no boot id"]


def test_start_at_end_skips_history(journal_dir: Path, sources: list[JournalSource]) -> None:
    store = Store.open(":memory:")
    append_entries(journal_dir, unit_entry("old"))
    source = JournalSource("vllm", unit="vllm.service", directory=journal_dir, start_at="end")
    sources.append(source)
    got: list[LogLine] = []
    for i in range(40):  # journalctl may start after an entry: it then (rightly) skips it, so add more
        append_entries(journal_dir, unit_entry(f"new {i}"))
        got = pump(source, store, 1, timeout=0.5)
        if got:
            break
    assert got and all(line.text.startswith("new") for line in got)  # "old" would have come first


def test_invalid_utf8_and_giant_messages_are_kept_bounded(journal_dir: Path, sources: list[JournalSource]) -> None:
    store = Store.open(":memory:")
    append_entries(journal_dir, unit_entry(b"bad \xff byte"), unit_entry("x" * 5000))
    source = JournalSource("vllm", unit="vllm.service", directory=journal_dir, start_at="beginning",
                           max_line_bytes=1000)
    sources.append(source)
    bad, giant = pump(source, store, 2)
    assert bad.text == "bad \ufffd byte"
    assert giant.truncated and giant.text == "x" * 1000
    stats = source.stats()
    assert (stats.invalid_utf8_total, stats.truncated_lines_total) == (1, 1)


def test_a_dying_journalctl_is_counted_and_restarted(sources: list[JournalSource]) -> None:
    source = JournalSource("vllm", unit="vllm.service", journalctl="false", restart_seconds=0.0)
    sources.append(source)
    restarts = 0
    for step in range(50):  # `false` exits at once: each poll finds it gone and the next one restarts it
        source.wait(0.2)
        source.poll(float(step))
        restarts = source.stats().restarts_total
        if restarts >= 2:
            break
    assert restarts >= 2
