"""vLLM's periodic stats line: the load sample (running, waiting, KV usage…) that is most of a busy log.

`VllmStats` is the half of `VllmParser` (parsers/vllm.py) that reads it, in any era's shape, and the
batch lane plain files are read through (`scan`'s `feed_lines`, the daemon's `feed_texts`; parsers/lanes.py):
the stats line in V1's plain prefix and the access line that is not a refusal are settled there without
the per-line calls of `feed`, which were most of the cost of a line (tests/unit/test_feed_lines.py holds it
to exactly `feed`'s records and state).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agent.records import Event, EventKind, Phase, Record, Server, ServerStats, Severity
from parsers.base import StreamParser
from parsers.lanes import Locate, unlocated
from parsers.prefix import ANSI, Split, quoted_or_request
from parsers.redact import scrub

_new_tuple = tuple.__new__
# `_stats` and `_run` build a ServerStats field by field, and unpack `_STATS`' and `_PLAIN`'s groups by position:
# tests/unit/test_record_layouts.py holds the 16 fields and the group order (an assert here would vanish under -O).

STATS_WORD = "Avg prompt throughput: "
_STATS = re.compile(
    r"(?:Engine (?P<engine>\d{1,4}): |\d{1,4} Engines Aggregated: )?Avg prompt throughput: (?P<pt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gt>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs, (?:Swapped: (?P<swapped>\d+) reqs, Pending: (?P<pending>\d+) reqs"
    r"|Waiting: (?P<waiting>\d+) reqs(?:, Deferred: \d+ reqs)?(?:, KV fetch: [^,]{0,60}, [^,]{0,60}, [^,]{0,60})?"
    r"(?:, Preemptions: (?P<preempt>\d+))?), [\w+ ]{0,20}KV cache usage: (?P<kv>[\d.]+)%"
    r"(?:, CPU KV cache usage: [\d.]+%)?(?:, Prefix cache hit rate: (?P<hit>[\d.]+)%)?"
)
# `_stats` unpacks `m.groups()` positionally (cheaper than named lookups on the hottest line).
# The same line in any other shape (older eras' extra timing fields, fields added or reordered, the line glued
# after a progress bar or quoted in backticks): `Name: value` pairs read wherever they sit after the first one.
_FIELD = re.compile(
    r"(Avg prompt throughput|Avg generation throughput|Running|Swapped|Pending|Waiting|Preemptions"
    r"|GPU KV cache usage|[XNHT]PU KV cache usage|(?<!PU )KV cache usage|Prefix cache hit rate)"
    r": ?(\d{1,12}(?:\.\d{1,6})?)"
)
# The commonest shape (V1 with DP engines, no preemption count), tried first: it matches in half the time,
# with `_STATS`'s groups where `_STATS` would put them (the swapped, pending and preemption groups cannot take
# part, so they are None; tests/unit/test_feed_lines.py checks it against `_STATS`).
_PLAIN = re.compile(
    r"(?:Engine (\d{1,4}): )?Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, (?:(?!)(\d)(\d))?Waiting: (\d+) reqs(?:(?!)(\d))?, GPU KV cache usage: ([\d.]+)%"
    r"(?!, CPU KV)(?:, Prefix cache hit rate: ([\d.]+)%)?"
)
_ENGINE_TAG = re.compile(r"Engine (\d{1,4}): $")
_STAMP_IN = re.compile(r"(?:DEBUG|INFO|WARNING) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


class VllmStats(StreamParser):
    """Reads vLLM's stats line; `VllmParser` adds the prefix splitter, the signatures and the facts."""

    server = Server.VLLM

    def stats_line(self, split: Split, path: str | None, offset: int | None) -> list[Record] | None:
        m = _STATS.match(split.msg)
        if m is not None:
            return self._stats(split.ts, split.tag, m, path, offset)
        return self._stats_fields(split, path, offset)

    def _stats_fields(self, split: Split, path: str | None, offset: int | None) -> list[Record] | None:
        """The stats line in any other shape: its `Name: value` fields wherever they sit. Running and the KV
        usage must be there; whatever precedes the first field (a progress bar, a backtick, a prefix the
        splitter did not know) may supply the time and the DP engine, but not quotes or a request log."""
        msg = split.msg
        i = msg.find(STATS_WORD)
        if i < 0 or i > 400 or quoted_or_request(msg[:i], msg):
            return None
        fields = dict(_FIELD.findall(msg, i))
        running = fields.get("Running")
        kv = next((v for k, v in fields.items() if k.endswith("KV cache usage")), None)
        if running is None or kv is None:
            return None
        head = msg[:i]
        ts = split.ts
        if (sm := _STAMP_IN.search(head)) is not None and (split.level is None):
            ts = self.yearless(int(sm.group(1)), int(sm.group(2)), int(sm.group(3)), int(sm.group(4)),
                               int(sm.group(5)), sm.group(0)) or ts
        em = _ENGINE_TAG.search(head)
        waiting = fields.get("Waiting", fields.get("Pending"))
        swapped = fields.get("Swapped")
        preempt = fields.get("Preemptions")
        hit = fields.get("Prefix cache hit rate")
        pt, gt = fields.get("Avg prompt throughput"), fields.get("Avg generation throughput")
        stats = ServerStats(ts, self.source, Server.VLLM, int(float(running)),
                            int(float(waiting)) if waiting is not None else None,
                            int(float(swapped)) if swapped is not None else None, float(kv) / 100,
                            float(pt) if pt is not None else None, float(gt) if gt is not None else None,
                            float(hit) / 100 if hit is not None else None,
                            int(float(preempt)) if preempt is not None else None, None, path, offset)
        return self._sampled(stats, split.tag, em.group(1) if em else None)

    def _stats(self, ts: float | None, tag: str, m: re.Match[str], path: str | None,
               offset: int | None, line: int | None = None) -> list[Record]:
        engine, pt, gt, running, swapped, pending, waiting, preempt, kv, hit = m.groups()
        n_waiting = int(waiting or pending)
        # every field given, so the tuple is built without the NamedTuple's Python-level __new__
        stats: ServerStats = _new_tuple(ServerStats, (
            ts, self.source, Server.VLLM, int(running), n_waiting, int(swapped) if swapped is not None else None,
            float(kv) / 100, float(pt), float(gt), float(hit) / 100 if hit is not None else None,
            int(preempt) if preempt is not None else None, None, path, offset, None, line))
        if preempt is not None and stats.preemptions:
            return self._sampled(stats, tag, engine)
        # `sample` inlined for the commonest line: the queue state of this process (and DP engine)
        key = f"{tag} engine {engine}" if engine else tag
        before = self._waiting.get(key, 0)
        self._waiting[key] = n_waiting
        if n_waiting == 0 or before != 0:
            return [stats]
        return [stats, self.became_pending(stats)]

    def _sampled(self, stats: ServerStats, tag: str, engine: str | None) -> list[Record]:
        out = self.sample(stats, f"{tag} engine {engine}" if engine else tag)  # each DP engine has its own queue
        if stats.preemptions:
            out.append(Event(stats.ts, self.source, Server.VLLM, EventKind.PREEMPTION, Severity.WARNING,
                             Phase.RUNTIME, f"{stats.preemptions} preemptions in the last stats interval",
                             {"count": stats.preemptions}, stats.path, stats.offset, None, stats.line))
        return out

    def _sample_line(self, text: str, i: int, ts: float | None, path: str | None, offset: int | None,
                     line: int | None = None) -> list[Record] | None:
        """The records of a stats line whose fields start at `i` behind V1's plain prefix (`(APIServer
        pid=…) INFO 11-28 00:00:00 [loggers.py:123] `); None for any other shape (another format, a syslog
        prefix), which takes the full path. `ts`: the envelope's time, if any."""
        j = text.find("INFO ")
        k = text.find("] ", j + 19) if 0 <= j < i else -1
        stamp = text[j + 5:j + 19]
        tag = text[:j].strip()
        if not (0 <= k < i and stamp[2:3] == "-" and stamp[5:6] == " " and stamp[8:9] == ":"
                and (not tag or (tag[0] in "(\x1b" and "pid=" in tag))):
            return None
        m = _PLAIN.match(text, k + 2) or _STATS.match(text, k + 2)
        if m is None:
            return None
        self.lines_seen += 1
        if "\x1b" in tag:
            tag = ANSI.sub("", tag)
        if ts is None:
            ts = self.yearless_text(stamp)
        self._last_ts = ts
        self._starting = False
        if not self._blocks:
            return self._stats(ts, tag, m, path, offset, line)
        out: list[Record] = []  # a new record: it ends its own process's open one, and stale ones
        self._continue_block(Split("", ts, "INFO", tag, stamp), out)
        return out + self._stats(ts, tag, m, path, offset, line)

    def _feed(self, text: str, ts: float | None, path: str | None, offset: int | None) -> list[Record]:
        """The stats line is most of a busy vLLM log: found with three `find`s and one match, no split,
        no rules. Anything unusual about its prefix (another format, a syslog prefix) takes the full path."""
        i = text.find(STATS_WORD)
        if i < 0 or (records := self._sample_line(text, i, ts, path, offset)) is None:
            return StreamParser._feed(self, text, ts, path, offset)
        return records

    def _run(self, texts: Sequence[str], offsets: Sequence[int], path: str | None, before: int | None,
             locate: Locate | None) -> list[Record]:
        """`StreamParser._run` with the stats line settled in the loop as well. Its commonest case — V1's
        plain prefix and field list, a minute already converted, no queue forming — is `_sample_line`
        written out here (the calls cost a third of the line); any other case calls it, or `feed`. The
        sample comes out with its line number (when lines are numbered), so only its rare events are
        located."""
        out: list[Record] = []
        place = locate or unlocated
        numbered = before is not None
        append = out.append
        feed = self.feed
        plain = _PLAIN.match
        minutes = self._minutes
        waiting_of = self._waiting
        source = self.source
        vllm = Server.VLLM
        line = before or 0
        for text, offset in zip(texts, offsets, strict=True):
            line += 1
            number = line if numbered else None
            i = text.find(STATS_WORD)
            if i < 0 and self._settles_access(text):
                continue
            if i < 0 or self._blocks or self._wrapped is not None:  # any other line, a stats line that closes
                # blocks or follows a line held for its rest: the full path
                if records := feed(text, None, path, offset):
                    out += place(records, offset, line - 1)
                continue
            j = text.find("INFO ")
            k = text.find("] ", j + 19) if 0 <= j < i else -1
            tag = text[:j].strip()
            m = plain(text, k + 2) if k > 0 and tag[:1] == "(" and "pid=" in tag else None
            base = minutes.get(text[j + 5:j + 16]) if m is not None and k < i else None
            if base is None or text[j + 7] != "-" or text[j + 10] != " " or text[j + 13] != ":" or "\x1b" in tag:
                try:
                    sampled = self._sample_line(text, i, None, path, offset, number)
                except (ValueError, OverflowError):  # as `feed`: a number that cannot be one
                    self._parse_errors += 1
                    sampled = []
                if records := feed(text, None, path, offset) if sampled is None else sampled:
                    out += place(records, offset, line - 1)
                continue
            self.lines_seen += 1
            try:
                second = int(text[j + 17:j + 19])
                ts = self._last_ts = base + second if 0 <= second <= 59 else self.yearless_text(text[j + 5:j + 19])
                self._starting = False
                engine, pt, gt, running, _, _, waiting, _, kv, hit = m.groups()  # type: ignore[union-attr]
                n_waiting = int(waiting)
                stats: ServerStats = _new_tuple(ServerStats, (
                    ts, source, vllm, int(running), n_waiting, None, float(kv) / 100, float(pt), float(gt),
                    float(hit) / 100 if hit is not None else None, None, None, path, offset, None, number))
            except (ValueError, OverflowError):
                self._parse_errors += 1
                continue
            append(stats)
            key = f"{tag} engine {engine}" if engine else tag
            was = waiting_of.get(key, 0)
            waiting_of[key] = n_waiting
            if n_waiting and not was:
                out += place([scrub(self.became_pending(stats))], offset, line - 1)
        return out
