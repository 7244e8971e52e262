"""vLLM's periodic stats line read into a load sample, in any era's shape: functions of the line alone.

The line is most of a busy vLLM log. It is read in one place, `sample`, from one pattern, `match`; what
differs is only where its fields start: behind vLLM's own prefix (`own_prefix`: `(APIServer pid=…) INFO
11-28 00:00:00 [loggers.py:123] `, the process tag optional), found with three `find`s and no split; behind
any other prefix, after the parser's splitter; and in any other field order (`anywhere`). What the line
means for the stream (a queue forming, the process's open traceback ended) is the parser's: parsers/vllm.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agent.records import Server, ServerStats
from parsers.prefix import quoted_or_request

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



def match(text: str, pos: int = 0) -> re.Match[str] | None:
    """The stats line's fields in their usual order, from `pos`."""
    return _STATS.match(text, pos)


def sample(m: re.Match[str], ts: float | None, source: str, path: str | None, offset: int | None,
           line: int | None = None) -> tuple[ServerStats, str | None]:
    """The load sample of a line `match` matched, and the DP engine it is of (None: the only one)."""
    engine, pt, gt, running, swapped, pending, waiting, preempt, kv, hit = m.group(
        "engine", "pt", "gt", "running", "swapped", "pending", "waiting", "preempt", "kv", "hit")
    return ServerStats(
        ts=ts, source=source, server=Server.VLLM, running=int(running), waiting=int(waiting or pending),
        swapped=int(swapped) if swapped is not None else None, kv_usage_ratio=float(kv) / 100,
        prompt_tps=float(pt), gen_tps=float(gt), prefix_hit_ratio=float(hit) / 100 if hit is not None else None,
        preemptions=int(preempt) if preempt is not None else None, path=path, offset=offset, line=line), engine


def own_prefix(text: str, i: int) -> tuple[str, str, int] | None:
    """(process tag, `MM-DD HH:MM:SS` stamp, where the fields start) of a line whose stats fields are at `i`
    behind vLLM's own prefix; None for any other prefix (another format, a syslog prefix)."""
    j = text.find("INFO ")
    k = text.find("] ", j + 19) if 0 <= j < i else -1
    stamp = text[j + 5:j + 19]
    tag = text[:j].strip()
    if not (0 <= k < i and stamp[2:3] == "-" and stamp[5:6] == " " and stamp[8:9] == ":"
            and (not tag or (tag[0] in "(\x1b" and "pid=" in tag))):
        return None
    return tag, stamp, k + 2


Yearless = Callable[[int, int, int, int, int, str], float | None]  # month, day, hour, minute, second, its text


def anywhere(msg: str, ts: float | None, stamped: bool, yearless: Yearless, source: str, path: str | None,
             offset: int | None) -> tuple[ServerStats, str | None] | None:
    """The stats line in any other shape: its `Name: value` fields wherever they sit. Running and the KV
    usage must be there; whatever precedes the first field (a progress bar, a backtick, a prefix the
    splitter did not know) may supply the time (unless the line's prefix was `stamped`) and the DP engine,
    but not quotes or a request log. None when it is not a stats line."""
    i = msg.find(STATS_WORD)
    if i < 0 or i > 400 or quoted_or_request(msg[:i], msg):
        return None
    fields = dict(_FIELD.findall(msg, i))
    running = fields.get("Running")
    kv = next((v for k, v in fields.items() if k.endswith("KV cache usage")), None)
    if running is None or kv is None:
        return None
    head = msg[:i]
    if (sm := _STAMP_IN.search(head)) is not None and not stamped:
        ts = yearless(int(sm.group(1)), int(sm.group(2)), int(sm.group(3)), int(sm.group(4)), int(sm.group(5)),
                      sm.group(0)) or ts
    em = _ENGINE_TAG.search(head)
    waiting = fields.get("Waiting", fields.get("Pending"))
    swapped = fields.get("Swapped")
    preempt = fields.get("Preemptions")
    hit = fields.get("Prefix cache hit rate")
    pt, gt = fields.get("Avg prompt throughput"), fields.get("Avg generation throughput")
    return ServerStats(
        ts=ts, source=source, server=Server.VLLM, running=int(float(running)),
        waiting=int(float(waiting)) if waiting is not None else None,
        swapped=int(float(swapped)) if swapped is not None else None, kv_usage_ratio=float(kv) / 100,
        prompt_tps=float(pt) if pt is not None else None, gen_tps=float(gt) if gt is not None else None,
        prefix_hit_ratio=float(hit) / 100 if hit is not None else None,
        preemptions=int(float(preempt)) if preempt is not None else None, path=path,
        offset=offset), em.group(1) if em else None


def settled(ts: float, source: str, path: str | None, offset: int, line: int | None, pt: float, gt: float, running: int,
            waiting: int, kv: float, hit: float | None) -> ServerStats:
    """The load sample of a stats line in V1's plain shape whose fields the compiled lane read (parsers/_lane.c:
    the numbers already converted, the percentages as printed): what `sample` gives for the same line."""
    return ServerStats(
        ts=ts, source=source, server=Server.VLLM, running=running, waiting=waiting, kv_usage_ratio=kv / 100,
        prompt_tps=pt, gen_tps=gt, prefix_hit_ratio=hit / 100 if hit is not None else None, path=path,
        offset=offset, line=line)
