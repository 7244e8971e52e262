"""Lines of a stream no server parser claimed (a proxy's access log, a wrapper's stderr, a client's log):
only the server-independent signatures apply — CUDA/NCCL failures, Xid, HTTP 429/503, request deadlines,
and the engine-agnostic families (parsers/families.py: engine timeouts, KV exhaustion, OOM forms, relayed
refusals, engine death in other wordings).

The proxies' time stamps are read so their refusals and timeouts line up in time with the engine's own
events: the nginx/Apache access log's `[29/Nov/2026:09:00:00 +0000]`, nginx's error log `2026/11/29 09:00:00`
(local time) at the start of the line, and Envoy's `[2026-11-29T09:00:00.123Z]` (UTC).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta, timezone

from agent.records import Record, Server, ServerStats
from parsers import (
    argdumps,
    catalogued,
    exposition,
    families,
    gpu,
    http_access,
    kernel,
    koboldcpp,
    lightllm,
    lmdeploy,
    mistralrs,
    mlc,
    server_args,
    tabbyapi,
    textgen,
    trtllm,
    vllm_rs,
    xinference,
)
from parsers.base import LoadReaders, SpeedReaders, StreamParser
from parsers.prefix import MONTHS, Split
from parsers.signature import hot

_CLF_TIME = re.compile(r"\[(\d\d)/([A-Z][a-z]{2})/(\d{4}):(\d\d):(\d\d):(\d\d) ([+-])(\d\d)(\d\d)\]")
_LEADING_TIME = re.compile(r"\[?(\d{4})[-/](\d\d)[-/](\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,]\d{1,9})?(Z?)\]? ")


# (words, reader): TensorRT-LLM's KV budget and limits, LMDeploy's configuration, Xinference's engine arguments,
# MLC LLM's inferred engine configuration, koboldcpp's and FastChat's argument dumps, TabbyAPI's context and cache
# (parsers/trtllm.py, lmdeploy.py, xinference.py, mlc.py, argdumps.py, tabbyapi.py)
_FACT_READERS: tuple[tuple[tuple[str, ...], Callable[[str], list[tuple[str, float]]]], ...] = (
    (trtllm.HOT_WORDS, trtllm.facts), (lmdeploy.HOT_WORDS, lmdeploy.facts),
    (xinference.HOT_WORDS, xinference.facts), (mlc.HOT_WORDS, mlc.facts), (argdumps.HOT_WORDS, argdumps.facts),
    (tabbyapi.HOT_WORDS, tabbyapi.facts))


# (words, reader): the load lines of engines without a parser of their own, each (running, waiting, KV usage ratio),
# None where the line does not say: LMDeploy's metrics logger, mistral.rs's engine logger, TensorRT-LLM's batch
# manager before the executor API, koboldcpp's request summary, LightLLM's router (parsers/lmdeploy.py, mistralrs.py,
# trtllm.py, koboldcpp.py, lightllm.py)
_LOAD_READERS: LoadReaders = (
    (lmdeploy.LOAD_WORDS, lmdeploy.load_sample), (mistralrs.HOT_WORDS, mistralrs.load_sample),
    (trtllm.LEGACY_WORDS, trtllm.legacy_iteration_stats), (koboldcpp.HOT_WORDS, koboldcpp.load_sample),
    (lightllm.HOT_WORDS, lightllm.load_sample))
# and the lines that tell a generation's speed alone (prompt, generation tokens a second): text-generation-webui's,
# TabbyAPI's
_SPEED_READERS: SpeedReaders = ((textgen.HOT_WORDS, textgen.speed_sample),
                                (tabbyapi.METRICS_WORDS, tabbyapi.speed_sample))

_HOT_WORDS = (*gpu.HOT_WORDS, *kernel.HOT_WORDS, *http_access.HOT_WORDS, *families.HOT_WORDS,
              *catalogued.hot_words("auto"), *trtllm.HOT_WORDS, *lmdeploy.HOT_WORDS, *xinference.HOT_WORDS,
              *mlc.HOT_WORDS, *exposition.HOT_WORDS, *mistralrs.HOT_WORDS, *argdumps.HOT_WORDS,
              *koboldcpp.HOT_WORDS, *textgen.HOT_WORDS, *lightllm.HOT_WORDS, *tabbyapi.HOT_WORDS,
              *tabbyapi.METRICS_WORDS)


class GenericParser(StreamParser):
    """Server-independent signatures only; `server` stays `auto` (not recognised)."""

    server = Server.AUTO
    STATS_WORD = vllm_rs.STATS_WORD  # vllm.rs has no parser of its own either
    STATS_WORD2 = trtllm.STATS_WORD  # nor TensorRT-LLM: its iteration statistics
    REFUSAL_LINES = True
    SIGNATURES = (*gpu.GPU_SIGNATURES, *kernel.KERNEL_SIGNATURES, *catalogued.signatures("auto"),
                  *http_access.HTTP_SIGNATURES, *http_access.TIMEOUT_SIGNATURES, *families.FAMILY_SIGNATURES)
    HOT = hot(*_HOT_WORDS)

    def split(self, text: str) -> Split:
        m = _CLF_TIME.search(text)
        if m is None or m.group(2) not in MONTHS:
            lead = _LEADING_TIME.match(text) if text[:1] in "[12" else None
            if lead is None:
                return Split(text)
            g = lead.groups()
            return Split(text, self.stamps.local(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]),
                                          lead.group(0), timezone.utc if g[6] else None))
        sign = -1 if m.group(7) == "-" else 1
        tz = timezone(sign * timedelta(hours=int(m.group(8)), minutes=int(m.group(9))))
        ts = self.stamps.local(int(m.group(3)), MONTHS[m.group(2)], int(m.group(1)), int(m.group(4)), int(m.group(5)),
                        int(m.group(6)), m.group(0), tz)
        return Split(text, ts)

    def stats_line(self, split: Split, path: str | None, offset: int | None) -> list[Record] | None:
        """vllm.rs's KV usage line (parsers/vllm_rs.py) or TensorRT-LLM's iteration statistics (parsers/trtllm.py)
        as load samples; a queue that has just filled up is a `pending` event beside its sample."""
        ratio = vllm_rs.kv_usage(split.msg)
        if ratio is not None:
            return [ServerStats(split.ts, self.source, self.server, kv_usage_ratio=ratio, path=path, offset=offset)]
        out: list[Record] = []
        for running, waiting, usage in trtllm.iteration_stats(split.msg):
            out += self.sample(ServerStats(split.ts, self.source, self.server, running=running, waiting=waiting,
                                           kv_usage_ratio=usage, path=path, offset=offset), split.tag)
        return out or None

    def line_records(self, split: Split, path: str | None, offset: int | None) -> list[Record]:
        """The start-up facts of engines without a parser of their own, whose streams are read here: each
        reader is asked only when the line holds one of its words."""
        msg = split.msg
        if (found := exposition.gauge(msg)) is not None:
            name, value = found
            count = None if name == "kv_usage_ratio" else int(value)
            stats = ServerStats(split.ts, self.source, self.server, path=path, offset=offset,
                                running=count if name == "running" else None,
                                waiting=count if name == "waiting" else None,
                                kv_usage_ratio=value if name == "kv_usage_ratio" else None)
            return self.sample(stats, split.tag)
        if (load := self.read_load(split, path, offset, _LOAD_READERS, _SPEED_READERS)) is not None:
            return load
        return [self.fact(split, name, value) for words, facts in _FACT_READERS if any(w in msg for w in words)
                for name, value in facts(msg)]


class TensorRtLlmParser(GenericParser):
    """A stream auto-detection named TensorRT-LLM's (its `[TensorRT-LLM]` / `[TRT-LLM]` tags, its package):
    read as any unclaimed stream is, which is all there is for it (its statements are catalogued for `auto`)."""

    server = Server.TENSORRT_LLM


class VllmRsParser(GenericParser):
    """A stream auto-detection named vllm.rs's (its `vllm_rs::` targets, its KV usage and swap lines)."""

    server = Server.VLLM_RS


class LlamaBoxParser(GenericParser):
    """A stream auto-detection named llama-box's (its batching loop's own statements, and its name), when it
    shows more of those than of llama.cpp's: a whole llama-box log, full of libllama's lines, stays llama.cpp's."""

    server = Server.LLAMA_BOX
    HOT = hot(*_HOT_WORDS, *server_args.HOT_WORDS)

    def line_records(self, split: Split, path: str | None, offset: int | None) -> list[Record]:
        """What the generic path reads, and the server's own command line (its slots and context)."""
        return [*super().line_records(split, path, offset),
                *(self.fact(split, name, value) for name, value in server_args.command_line_facts(split.msg))]
