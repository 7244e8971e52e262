"""The machinery every server parser shares: one stateful pass per line, signatures, multi-line incidents.

A parser is fed one line at a time (`feed`) and returns the records that line completes; `flush`
returns what is still held (an open traceback) at the end of a stream or after a quiet spell. State
is per stream, which is why a parser is an object and not a function: a Python traceback spans many
lines but is one occurrence; vLLM re-prefixes every line of a multi-line message with the same
`LEVEL date [file:line]`; `pending` means "the queue became non-empty", which needs the previous
sample; vLLM V0 reports preemptions as a cumulative total every 50th time, so the increment needs the
previous total.

Cost model: most lines are boring. An access line whose status is not an error (4xx/5xx: a refusal, a failed
request, a gateway timeout) is dropped after one `find`; the server's stats line goes straight to its parser;
anything else must match one pre-filter of literal keywords; only then is a line split and matched against
signatures (or when a traceback is open). Patterns use the standard `re` module, which runs these patterns
about twice as fast as `regex`; safety comes from the patterns themselves: bounded repeats, no nested
quantifiers, and lines cut at `MAX_LINE_CHARS`. tests/unit/test_properties.py recompiles every pattern with
`regex` and runs it on adversarial lines under `regex`'s timeout, so a pattern that could backtrack
catastrophically fails the build rather than a node.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timezone, tzinfo
from typing import ClassVar

from agent.records import (
    CapacityFact,
    Event,
    EventKind,
    FieldValue,
    Phase,
    Record,
    RequestSample,
    Server,
    ServerStats,
    Severity,
    event_with,
)
from parsers import families, refusal_lines
from parsers.checkpoint import Checkpoint, Incidents, NewKinds
from parsers.http_access import carries_duration, timed
from parsers.paste import ESCAPED_TRACEBACK, WRAP_WIDTHS, continues_wrap, escaped_lines, unpaste
from parsers.paste import STARTS as PASTE_STARTS
from parsers.prefix import (
    ANSI,
    CJK_MONTH,
    COMPOSE,
    CONTINUATION,
    MONTH_STARTS,
    OPENS_BLOCK,
    OUTER,
    SYSLOG,
    Split,
    boring_access,
    earliest,
    last_segment,
    source_last,
    syslog_month,
)
from parsers.redact import (
    is_request_log,
    opens_request_text,
    opens_unclosed_quote,
    redact,
    redact_fields,
    request_outcome,
    scrub,
)
from parsers.refusals import OneRefusal
from parsers.signature import Prefilter, Signature, hot, index_of
from parsers.stamps import Stamps

# (words, reader) of load lines, as `StreamParser.read_load` asks them: (running, waiting, KV usage ratio), or a
# speed alone (prompt, generation tokens a second), None where the line does not say
LoadReaders = tuple[tuple[tuple[str, ...], Callable[[str], tuple[int | None, int | None, float | None] | None]], ...]
SpeedReaders = tuple[tuple[tuple[str, ...], Callable[[str], tuple[float | None, float | None] | None]], ...]


def _holds_any(text: str, words: tuple[str, ...]) -> bool:
    for word in words:  # noqa: SIM110 - a loop beats any() over a generator on a parser's line path
        if word in text:
            return True
    return False


MAX_LINE_CHARS = 64 * 1024  # engine-arg dumps reach ~10 KiB; anything longer is cut, never rejected

MAX_BLOCK_LINES = 400  # a traceback longer than this is still one event; the rest is not kept
DEDUP_WINDOW_S = 30.0  # the same incident reported by several ranks / re-raised by the API server
DEDUP_WINDOW_LINES = 300  # the same, when lines carry no time
WRAP_A, WRAP_B = WRAP_WIDTHS
WRAP_MIN = min(WRAP_WIDTHS)
MAX_REQUEST_LINES = 2000  # a prompt logged over more lines than this ends there (a lost closing quote)
QUIET_LINES = 50  # a traceback of another process left open this many lines is complete
# A parser's attributes that are not behaviour (where it reads, caches, counters), and those `checkpoint` takes
# apart to number their lines relatively.
_NOT_STATE = frozenset({"source", "stamps", "lines_seen", "_parse_errors", "_last_incident", "_blocks", "_waiting"})


@dataclass
class _Block:
    """An open multi-line occurrence (traceback or re-prefixed message) of one process."""

    first: Split
    path: str | None
    offset: int | None
    lines: list[str] = field(default_factory=list)
    last_line_no: int = 0


def cleaned_by_feed(text: str) -> bool:
    """Whether `StreamParser._feed` changes the line before reading it (a NUL hole before it, over
    `MAX_LINE_CHARS`, ANSI colour, a carriage return): the shortcuts that read a line as it is decline such a one."""
    return text[:1] == "\x00" or len(text) > MAX_LINE_CHARS or "\x1b" in text or "\r" in text


class StreamParser:
    """One log stream of one server. Subclasses give the prefix splitter, the signatures and the ready markers.

    `ref_time` (epoch seconds: the envelope time, or the file's mtime) supplies the year to time
    stamps that have none (vLLM's `%m-%d %H:%M:%S`, syslog); `tz` is the zone of local-time stamps.
    """

    server: Server = Server.AUTO
    HOT: Prefilter | re.Pattern[str] = hot()  # literal keywords that make a line worth a look
    SIGNATURES: tuple[Signature, ...] = ()
    STARTING: re.Pattern[str] = re.compile(r"(?!)")  # a (re)start began: failures are start-up
    READY: re.Pattern[str] = re.compile(r"(?!)")  # the server is serving
    STATS_WORD = "\x00"  # a literal only the server's periodic stats line contains (fast path)
    STATS_WORD2 = "\x00"  # a second form of it (llama.cpp: per-slot `t/s` lines and `tokens per second` timings)
    OUTER_STAMP = True  # strip a leading runtime time stamp (`docker logs --timestamps`); TGI's own prefix is one
    ERROR_STATUS_HOT = False  # whether `HOT` passes every access line with an error status (set per class)
    # whether a storm's access line may be replayed from its first reading (parsers/refusal_lines.py): only where
    # `line_records` changes the parser only by rebinding its attributes (it is asked on a shallow copy), and
    # `events_for` adds nothing to an access line's events (vLLM's adds to ERROR records only, SGLang's to preemptions)
    REFUSAL_LINES = False
    # the readings of a storm's lines (text without the client → reading, None for the plain path's): one per
    # class, since a reading depends on the class alone (its prefix, signatures and facts), never on a stream
    _refusal_readings: ClassVar[dict[str, refusal_lines.Reading | None]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Note whether `HOT` matches inside an error status's opening (`" 4`, `" 5`): then a line holding one
        passes the pre-filter, which `_hot` tells with two `in`s instead of the search (~7 µs on a refusal's
        access line, whose match lies near its end)."""
        super().__init_subclass__(**kwargs)
        hot_in = cls.HOT.within if isinstance(cls.HOT, Prefilter) else lambda text: cls.HOT.search(text) is not None
        cls.ERROR_STATUS_HOT = hot_in('" 4') and hot_in('" 5')
        cls._refusal_readings = {}

    def __init__(self, source: str = "-", ref_time: float | None = None, tz: tzinfo = timezone.utc) -> None:
        self.source = source
        self.stamps = Stamps(ref_time, tz)  # the stream's time stamps → epoch seconds
        self.lines_seen = 0
        self._parse_errors = 0
        self._starting = False
        self._blocks: dict[str, _Block] = {}
        self._last_incident: dict[str, tuple[float | None, int]] = {}
        self._waiting: dict[str, int] = {}
        self._last_ts: float | None = None
        self._request_lines = 0  # > 0 while a request log's quoted text runs on over lines
        self._engine_dead = False  # an engine death was seen and no restart since: a 5xx now is a casualty
        self._refusals = OneRefusal()
        # a line as long as a terminal's width, held one line in case the next is its rest (parsers/paste.py)
        self._wrapped: tuple[str, float | None, str | None, int | None] | None = None

    # ---- the protocol -------------------------------------------------------------------------
    def feed(self, text: str, ts: float | None = None, path: str | None = None,
             offset: int | None = None) -> list[Record]:
        """Give one line (no newline); get the records it completes. Never raises on any input: a line
        whose numbers cannot be numbers (a 5,000-digit count) is skipped and counted in `parse_errors`.
        `ts` is the envelope's time (Docker, CRI, journald), when the line came in one."""
        return self._line(text, ts, path, offset, None)

    def feed_batch(self, texts: Sequence[str], offsets: Sequence[int], path: str | None,
                   first_line: int | None = None) -> list[Record]:
        """Give a run of one plain stream's lines (decoded, without their newlines), each at its byte offset;
        get all their records: exactly what `feed` gives line by line, and the same state after
        (tests/unit/test_feed_lines.py). `scan` and the daemon read plain files this way; a batch saves the
        per-line calls on the commonest line of a busy log, an access line that is not a refusal.

        `first_line` is the 1-based number of the first line when the caller counts lines (`scan`): a load
        sample then carries its `line`; any other record is left for the caller to locate by its offset."""
        out: list[Record] = []
        one = self._line
        settled = self._settles_access
        line = first_line
        for text, offset in zip(texts, offsets, strict=True):
            if not settled(text) and (records := one(text, None, path, offset, line)):
                out += records
            if line is not None:
                line += 1
        return out

    def _line(self, text: str, ts: float | None, path: str | None, offset: int | None,
              line: int | None) -> list[Record]:
        """`feed` of one line, numbered `line` when the caller counts lines: the one path every line takes. A
        line as long as a terminal is held one line, in case the next is its rest (parsers/paste.py); it is held
        without its number (the parser's state is the same fed by `feed` or `feed_batch`), so its records are
        located by their offset."""
        if self._wrapped is not None:  # the line before was as long as a terminal: is this its rest?
            held, self._wrapped = self._wrapped, None
            if continues_wrap(text, held[0]):
                return self._line(held[0] + text, held[1], held[2], held[3], None)
            return self._feed_line(*held, None) + self._line(text, ts, path, offset, line)
        n = len(text)
        if n >= WRAP_MIN and not (n % WRAP_A and n % WRAP_B):  # as long as a terminal (wrapped_at_width), inline
            self._wrapped = (text, ts, path, offset)
            return []
        return self._feed_line(text, ts, path, offset, line)

    def _feed_line(self, text: str, ts: float | None, path: str | None, offset: int | None,
                   line: int | None) -> list[Record]:
        """One whole line (any wrap joined): a storm's access line replayed (parsers/refusal_lines.py), a paste's
        or shipper's wrapper taken off, else `_feed`."""
        if self.REFUSAL_LINES and not self._blocks and not self._request_lines and (
                key := refusal_lines.key_of(text)) is not None and (
                records := self._replayed(text, key, ts, path, offset)) is not None:
            return records
        if text[:1] in PASTE_STARTS and (pasted := unpaste(text)) is not None:
            return self._feed_pasted(pasted, ts, path, offset, line)
        # a JSON line is decoded whole (its envelope above, or the engine's own format); a prompt's text is never
        # read as lines
        if ESCAPED_TRACEBACK in text and text[:1] != "{" and not is_request_log(text) and (
                lines := escaped_lines(text)) is not None:
            return self._feed_pasted((lines, None), ts, path, offset, line)
        try:
            out = self._feed(text, ts, path, offset, line)
        except (ValueError, OverflowError):
            self._parse_errors += 1
            return []
        if not out:
            return out  # most lines give nothing
        # a load sample carries numbers only (`scrub` returns it as it is): the stats line skips the call
        out = [r if r.__class__ is ServerStats or r.__class__ is RequestSample else scrub(r) for r in out]
        return self._refusals.once(out, self.lines_seen)  # a refusal's message and its status line: one

    def _feed_pasted(self, pasted: tuple[list[str], str | None], ts: float | None, path: str | None,
                     offset: int | None, line: int | None) -> list[Record]:
        """The lines inside a paste or shipper wrapper (parsers/paste.py), fed as the engine printed them, each
        at the wrapper's offset and line."""
        lines, stamp = pasted
        if ts is None and stamp is not None:
            try:
                ts = self.stamps.rfc3339(stamp)
            except (ValueError, OverflowError):
                ts = None
        out: list[Record] = []
        for inner in lines:
            out += self._line(inner, ts, path, offset, line)
        return out

    def _feed(self, text: str, ts: float | None, path: str | None, offset: int | None,
              line: int | None) -> list[Record]:
        self.lines_seen += 1
        if text[:1] == "\x00":  # a NUL hole (copytruncate under a writer without O_APPEND) before a line
            text = text.lstrip("\x00")
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS]
        if "\x1b" in text:
            text = ANSI.sub("", text)
        if "\r" in text:
            text = last_segment(text)
        # An access line that is not a refusal can neither carry a problem nor continue a traceback.
        if boring_access(text) or (not self._blocks and not self._hot(text)):
            if self._request_lines:
                self._in_request(self.split(text))
            elif opens_request_text(text):
                self._request_lines = 1  # a prompt with newlines: its next lines are not log records
            elif carries_duration(text) and not is_request_log(text):  # the whole line: TGI's span is a prefix
                return timed(text, ts or self.split(text).ts or self._last_ts, self.source, self.server, path, offset)
            return []
        syslog_ts = None
        if " | " in text[:80] and (cm := COMPOSE.match(text)) is not None:
            text = text[cm.end():]
        if (text[:1] in MONTH_STARTS or text[1:2] in CJK_MONTH or text[2:3] in CJK_MONTH) and (
                month := syslog_month(text)) is not None and (sm := SYSLOG.match(text)) is not None:
            syslog_ts = self.stamps.yearless(month, int(sm.group(1)), int(sm.group(2)), int(sm.group(3)),
                                      int(sm.group(4)), sm.group(0))
            text = text[sm.end():]
        elif (text[:1] == "[" or (self.OUTER_STAMP and text[:1].isdigit())) and (
                om := OUTER.match(text)) is not None and om.end():
            # `docker logs --timestamps` / `kubectl logs --timestamps --prefix` / journald's ISO and epoch
            # formats: the runtime's own time (with a year) is the better one, as an envelope's would be
            end = om.end()
            if not self.OUTER_STAMP and om.group(1) and not text[end:end + 1].isdigit():
                end = text.find("] ") + 2  # only the pod: the time after it is the line's own (TGI's)
            elif ts is None and om.group(1):
                ts = self.stamps.rfc3339(om.group(1))
            elif ts is None and om.group(2):
                ts = float(om.group(2))  # `journalctl -o short-unix`
            text = text[end:]
        split = self.split(text)
        if self._request_lines and self._in_request(split):
            return []  # a line of a request's text (a prompt with newlines), not a log record of its own
        if ts is not None:
            split.ts = ts
        elif split.ts is None:
            split.ts = syslog_ts
        if split.ts is None:
            split.ts = self._last_ts  # lines without a time (uvicorn, raw tracebacks) get their neighbour's
        else:
            self._last_ts = split.ts
        out: list[Record] = []
        if self._blocks:
            if self._continue_block(split, out):
                return out
            if not self._hot(text):
                if opens_request_text(text):  # as on the quiet path above: an open block changes nothing
                    self._request_lines = 1
                return out
        if self.STATS_WORD in split.msg or self.STATS_WORD2 in split.msg:
            # stats parsers take fields where they sit but refuse request logs and quoted text
            sample = self.stats_line(split, path, offset)
            if sample is not None:
                if self._starting and self.READY.search(split.msg) is not None:
                    self._starting = False
                return out + sample  # a stats line is only that: no signatures, no facts
        if is_request_log(split.msg):
            # A prompt with newlines in it goes on over the next lines, which carry no prefix of their own.
            self._request_lines = 1 if opens_unclosed_quote(split.msg) else 0
            if (outcome := request_outcome(split.msg)) is not None:
                out.extend(self.events_for(replace(split, msg=outcome), (outcome,), path, offset))
            return out
        self._track_phase(split.msg)
        if split.level in ("ERROR", "CRITICAL", "E") or OPENS_BLOCK.search(split.msg[:2000]) is not None:
            self._blocks[split.tag] = _Block(split, path, offset, [split.msg], self.lines_seen)
            return out
        out.extend(self.events_for(split, (split.msg,), path, offset))
        if carries_duration(text):
            out += timed(text, split.ts, self.source, self.server, path, offset)
        return out + self.line_records(split, path, offset)

    def _settles_access(self, text: str) -> bool:
        """`feed`'s first answer for an access line that is not a refusal (nothing, the line counted, a
        request's quoted text maybe opened), given without its calls; False for any other line, and for one
        that `_feed` would first clean up (ANSI colour, a carriage return, over `MAX_LINE_CHARS`)."""
        if self._request_lines or self._wrapped is not None or not boring_access(text) or cleaned_by_feed(
                text) or carries_duration(text):
            return False
        self.lines_seen += 1
        if opens_request_text(text):
            self._request_lines = 1  # a prompt with newlines: its next lines are not log records
        return True

    def between_records(self) -> bool:
        """Whether nothing is open: no block, no request's text running on, no line held for its rest. A line
        `feed` would then only count (a quiet line, parsers/quiet.py) may be counted without being read."""
        return not self._blocks and not self._request_lines and self._wrapped is None

    def pass_quiet(self, lines: int) -> bool:
        """Count `lines` quiet lines (parsers/_lane.c) as `feed` would, when `between_records`; False, and
        nothing done, when not (the caller feeds them)."""
        if not self.between_records():
            return False
        self.lines_seen += lines
        return True

    @property
    def parse_errors(self) -> int:
        """Lines skipped because a number in them could not be one (a 5,000-digit count)."""
        return self._parse_errors

    def held_offsets(self) -> dict[str, int]:
        """Path → offset of the first line of each open block (the earliest per path): what a crash now
        would lose unless the cursor waits there."""
        held = [(self._wrapped[2], self._wrapped[3])] if self._wrapped is not None else []
        return earliest([*((block.path, block.offset) for block in self._blocks.values()), *held])

    def set_reference_time(self, ref_time: float) -> None:
        """Move the time that yearless stamps are placed near (a daemon calls this as its clock advances;
        the parser itself never reads a clock)."""
        self.stamps.move(ref_time)

    def checkpoint(self) -> Checkpoint:
        """What decides this parser's future output, line numbers taken relative to its current line
        (parsers/checkpoint.py)."""
        now = self.lines_seen
        blocks = tuple((tag, b.first, b.path, b.offset, tuple(b.lines), now - b.last_line_no)
                       for tag, b in self._blocks.items())  # order matters: blocks close in this order
        waiting = {tag: n for tag, n in self._waiting.items() if n}  # 0 and absent mean the same
        rest = {k: v for k, v in vars(self).items() if k not in _NOT_STATE}
        incidents = {kind: (ts, now - line) for kind, (ts, line) in self._last_incident.items()}
        return Checkpoint((blocks, waiting, rest), incidents, now, self._parse_errors)

    def incidents(self) -> Incidents:
        """Incident kind → (time, line) of its last report: what decides whether the next one is a repeat."""
        return dict(self._last_incident)

    def note_new_incidents(self) -> dict[str, tuple[float | None, int] | None]:
        """From now on, note the first (time, line) each incident kind not remembered now is reported at (None
        while it has only been asked about); the dict returned fills as lines are read. A pickled copy of the parser
        (a worker's, handed back) no longer notes."""
        table = self._last_incident = NewKinds(self._last_incident)
        return table.first

    def resume(self, lines_before: int, incidents: Incidents, parse_errors: int) -> None:
        """Go on as if `lines_before` more lines had been read first: line numbers shift by them, an incident
        kind this parser never met is remembered as `incidents` has it (line numbers of the whole stream), and
        the count of parse errors becomes `parse_errors`."""
        self.lines_seen += lines_before
        for block in self._blocks.values():
            block.last_line_no += lines_before
        table = {kind: (ts, line + lines_before) for kind, (ts, line) in self._last_incident.items()}
        for kind, last in incidents.items():
            table.setdefault(kind, last)
        self._last_incident = table
        self._parse_errors = parse_errors

    def flush(self) -> list[Record]:
        """Close whatever is open (a truncated traceback is still an occurrence)."""
        out: list[Record] = []
        while self._wrapped is not None:  # a held line inside a wrapper may hold its own line in turn
            held, self._wrapped = self._wrapped, None
            out.extend(self._feed_line(*held, None))
        for tag in list(self._blocks):
            try:
                out.extend(self._close(tag))
            except (ValueError, OverflowError):
                self._parse_errors += 1
        return self._refusals.once([scrub(r) for r in out], self.lines_seen)

    def _in_request(self, split: Split) -> bool:
        """While a request's text runs over lines: is this line more of it (no log prefix of its own)?"""
        if split.level is None and not split.tag and self._request_lines < MAX_REQUEST_LINES:
            self._request_lines += 1
            return True
        self._request_lines = 0
        return False

    # ---- hooks --------------------------------------------------------------------------------
    def split(self, text: str) -> Split:
        """Cut the server's prefix off; the default keeps the whole line as the message."""
        return Split(text)

    def stats_line(self, split: Split, path: str | None, offset: int | None) -> list[Record] | None:
        """The records of the server's periodic stats line, or None when this is not one."""
        return None

    def line_records(self, split: Split, path: str | None, offset: int | None) -> list[Record]:
        """Capacity facts and stateful events of a single line (server-specific); other events come from
        SIGNATURES."""
        return []

    # ---- helpers for subclasses ---------------------------------------------------------------
    def _hot(self, text: str) -> bool:
        """The pre-filter: the stats line, or one of the literal keywords the signatures and facts need."""
        return self.STATS_WORD in text or self.STATS_WORD2 in text or (
            self.ERROR_STATUS_HOT and ('" 5' in text or '" 4' in text)) or self.HOT.search(text) is not None

    def phase(self) -> Phase:
        """The phase of an event whose line does not say: start-up until the server said it is serving."""
        return Phase.STARTUP if self._starting else Phase.RUNTIME

    def fact(self, split: Split, name: str, value: float | str) -> CapacityFact:
        """A capacity fact stamped with the line's time and this stream's source."""
        return CapacityFact(split.ts, self.source, name, value)

    def read_load(self, split: Split, path: str | None, offset: int | None, loads: LoadReaders,
                  speeds: SpeedReaders = ()) -> list[Record] | None:
        """The load sample of a line that one of the readers takes (engines whose load lines no parser of their
        own reads: koboldcpp's, LightLLM's, text-generation-webui's), each asked only when the line holds one of its
        words: (running, waiting, KV usage) or a speed alone (prompt, generation tokens a second). None when none
        takes the line."""
        msg = split.msg
        for words, read in loads:
            if _holds_any(msg, words) and (load := read(msg)) is not None:
                running, waiting, usage = load
                return self.sample(ServerStats(split.ts, self.source, self.server, running=running, waiting=waiting,
                                               kv_usage_ratio=usage, path=path, offset=offset), split.tag)
        for words, speed in speeds:
            if _holds_any(msg, words) and (tps := speed(msg)) is not None:
                return [ServerStats(split.ts, self.source, self.server, prompt_tps=tps[0], gen_tps=tps[1], path=path,
                                    offset=offset)]
        return None

    def sample(self, stats: ServerStats, tag: str) -> list[Record]:
        """A load sample, plus a `pending` event when this process's queue has just become non-empty
        (not on every sample of a long queue: the event marks the transition)."""
        waiting = stats.waiting
        if waiting is None:
            return [stats]
        before = self._waiting.get(tag, 0)
        self._waiting[tag] = waiting
        if waiting == 0 or before != 0:
            return [stats]
        return [stats, self.became_pending(stats)]

    def became_pending(self, stats: ServerStats) -> Event:
        """The `pending` event of a sample whose queue has just become non-empty."""
        waiting = stats.waiting
        return Event(stats.ts, self.source, self.server, EventKind.PENDING, Severity.INFO, Phase.QUEUE,
                     f"queue became non-empty: {waiting} waiting, {stats.running} running",
                     {"waiting": waiting, "running": stats.running}, stats.path, stats.offset, None, stats.line)

    def event(self, split: Split, kind: EventKind, severity: Severity, phase: Phase | None,
              fields: Mapping[str, FieldValue], path: str | None, offset: int | None,
              message: str | None = None) -> Event:
        """An event whose message is the line: the only way free text reaches a record (facts keep single
        values such as a model name). It is redacted where every record leaves the parser: `feed` and
        `flush` pass it through `scrub`."""
        return Event(split.ts, self.source, self.server, kind, severity, phase or self.phase(),
                     split.msg if message is None else message, dict(fields), path, offset)

    # ---- internals ----------------------------------------------------------------------------
    def _track_phase(self, msg: str) -> None:
        if self.STARTING.search(msg):
            self._starting = True
            self._engine_dead = False
        elif self._starting and self.READY.search(msg):
            self._starting = False

    def _continue_block(self, split: Split, out: list[Record]) -> bool:
        """Add the line to its process's open block if it continues it; close blocks it ends.

        A line continues a block when it is the same logger record re-prefixed (same `key`), or when it
        has no logger prefix and looks like traceback text (frames, source, carets, exception lines).
        """
        tag = split.tag
        if split.bare and tag not in self._blocks:
            tag = max(self._blocks, key=lambda t: self._blocks[t].last_line_no)
        block = self._blocks.get(tag)
        if block is not None:
            same_record = split.key is not None and split.key == block.first.key
            if same_record or (split.key is None and CONTINUATION.match(split.msg) is not None):
                if len(block.lines) < MAX_BLOCK_LINES:
                    block.lines.append(split.msg)
                block.last_line_no = self.lines_seen
                return True
            out.extend(self._close(tag))
        # A logger record is written in one go, so once another process logs at a later second the
        # record is complete (pipes split writes over 4 KiB, so a line of the same second may still sit
        # inside it). Raw tracebacks are written line by line and wait for QUIET_LINES.
        for tag in [t for t, b in self._blocks.items() if self.lines_seen - b.last_line_no > QUIET_LINES
                    or (b.first.key is not None and split.ts is not None and b.first.ts is not None
                        and split.ts > b.first.ts)]:
            out.extend(self._close(tag))
        return False

    def _close(self, tag: str) -> list[Record]:
        """The block's events, then the facts its lines carry (a start-up failure states the sizes)."""
        block = self._blocks.pop(tag)
        out = self.events_for(block.first, block.lines, block.path, block.offset)
        first = block.first
        for msg in block.lines:
            if not is_request_log(msg):
                out.extend(self.line_records(Split(msg, first.ts, first.level, first.tag, first.key),
                                             block.path, block.offset))
        return out

    def events_for(self, split: Split, lines: Iterable[str], path: str | None, offset: int | None) -> list[Record]:
        """Events of one occurrence: at most one per kind (a line may show several: "runner terminated:
        unable to allocate buffer" is a death *and* an OOM), the first line that shows a kind supplying
        its message; an incident kind already reported moments ago (by another rank, or re-raised
        through the API server) is not repeated."""
        found: dict[EventKind, Event | None] = {}
        deferred: list[str] = []
        index = index_of(self.SIGNATURES)
        block = list(lines)
        for msg in source_last(block, deferred):
            if is_request_log(msg):
                continue
            for r, fields in index.matches(msg):
                if r.kind in found:
                    continue
                settled = self._settle(r, fields, block, split.ts)
                found[r.kind] = None if settled is None else self.event(split, r.kind, settled[0], r.phase,
                                                                        settled[1], path, offset, msg)
        return [e for e in found.values() if e is not None]

    def _settle(self, r: Signature, fields: dict[str, FieldValue], block: list[str] | None,
                ts: float | None) -> tuple[Severity, dict[str, FieldValue]] | None:
        """What the parser's state makes of a signature's match in an occurrence (`block`, its lines; None for a
        single line that cannot be a bare timeout): its severity and fields, None when it repeats an incident
        reported moments ago. Notes what the match tells of the state (a failed start, a death)."""
        if r.phase is Phase.STARTUP:
            self._starting = True  # it never served: what fails next is part of the failed start
        if r is families.BARE_TIMEOUT and block is not None and families.timeout_waiter(block) == "client":
            fields = families.CLIENT_TIMEOUT  # a client library's own deadline, not the engine's
        if r.kind is EventKind.ENGINE_DEAD:
            self._engine_dead = True
        elif r.kind is EventKind.REQUEST_FAILED and self._engine_dead and fields["reason"] == "server_error":
            fields = {**fields, "reason": "engine_dead"}  # the API server answering for a dead engine
        severity = r.severity_of(fields) if r.severity_of else r.severity
        if r.incident and self._repeat(r.kind, ts):
            return None
        return severity, fields

    def _replayed(self, text: str, key: tuple[str, int], ts: float | None, path: str | None,
                  offset: int | None) -> list[Record] | None:
        """`_feed_line`'s records of a storm's access line from the reading of its text without the client
        (parsers/refusal_lines.py), the state applied as `_feed` applies it; None (nothing done) for a line that
        needs the plain path."""
        memo = self._refusal_readings
        reading = memo.get(key[0])
        if reading is None:
            if key[0] in memo:
                return None  # read before: the plain path's line
            if len(memo) >= refusal_lines.MEMO_SIZE:
                memo.clear()
            reading = memo[key[0]] = self._read_refusal(text, key[1])
            if reading is None:
                return None
        elif reading.head != key[1]:
            return None  # another split of the same key (the client elsewhere): not this reading's line
        self.lines_seen += 1
        if ts is None:
            ts = self._last_ts  # the line has no time of its own (a reading's condition)
        else:
            self._last_ts = ts
        out: list[Record] = []
        for r, fields, seen in reading.matched:
            settled = self._settle(r, fields, None, ts)
            if settled is None:
                continue
            severity, said = settled
            out.append(event_with(seen, ts=ts, source=self.source, severity=severity, phase=r.phase or self.phase(),
                                  path=path, offset=offset,
                                  fields=dict(seen.fields) if said is fields else redact_fields(said)))
        if not out:
            return out
        return self._refusals.once(out, self.lines_seen)

    def _read_refusal(self, text: str, head: int) -> refusal_lines.Reading | None:
        """The reading of an access line that `_feed` takes past every prefix, block and pre-filter to the
        signatures alone, or None for any other line: each test `_feed` makes on the way is made here, and the line is
        kept only where each answers "nothing else". It changes no state: `split` only dates, the signatures' and the
        redaction's caches are caches, and `line_records` is asked on a copy of the parser (vLLM's notes a V0
        preemption's total: a line that gives one is not kept, and must find the total as it was)."""
        if (text[:1] in PASTE_STARTS or ESCAPED_TRACEBACK in text or cleaned_by_feed(text)
                or self.STATS_WORD in text or self.STATS_WORD2 in text or boring_access(text)
                or not self._hot(text) or " | " in text[:80] or text[:1] in MONTH_STARTS
                or text[1:2] in CJK_MONTH or text[2:3] in CJK_MONTH or carries_duration(text)):
            return None
        if (text[:1] == "[" or (self.OUTER_STAMP and text[:1].isdigit())) and (
                om := OUTER.match(text)) is not None and om.end():
            return None  # a runtime's time stamp
        try:
            split = self.split(text)
        except (ValueError, OverflowError):
            return None  # `_feed` counts it
        msg = split.msg
        if (split.ts is not None or split.level in ("ERROR", "CRITICAL", "E")
                or OPENS_BLOCK.search(msg[:2000]) is not None or is_request_log(msg)
                or self.STARTING.search(msg) is not None or self.READY.search(msg) is not None
                or copy.copy(self).line_records(split, None, None)):
            return None
        index = index_of(self.SIGNATURES)
        matched = index.matches(msg)
        if any(r is families.BARE_TIMEOUT or r.kind is EventKind.PREEMPTION for r, _ in matched):
            return None  # a bare timeout asks the block who waited; a preemption, SGLang's rank rule
        message = redact(msg)
        # What the reading stands for holds for any client only if it holds for another: the same text with
        # another client (of another length) must match the same signatures, read the same fields and redact
        # to the same message (the redaction takes the client out), or the line takes the plain path.
        end = text.find(refusal_lines.ACCESS_MARK, head)
        client = text[head:end]
        probe = refusal_lines.PROBE if client != refusal_lines.PROBE else refusal_lines.PROBE_2
        other = msg.replace(client + refusal_lines.ACCESS_MARK, probe + refusal_lines.ACCESS_MARK, 1)
        if other == msg or index.matches(other) != matched or redact(other) != message:
            return None
        return refusal_lines.Reading(head, tuple(
            (r, fields, Event(None, "", self.server, r.kind, r.severity, r.phase or Phase.RUNTIME, message,
                              redact_fields(fields))) for r, fields in matched))

    def _repeat(self, kind: EventKind, ts: float | None) -> bool:
        """True when the same kind of incident was reported within the window (which does not slide:
        a storm still yields one event per window, so counts stay meaningful)."""
        if self._reported_lately(kind, ts):
            return True
        self._last_incident[kind.value] = (ts, self.lines_seen)
        return False

    def _reported_lately(self, kind: EventKind, ts: float | None) -> bool:
        """Whether an incident of `kind` was reported within the de-duplication window."""
        last = self._last_incident.get(kind.value)
        if last is None:
            return False
        last_ts, last_line = last
        if ts is not None and last_ts is not None:
            return abs(ts - last_ts) <= DEDUP_WINDOW_S
        return self.lines_seen - last_line <= DEDUP_WINDOW_LINES
