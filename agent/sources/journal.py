"""Follow journald through `journalctl --follow -o json`, resuming after the stored journal cursor.

journalctl is the stable interface to the journal (its file format and libsystemd's ABI are not ours to
track), so the source runs it as a child process and reads its JSON lines without blocking. Each entry
becomes a `LogLine` keyed by the journal's sequence-number id and sequence number (unique per journal,
so replays insert nothing twice) and a `JournalCursor`; both are committed together, and a restart
passes `--after-cursor`, so nothing is lost or repeated across a crash. If journalctl exits, the source
is down until it is restarted, at most every `restart_seconds`, from the last delivered cursor.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from agent.bookkeeping import JournalCursor, SourceBatch, SourceStats
from agent.config import SourceSection
from agent.errors import SourceError
from agent.records import LogLine

READ_BYTES_PER_POLL = 4 * 1024 * 1024


def journal_command(journalctl: str, *, unit: str | None, kernel: bool, directory: Path | None,
                    cursor: str | None, start_at: Literal["end", "beginning"]) -> list[str]:
    """The journalctl command line for one source (pure, so it is tested and documented as is)."""
    # --all: without it journalctl writes fields over 4096 bytes as null (the line would be lost).
    cmd = [journalctl, "--follow", "--output=json", "--all", "--no-pager", "--quiet"]
    if directory is not None:
        # --merge: a journal copied from another machine holds no entry of this boot, and without it
        # journalctl --follow refuses ("Data from the specified boot (+0) is not available").
        cmd += ["--directory", str(directory), "--merge"]
    if kernel:
        # The kernel's entries by match, not --dmesg: that implies --boot (this boot only), which would
        # skip the kernel lines of a previous boot still after the cursor, and clashes with --merge.
        cmd.append("_TRANSPORT=kernel")
    if unit is not None:
        cmd += ["--unit", unit]
    if cursor is not None:
        cmd += ["--after-cursor", cursor]
    else:
        cmd += ["--lines", "0" if start_at == "end" else "all"]
    return cmd


def _message(entry: dict[str, Any]) -> str | None:
    """MESSAGE as text: journalctl writes binary or invalid-UTF-8 messages as a list of byte values."""
    value = entry.get("MESSAGE")
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", "replace")
    return None


def _sequence(cursor: str) -> tuple[str, int] | None:
    """(seqnum id, seqnum) from a cursor such as `s=…;i=1a;b=…;m=…;t=…;x=…`."""
    fields = dict(part.split("=", 1) for part in cursor.split(";") if "=" in part)
    try:
        return fields["s"], int(fields["i"], 16)
    except (KeyError, ValueError):
        return None


class JournalSource:
    """One journald source; `poll(now)` returns a `SourceBatch`, `wait(timeout)` blocks until output."""

    def __init__(self, name: str, *, unit: str | None = None, kernel: bool = False, directory: Path | None = None,
                 start_at: Literal["end", "beginning"] = "end", cursor: str | None = None,
                 max_line_bytes: int = 1 << 20, journalctl: str = "journalctl",
                 restart_seconds: float = 5.0) -> None:
        found = shutil.which(journalctl)
        if found is None:
            raise SourceError(f"source {name}: {journalctl} not found: install systemd (journalctl) or "
                              f"remove the journald source")
        self.name = name
        self._args: dict[str, Any] = {"unit": unit, "kernel": kernel, "directory": directory, "start_at": start_at}
        self._journalctl = found
        self._cursor = cursor
        self._max = max_line_bytes
        self._restart_seconds = restart_seconds
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = bytearray()
        self._dropping = False
        self._next_start = 0.0
        self._count: Counter[str] = Counter()
        self.last_error = ""

    @classmethod
    def from_section(cls, section: SourceSection, cursor: str | None, journalctl: str = "journalctl") -> JournalSource:
        return cls(section.source_name(), unit=section.unit, kernel=section.kernel, directory=section.directory,
                   start_at=section.start_at, cursor=cursor, max_line_bytes=section.max_line_bytes,
                   journalctl=journalctl)

    def _start(self, now: float) -> None:
        cmd = journal_command(self._journalctl, cursor=self._cursor, **self._args)
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE)
        except OSError as exc:
            self._count["read_errors"] += 1
            self.last_error = str(exc)
            self._next_start = now + self._restart_seconds
            return
        assert self._proc.stdout is not None and self._proc.stderr is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        os.set_blocking(self._proc.stderr.fileno(), False)
        self._buf.clear()
        self._dropping = False

    def poll(self, now: float) -> SourceBatch:
        """Read what journalctl has written since the last poll (bounded); restart it if it died."""
        if self._proc is None:
            if now < self._next_start:
                return SourceBatch()
            self._start(now)
            if self._proc is None:
                return SourceBatch()
        proc = self._proc
        assert proc.stdout is not None and proc.stderr is not None
        lines: list[LogLine] = []
        got, eof = 0, False
        while got < READ_BYTES_PER_POLL:
            try:
                data = os.read(proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            if not data:
                eof = True
                break
            got += len(data)
            self._feed(data, lines)
        self._count["bytes"] += got
        self._drain_stderr(proc)
        if eof:  # journalctl exited (or closed its output): down until the restart
            self.close()
            self._count["restarts"] += 1
            self._next_start = now + self._restart_seconds
        cursors = (JournalCursor(self.name, self._cursor),) if lines and self._cursor else ()
        return SourceBatch(tuple(lines), cursors, (), more=got >= READ_BYTES_PER_POLL)

    def _drain_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        try:
            text = os.read(proc.stderr.fileno(), 4096)
        except BlockingIOError:
            return
        if text.strip():
            self.last_error = text.decode("utf-8", "replace").strip().splitlines()[-1]

    def _feed(self, data: bytes, out: list[LogLine]) -> None:
        """Split journalctl's output into JSON lines; an entry longer than the bound is skipped and counted."""
        limit = 4 * self._max + 65536  # JSON escaping can quadruple a message
        start = 0
        while True:
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline
            if not self._dropping:
                self._buf += data[start:end]
                if len(self._buf) > limit:
                    self._buf.clear()
                    self._dropping = True
                    self._count["read_errors"] += 1
            if newline < 0:
                return
            if not self._dropping and self._buf:
                self._entry(bytes(self._buf), out)
            self._buf.clear()
            self._dropping = False
            start = newline + 1

    def _entry(self, raw: bytes, out: list[LogLine]) -> None:
        try:
            entry = json.loads(raw)
        except ValueError:
            self._count["framing_errors"] += 1
            return
        if not isinstance(entry, dict):
            self._count["framing_errors"] += 1
            return
        cursor = entry.get("__CURSOR")
        text = _message(entry)
        seq = _sequence(cursor) if isinstance(cursor, str) else None
        if text is None or seq is None:
            self._count["framing_errors"] += 1
            return
        assert isinstance(cursor, str)
        self._cursor = cursor
        truncated = len(text.encode("utf-8", "replace")) > self._max
        if truncated:
            text = text.encode("utf-8", "replace")[: self._max].decode("utf-8", "ignore")
            self._count["truncated_lines"] += 1
        if "\ufffd" in text:
            self._count["invalid_utf8"] += 1
        try:
            ts: float | None = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
        except (KeyError, ValueError, TypeError):
            ts = None
        unit = entry.get("_SYSTEMD_UNIT")
        path = f"journal:{self._args['unit'] or 'kernel'}"
        out.append(LogLine(self.name, path, seq[1], text, ts, unit if isinstance(unit, str) else None,
                           truncated, f"journal:{seq[0]}"))
        self._count["lines"] += 1

    def fileno(self) -> int | None:
        """The pipe to wait on (select/poll), None while journalctl is not running."""
        return self._proc.stdout.fileno() if self._proc is not None and self._proc.stdout is not None else None

    def wait(self, timeout: float) -> bool:
        """Block until journalctl has output (True) or `timeout` seconds pass; never sleeps blindly."""
        fd = self.fileno()
        if fd is None:
            return False
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)

    def stats(self) -> SourceStats:
        c = self._count
        return SourceStats(self.name, self._proc is not None, 1 if self._proc is not None else 0, c["lines"],
                           c["bytes"], 0, 0, c["read_errors"], 0, c["invalid_utf8"], c["truncated_lines"],
                           c["framing_errors"], c["restarts"], 0)

    def close(self) -> None:
        """Stop journalctl; nothing is held back (entries are delivered whole), so nothing is flushed."""
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            for stream in (self._proc.stdout, self._proc.stderr):
                if stream is not None:
                    stream.close()
            self._proc = None

