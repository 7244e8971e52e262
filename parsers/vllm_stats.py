"""vLLM's periodic stats line: the load sample (running, waiting, KV usage…) that is most of a busy log.

`VllmStats` is the half of `VllmParser` (parsers/vllm.py) that reads it, in any era's shape. The line is read
in one place, `_stats`, from one pattern, `_STATS`; what differs is only how its prefix is found: behind V1's
and V0's own prefix (`(APIServer pid=…) INFO 11-28 00:00:00 [loggers.py:123] `, or none) by `_prefixed`, with
three `find`s and no split, which is most lines of a busy log; behind any other prefix by the general path
(`stats_line`, after the splitter); and in any other field order by `_stats_fields`.
"""

from __future__ import annotations

import re

from agent.records import Event, EventKind, Phase, Record, Server, ServerStats, Severity
from parsers.base import StreamParser
from parsers.prefix import ANSI, Split, quoted_or_request

STATS_WORD = "Avg prompt throughput: "
_STATS = re.compile(
    r"(?:Engine (?P<engine>\d{1,4}): |\d{1,4} Engines Aggregated: )?Avg prompt throughput: (?P<pt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gt>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs, (?:Swapped: (?P<swapped>\d+) reqs, Pending: (?P<pending>\d+) reqs"
    r"|Waiting: (?P<waiting>\d+) reqs(?:, Deferred: \d+ reqs)?(?:, KV fetch: [^,]{0,60}, [^,]{0,60}, [^,]{0,60})?"
    r"(?:, Preemptions: (?P<preempt>\d+))?), [\w+ ]{0,20}KV cache usage: (?P<kv>[\d.]+)%"
    r"(?:, CPU KV cache usage: [\d.]+%)?(?:, Prefix cache hit rate: (?P<hit>[\d.]+)%)?"
)
# The same line in any other shape (older eras' extra timing fields, fields added or reordered, the line glued
# after a progress bar or quoted in backticks): `Name: value` pairs read wherever they sit after the first one.
_FIELD = re.compile(
    r"(Avg prompt throughput|Avg generation throughput|Running|Swapped|Pending|Waiting|Preemptions"
    r"|GPU KV cache usage|[XNHT]PU KV cache usage|(?<!PU )KV cache usage|Prefix cache hit rate)"
    r": ?(\d{1,12}(?:\.\d{1,6})?)"
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
        stats = ServerStats(
            ts=ts, source=self.source, server=Server.VLLM, running=int(float(running)),
            waiting=int(float(waiting)) if waiting is not None else None,
            swapped=int(float(swapped)) if swapped is not None else None, kv_usage_ratio=float(kv) / 100,
            prompt_tps=float(pt) if pt is not None else None, gen_tps=float(gt) if gt is not None else None,
            prefix_hit_ratio=float(hit) / 100 if hit is not None else None,
            preemptions=int(float(preempt)) if preempt is not None else None, path=path, offset=offset)
        return self._sampled(stats, split.tag, em.group(1) if em else None)

    def _stats(self, ts: float | None, tag: str, m: re.Match[str], path: str | None,
               offset: int | None, line: int | None = None) -> list[Record]:
        """The records of a stats line `_STATS` matched: the sample, and the events it implies."""
        engine, pt, gt, running, swapped, pending, waiting, preempt, kv, hit = m.group(
            "engine", "pt", "gt", "running", "swapped", "pending", "waiting", "preempt", "kv", "hit")
        stats = ServerStats(
            ts=ts, source=self.source, server=Server.VLLM, running=int(running), waiting=int(waiting or pending),
            swapped=int(swapped) if swapped is not None else None, kv_usage_ratio=float(kv) / 100,
            prompt_tps=float(pt), gen_tps=float(gt), prefix_hit_ratio=float(hit) / 100 if hit is not None else None,
            preemptions=int(preempt) if preempt is not None else None, path=path, offset=offset, line=line)
        return self._sampled(stats, tag, engine)

    def _sampled(self, stats: ServerStats, tag: str, engine: str | None) -> list[Record]:
        out = self.sample(stats, f"{tag} engine {engine}" if engine else tag)  # each DP engine has its own queue
        if stats.preemptions:
            out.append(Event(
                ts=stats.ts, source=self.source, server=Server.VLLM, kind=EventKind.PREEMPTION,
                severity=Severity.WARNING, phase=Phase.RUNTIME,
                message=f"{stats.preemptions} preemptions in the last stats interval",
                fields={"count": stats.preemptions}, path=stats.path, offset=stats.offset, line=stats.line))
        return out

    def _prefixed(self, text: str, i: int, ts: float | None, path: str | None, offset: int | None,
                  line: int | None) -> list[Record] | None:
        """The records of a stats line whose fields start at `i` behind vLLM's own prefix (`(APIServer pid=…)
        INFO 11-28 00:00:00 [loggers.py:123] `, the process tag optional); None for any other prefix (another
        format, a syslog prefix), which takes the general path. `ts`: the envelope's time, if any."""
        j = text.find("INFO ")
        k = text.find("] ", j + 19) if 0 <= j < i else -1
        stamp = text[j + 5:j + 19]
        tag = text[:j].strip()
        if not (0 <= k < i and stamp[2:3] == "-" and stamp[5:6] == " " and stamp[8:9] == ":"
                and (not tag or (tag[0] in "(\x1b" and "pid=" in tag))):
            return None
        m = _STATS.match(text, k + 2)
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

    def _feed(self, text: str, ts: float | None, path: str | None, offset: int | None,
              line: int | None) -> list[Record]:
        """The stats line is most of a busy vLLM log: found with three `find`s and one match, no split,
        no rules. Anything unusual about its prefix (another format, a syslog prefix) takes the general path."""
        i = text.find(STATS_WORD)
        if i < 0 or (records := self._prefixed(text, i, ts, path, offset, line)) is None:
            return StreamParser._feed(self, text, ts, path, offset, line)
        return records
