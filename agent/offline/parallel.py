"""`scan --jobs N`: one large plain file read by N processes, with the same output as one.

The file is cut at line boundaries into N chunks. Chunk 0 is parsed as one job would; every later chunk
by a fresh parser of the server chunk 0 settles on (given, or detected from the file's first lines),
which first reads `probe` lines to warm up (their records are thrown away) and from then on writes its
records (JSON lines to a temporary file, or a summary). Parsing is stateful — an open traceback, a queue
that just became non-empty, the last time stamp, a start-up in progress, the de-duplication window of
incidents — so a chunk's output is only taken when it is provably what one job would have written:

- the main process carries the true parser state from the end of one chunk into the next, feeds the
  next chunk's probe lines itself (writing their records), and compares its state there with the
  worker's (`StreamParser.checkpoint()`, parsers/checkpoint.py): everything but line numbers (compared
  relative to the current line), caches and counters must be equal;
- an incident kind that only the true state remembers is checked where the worker first meets that
  kind again: the true state must also have called it new there;
- when both hold, the worker's records are the true ones and its end state (`resume`d: shifted to the true
  line numbers, plus the incident kinds it never met) becomes the true state; when either fails, the main
  process parses the rest of that chunk itself. Either way the output is byte-identical to one job's.

Docker json-file and CRI files, stdin and small files are read by one job (runtime-split lines would
straddle the cuts).
"""

from __future__ import annotations

import itertools
import os
import pickle
import shutil
import stat
import tempfile
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any, BinaryIO

from agent.offline.saved import Emit, FileScan, ended_before, feed_plain, file_newlines, no_newlines, scan_into, stamp
from agent.records import Record, Server
from agent.sources.bounded import open_saved
from agent.views.scan_progress import Progress, counted
from agent.views.scan_text import JsonlWriter
from agent.views.summary import SummaryBuilder
from parsers import REGISTRY, AutoParser, make_parser, parser_class
from parsers.base import DEDUP_WINDOW_LINES, DEDUP_WINDOW_S, StreamParser
from parsers.checkpoint import Checkpoint

MIN_CHUNK_BYTES = 8 << 20  # smaller files are not worth the processes
PROBE_LINES = 2000  # lines each later chunk reads to warm up before its records count

def _repeat(last: tuple[float | None, int], ts: float | None, line: int) -> bool:
    """`StreamParser._repeat`'s decision for an incident at (ts, line) given the kind's last one."""
    last_ts, last_line = last
    if ts is not None and last_ts is not None:
        return abs(ts - last_ts) <= DEDUP_WINDOW_S
    return line - last_line <= DEDUP_WINDOW_LINES


@dataclass
class _Chunk:
    index: int
    start: int
    end: int
    line: int = 1  # line number of its first line (newlines of the chunks before it, plus one)


@dataclass
class _Checkpoint:
    """A worker's parser state after some lines of its chunk, and where its records after that point begin."""

    offset: int  # byte offset in the file
    parser: Checkpoint
    output_at: int  # position in the JSON-lines file
    segment: int  # first summary segment after it


@dataclass
class _Done:
    """What a worker hands back."""

    lines: int  # physical lines it read in its chunk
    checkpoints: list[_Checkpoint]  # chunk 0 has none: all of its records count
    parser: bytes  # pickled end state (not flushed)
    first_seen: dict[str, tuple[float | None, int] | None]
    output: str | None  # JSON-lines file
    segments: list[SummaryBuilder]


@dataclass
class _Job:
    path: str
    source: str
    server: Server
    parser_class: type[StreamParser] | None
    ref_time: float | None
    tz: tzinfo
    jsonl: bool
    probe: int
    workdir: str


def _work(job: _Job, chunk: _Chunk) -> _Done:
    """Parse one chunk. A later chunk warms up on `probe` lines, then notes its state at checkpoints after
    probe, 2·probe, 4·probe … lines, so the main process can take its records from the first one where
    the true state agrees."""
    segments: list[SummaryBuilder] = []
    output = None
    out_handle = None
    writer: JsonlWriter | None = None
    if job.jsonl:
        output = str(Path(job.workdir) / f"chunk{chunk.index}.jsonl")
        out_handle = Path(output).open("w", encoding="utf-8")  # noqa: SIM115 - closed below
        writer = JsonlWriter(out_handle)

    def sink(records: list[Record], server: Server) -> None:
        if writer is not None:
            writer(records, server)
        else:
            segments[-1].add(records)

    checkpoints: list[_Checkpoint] = []
    first_seen: dict[str, tuple[float | None, int] | None] = {}
    with open_saved(job.path) as handle:
        newlines = file_newlines(handle) or no_newlines
        handle.seek(chunk.start)
        if chunk.index == 0:
            parser: Any = make_parser(job.server, job.source, job.ref_time, job.tz)
            lines, offset = _skip_blank(handle, chunk.start)
            segments.append(SummaryBuilder())
            count, _ = feed_plain(handle, parser, job.path, offset, sink, chunk.end, line=chunk.line + lines,
                                  newlines=newlines)
            lines += count
        else:
            assert job.parser_class is not None
            parser = inner = job.parser_class(job.source, job.ref_time, job.tz)
            lines, offset = feed_plain(handle, inner, job.path, chunk.start, lambda records, server: None,
                                       chunk.end, job.probe, chunk.line, newlines)
            first_seen = inner.note_new_incidents()
            step = job.probe
            while offset < chunk.end:
                if writer is not None:
                    writer.flush()
                segments.append(SummaryBuilder())
                checkpoints.append(_Checkpoint(offset, inner.checkpoint(),
                                               out_handle.tell() if out_handle is not None else 0, len(segments) - 1))
                count, offset = feed_plain(handle, inner, job.path, offset, sink, chunk.end, step,
                                           chunk.line + lines, newlines)
                lines += count
                step *= 2
    if writer is not None and out_handle is not None:
        writer.flush()
        out_handle.close()
    return _Done(lines, checkpoints, pickle.dumps(parser), first_seen, output, segments)


def _skip_blank(handle: BinaryIO, offset: int) -> tuple[int, int]:
    """Read past the blank lines before the first one (as one job counts and skips them)."""
    lines = 0
    while True:
        at = handle.tell()
        raw = handle.readline()
        if not raw:
            return lines, offset
        if raw.decode("utf-8", errors="replace").rstrip("\r\n").strip():
            handle.seek(at)
            return lines, offset
        lines += 1
        offset += len(raw)


def _newlines_in(path: str, chunk: _Chunk) -> int:
    """Newlines in one chunk's bytes (each worker counts its own, so later chunks know their first line)."""
    with open_saved(path) as handle:
        count = (file_newlines(handle) or no_newlines)(chunk.start, chunk.end)
    return count or 0


def chunks(path: str, size: int, jobs: int, min_bytes: int) -> list[_Chunk]:
    """Up to `jobs` byte ranges of at least `min_bytes`, each starting at a line start."""
    n = max(1, min(jobs, size // max(min_bytes, 1)))
    cuts = [0]
    with open_saved(path) as handle:
        for i in range(1, n):
            handle.seek(max(size * i // n, cuts[-1]))
            if handle.tell() > 0:
                handle.seek(handle.tell() - 1)
                handle.readline()  # to the start of the next line
            at = handle.tell()
            if cuts[-1] < at < size:
                cuts.append(at)
    cuts.append(size)
    return [_Chunk(i, a, b) for i, (a, b) in enumerate(itertools.pairwise(cuts))]


def _settled_class(path: str, source: str, server: Server, ref_time: float | None,
                   tz: tzinfo) -> type[StreamParser]:
    """The parser class one job ends up using: the given server's, or the one detected from the first lines."""
    if server is not Server.AUTO:
        return REGISTRY[server]
    probe = AutoParser(source, ref_time, tz)
    with open_saved(path) as handle:
        _, offset = _skip_blank(handle, 0)
        for raw in handle:
            probe.feed(raw.decode("utf-8", errors="replace").rstrip("\r\n"), None, path, offset)
            offset += len(raw)
            if probe.inner is not None:
                break
    probe.flush()
    return type(probe.inner) if probe.inner is not None else parser_class(Server.AUTO)


def _adopt(true: Any, done: _Done, at: _Checkpoint) -> StreamParser | None:
    """The true state after the chunk, from the worker's, when the true state agrees with the worker's at
    checkpoint `at`; None when it does not (its records from there would differ)."""
    inner = true.inner if isinstance(true, AutoParser) else true  # settled, an AutoParser is its inner parser
    if not isinstance(inner, StreamParser):
        return None
    mine, theirs = inner.checkpoint(), at.parser
    if mine.state != theirs.state or any(mine.incidents.get(kind) != entry
                                         for kind, entry in theirs.incidents.items()):
        return None
    delta = mine.lines_seen - theirs.lines_seen
    remembered = inner.incidents()
    only_true = {kind: remembered[kind] for kind in mine.incidents if kind not in theirs.incidents}
    for kind, last in only_true.items():
        first = done.first_seen.get(kind)
        if first is not None and _repeat(last, first[0], first[1] + delta):
            return None  # the true state would have called it a repeat: the worker's records differ
    adopted: StreamParser = pickle.loads(done.parser)
    adopted.resume(delta, only_true, mine.parse_errors + adopted.parse_errors - theirs.parse_errors)
    return adopted


def scan_parallel(path: Path, emit: Emit, server: Server, ref_time: float | None, tz: tzinfo, jobs: int,
                  jsonl_out: JsonlWriter | None, summary: SummaryBuilder | None,
                  min_bytes: int = MIN_CHUNK_BYTES, probe: int = PROBE_LINES,
                  progress: Progress | None = None) -> FileScan | None:
    """Scan one plain file with `jobs` processes; None when it is not worth it (one chunk) so the caller reads
    it with one job. Records reach `jsonl_out` or `summary` (and prefixes through `emit`); `progress` is told
    the bytes of the chunks done."""
    source = str(path)
    parts = chunks(source, path.stat().st_size, jobs, min_bytes)
    if len(parts) < 2:
        return None
    import multiprocessing  # here: a file read by one job does not pay for these imports
    from concurrent.futures import ProcessPoolExecutor, as_completed

    parser_class = _settled_class(source, source, server, ref_time, tz)
    workdir = tempfile.mkdtemp(prefix="deepinfer-scan-")
    try:
        job = _Job(source, source, server, parser_class, ref_time, tz, jsonl_out is not None, probe, workdir)
        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                              else None)
        with ProcessPoolExecutor(len(parts), mp_context=context) as pool:
            counts = list(pool.map(_newlines_in, [source] * (len(parts) - 1), parts[:-1]))
            for part, before, count in zip(parts[1:], parts[:-1], counts, strict=True):
                part.line = before.line + count
            futures = {pool.submit(_work, job, part): part for part in parts}
            if progress is not None:
                read = 0
                for future in as_completed(futures):
                    part = futures[future]
                    read += part.end - part.start
                    progress(read)
            done = [future.result() for future in futures]  # in chunk order (dicts keep it)
        return _stitch(source, parts, done, emit, jsonl_out, summary)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _take(done: _Done, at: _Checkpoint | None, jsonl_out: JsonlWriter | None,
          summary: SummaryBuilder | None) -> None:
    """Append a worker's records from checkpoint `at` on (None: all of them)."""
    if done.output is not None and jsonl_out is not None:
        jsonl_out.copy_from(done.output, at.output_at if at is not None else 0)
    if summary is not None:
        for segment in done.segments[at.segment if at is not None else 0:]:
            summary.merge(segment)


def _stitch(source: str, parts: list[_Chunk], done: list[_Done], emit: Emit, jsonl_out: JsonlWriter | None,
            summary: SummaryBuilder | None) -> FileScan:
    _take(done[0], None, jsonl_out, summary)
    true: Any = pickle.loads(done[0].parser)
    lines = done[0].lines
    with open_saved(source) as handle:
        newlines = file_newlines(handle) or no_newlines
        for part, result in zip(parts[1:], done[1:], strict=True):
            handle.seek(part.start)
            offset = part.start
            line = part.line
            for at in result.checkpoints:
                count, offset = feed_plain(handle, true, source, offset, emit, at.offset, line=line,
                                           newlines=newlines)
                line += count
                adopted = _adopt(true, result, at)
                if adopted is not None:
                    true = adopted
                    _take(result, at, jsonl_out, summary)
                    break
            else:  # never agreed: this chunk's records are the main process's own
                feed_plain(handle, true, source, offset, emit, part.end, line=line, newlines=newlines)
            lines += result.lines
        if records := true.flush():
            end = parts[-1].end
            emit(stamp(records, end, ended_before(newlines, end, lines), newlines), true.server)
    return FileScan(source, "plain", true.server, lines, true.parse_errors)


def scan_path(path: Path, emit: Emit, server: Server, tz: tzinfo, jobs: int, jsonl_out: JsonlWriter | None,
              summary: SummaryBuilder | None, min_bytes: int = MIN_CHUNK_BYTES, probe: int = PROBE_LINES,
              progress: Progress | None = None) -> FileScan:
    """One file: in parallel when it is plain and large enough for `jobs` > 1, else with one job; `progress`
    (views/scan_progress.py) is told the bytes read."""
    with open_saved(path) as handle:  # a device is refused; a FIFO is read once, never waited on
        info = os.fstat(handle.fileno())
        ref_time = info.st_mtime
        if jobs > 1 and stat.S_ISREG(info.st_mode) and _is_plain(path):
            scan = scan_parallel(path, emit, server, ref_time, tz, jobs, jsonl_out, summary, min_bytes, probe,
                                 progress)
            if scan is not None:
                return scan
        if progress is None:
            return scan_into(handle, str(path), emit, server, ref_time, tz)
        with counted(handle, progress) as reader:
            return scan_into(reader, str(path), emit, server, ref_time, tz)


def _is_plain(path: Path) -> bool:
    from agent.offline.saved import detect_format

    with open_saved(path) as handle:
        for raw in handle:
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if text.strip():
                return detect_format(text) == "plain"
    return True
