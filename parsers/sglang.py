"""SGLang (0.2 → 0.5): batch lines as load samples, retraction, queue limits, scheduler crashes, capacity.

Formats: parsers/catalogue/sglang.yaml (the logging calls, read in the source). No level is printed; the prefix is
`[date TPn]` (0.2.15: `[HH:MM:SS TPn]`), local time. The Prefill/Decode lines are the stats line: `#queue-req` is the
waiting queue, `token usage` the KV usage (evictable radix-cache entries count as free). SGLang's preemption is
called retraction ("Decode out of memory happened" ≤0.4.6, "KV cache pool is full. Retract requests." after) — it is
KV pressure, not a CUDA OOM, and is matched before the OOM rules. A queue wait that runs out (`Request waiting
timeout reached.`) produced no token, so it is a rejection (`queue_full`, phase queue); a running timeout came after
work began (`deadline_exceeded`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import timezone, tzinfo

from agent.records import Event, EventKind, FieldValue, Phase, Record, Server, ServerStats, Severity
from parsers import catalogued, families, gpu, http_access, kernel, xinference
from parsers.base import StreamParser
from parsers.prefix import Split, quoted_or_request
from parsers.signature import Signature, hot, signature, size_bytes


def _retract(m: re.Match[str]) -> dict[str, FieldValue]:
    return {"count": int(m.group(1))} if m.group(1) else {}


def _kv_oom(m: re.Match[str]) -> dict[str, FieldValue]:
    tokens = m.group("tokens")
    return {"pool": "kv", **({"requested_tokens": int(tokens)} if tokens else {})}




SGLANG_SIGNATURES: tuple[Signature, ...] = (
    # ≤0.2 wrote "decode out of memory happened, #retracted_reqs: …" (lower case, comma)
    # (the counts cut off by a paste, or the message quoted by its words alone, is still a retraction: nothing
    # else in SGLang, or in any other engine, says "Decode out of memory happened"; the source's own literal,
    # `"Decode out of memory happened. "` in a diff, goes on to its f-string and is none)
    signature(EventKind.PREEMPTION,
        r"(?:[Dd]ecode out of memory happened|KV cache pool is full\. Retract requests)[.,] #retracted_reqs: (\d+)"
        r"|Decode out of memory happened(?=[\"'`]|\.?$|\.\s+[A-Z(])", Severity.WARNING, Phase.RUNTIME, _retract),
    signature(EventKind.OOM, r"Not enough memory\. Please try to increase --mem-fraction-static", Severity.CRITICAL,
         Phase.STARTUP, incident=True),
    # the KV pool itself ran dry (no retraction possible): the scheduler raises and dies
    signature(EventKind.OOM, r"(?:(?:Prefill|Decode) out|\bOut) of memory\. Try to lower your batch size\.?"
         r"(?:\s{0,4}Try to allocate (?P<tokens>\d+) tokens)?|alloc_req_slots runs out of memory"
         r"|No space left for only one request", Severity.ERROR,  # retract_decode: nothing left to retract
         Phase.RUNTIME, _kv_oom, incident=True),
    # the profiled KV pool came out negative: the weights left no room for any KV cache (then "Not enough memory")
    signature(EventKind.OOM,
        r"is larger than the profiled value -\d+", Severity.CRITICAL, Phase.STARTUP, incident=True),
    *gpu.GPU_SIGNATURES,
    *kernel.KERNEL_SIGNATURES,
    signature(EventKind.QUEUE_FULL, r"The request queue is full", Severity.WARNING, Phase.ADMISSION,
         lambda m: {"reason": "max_queued_requests", "status": 503}),
    signature(EventKind.QUEUE_FULL, r"Request (?:waiting|queue) timeout reached", Severity.WARNING, Phase.QUEUE,
         lambda m: {"reason": "queue_timeout", "status": 503}),
    signature(EventKind.DEADLINE_EXCEEDED, r"Request running timeout reached", Severity.WARNING, Phase.GENERATION,
         lambda m: {"reason": "running_timeout", "scope": "request", "timeout_by": "engine",
                    "timeout_on": "generation"}),
    # TpModelWorkerClient: the overlap scheduler's forward thread (managers/tp_worker_overlap_thread.py,
    # forward_thread_func, 0.3.5 on) logs its traceback and sends SIGQUIT to the scheduler's process
    signature(EventKind.ENGINE_DEAD, r"(?:Scheduler|TokenizerManager|DetokenizerManager|DataParallelController"
         r"|TpModelWorkerClient) hit an exception"
         r"|Received sigquit from a child process|SIGQUIT received"
         r"|[Ww]atchdog timeout \((?![^\n)]{0,80}soft=True)|Health check failed"
         r"|Child process unexpectedly failed"
         # run_scheduler_process (managers/scheduler.py, 0.3 on) catches whatever ends the scheduler, start-up
         # included, logs its traceback as "Scheduler hit an exception: …" and sends SIGQUIT to the parent: a
         # traceback through that frame is the scheduler dying, even when the paste lost the record's first
         # line (py-spy prints a live stack's frames as `run_scheduler_process (…/scheduler.py:N)`, no match)
         r"|sglang/srt/managers/scheduler\.py\", line \d+, in run_scheduler_process\b",
         Severity.CRITICAL, incident=True),
    # the launcher waiting for its schedulers' ready message (entrypoints/engine.py _launch_subprocesses): a
    # scheduler that closed its pipe died while loading the model
    signature(EventKind.ENGINE_DEAD, r"Rank \d+ scheduler is dead", Severity.CRITICAL, Phase.STARTUP, incident=True),
    *catalogued.signatures("auto"),  # clients and proxies: more precise than the access-line forms
    *http_access.HTTP_SIGNATURES,
    *http_access.TIMEOUT_SIGNATURES,
    *catalogued.signatures("sglang"),
    *families.FAMILY_SIGNATURES,
)

# `[date ranks] ` (ranks may be absent), or ranks alone (`[TP0] `).
_PREFIX = re.compile(
    r"\[(?:(?:(\d{4})-(\d\d)-(\d\d) )?(\d\d):(\d\d):(\d\d)(?:\.(\d{3}))?((?: [A-Z_]{1,12}\d{1,5}){0,6})"
    r"|((?:[A-Z_]{1,12}\d{1,5} ?){1,6}))\] "
)
# A Ray worker's tag, when SGLang runs as an RL rollout engine: `(WorkerDict pid=29239) `.
_RAY_TAG = re.compile(r"\([\w.-]{1,60} pid=\d{1,9}(?:, ip=[\d.]{1,40})?\) ")
# 0.1's router (managers/router/model_rpc.py, ModelRpcServer.get_new_fill_batch) logged only the prefill side:
# `new fill batch. #seq: 1. … #remaining_req: 57. #running_req: 9.` — the waiting queue and the running batch
_BATCH = re.compile(r"(?:Prefill|Decode) batch(?: \[\d+\])?[.,] |new fill batch\. ")
_INT = {name: re.compile(pat) for name, pat in {
    "running": r"#running[-_]req: (\d+)", "waiting": r"#(?:queue-req|remaining_req): (\d+)",
    "kv_used_tokens": r"#(?:full )?token: (\d+)",
}.items()}
_FLOAT = {name: re.compile(pat) for name, pat in {
    "kv_usage_ratio": r"(?:^|, )(?:full )?token usage: ([\d.]+)", "gen_tps": r"gen throughput \(token/s\): ([\d.]+)",
    "prompt_tps": r"input throughput \(token/s\): ([\d.]+)", "prefix_hit_ratio": r"cache hit rate: ([\d.]+)%",
}.items()}
_FACTS = (
    ("kv_cache_tokens", re.compile(r"\bmax_total_num_tokens=(\d+)"), float),
    ("max_num_seqs", re.compile(r"\bmax_running_requests=(\d+)"), float),
    ("max_model_len", re.compile(r"\bcontext_len=(\d+)"), float),
    ("max_batch_prefill_tokens", re.compile(r"\bmax_prefill_tokens=(\d+)"), float),
    ("gpu_memory_utilization", re.compile(r"\bmem_fraction_static=([\d.]+)"), float),
    ("tensor_parallel_size", re.compile(r"\btp_size=(\d+)"), float),
    ("kv_cache_dtype", re.compile(r"\bkv_cache_dtype='([\w.]+)'"), str),
    ("block_size", re.compile(r"\bpage_size=(\d+)"), float),
    ("model", re.compile(r"\bmodel_path='([^']{1,300})'"), str),
    ("kv_cache_tokens", re.compile(r"KV Cache is allocated\.(?: dtype: \S+,)? #tokens: (\d+)"), float),
    # the memory free before the weights load: what --mem-fraction-static is a fraction of (model_runner's
    # total_gpu_memory), so the judge can size it when "Not enough memory" stops the start
    ("device_free_bytes", re.compile(r"Load weight begin\. avail mem=([\d.]+) GB"),
     lambda v: float(size_bytes(v, "GB"))),
    # and what is left once the weights and the KV pool are in (init_memory_pool's last line, or the graph
    # runner's first when the pool's is not shown): the room the CUDA graphs and the activations get, which a
    # graph-capture OOM right after it ran out of
    ("free_after_kv_bytes", re.compile(r"(?:Memory pool end|Capture cuda graph begin\. This can take up to several "
                                       r"minutes)\. avail mem=([\d.]+) GB"),
     lambda v: float(size_bytes(v, "GB"))),
)
_KV_SIZE = re.compile(
    r"KV Cache is allocated\.[^\n]{0,80}?(?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)"
)
_WEIGHTS = re.compile(r"Load weight end\.[^\n]{0,200}mem usage=([\d.]+) GB")
_GRAPHS = re.compile(r"Capture cuda graph end\.[^\n]{0,100}mem usage=([\d.]+) GB")


class SglangParser(StreamParser):
    """One SGLang log stream (scheduler ranks, tokenizer and HTTP server interleaved)."""

    server = Server.SGLANG
    REFUSAL_LINES = True
    SIGNATURES = SGLANG_SIGNATURES
    STARTING = re.compile(r"server_args=|Load weight begin")
    READY = re.compile(r"The server is fired up and ready to roll|Application startup complete|Decode batch")
    STATS_WORD = "-req: "  # #running-req, #queue-req; a PD prefill server's line has only the latter
    STATS_WORD2 = "_req: "  # 0.1's #remaining_req, #running_req
    HOT = hot("batch", "retract", "Retract", "out of memory", "Out of memory", "Not enough memory", "queue is full",
              "timeout reached",
              "hit an exception", "sigquit", "SIGQUIT", "atchdog timeout", "Health check failed", "is dead",
              "unexpectedly failed", "in run_scheduler_process", "No space left", "profiled value",
              "max_total_num_tokens", "server_args=", "KV Cache is allocated",
              "max_running_requests=", "context_len=", "max_prefill_tokens=", "mem_fraction_static=", "tp_size=",
              "kv_cache_dtype=", "page_size=", "model_path=",
              "Load weight", "Memory pool end", "Capture cuda graph begin", "Capture cuda graph end", "fired up",
              "startup complete",
              *gpu.HOT_WORDS, *kernel.HOT_WORDS, *http_access.HOT_WORDS, *families.HOT_WORDS,
              *catalogued.hot_words("sglang"),
              *catalogued.hot_words("auto"), *xinference.HOT_WORDS)

    def __init__(self, source: str = "-", ref_time: float | None = None, tz: tzinfo = timezone.utc) -> None:
        super().__init__(source, ref_time, tz)
        self._retraction: tuple[str, float | None, set[str]] = ("", None, set())

    def events_for(self, split: Split, lines: Iterable[str], path: str | None, offset: int | None) -> list[Record]:
        """Every tensor-parallel rank runs the same scheduler and logs the same retraction: the same message at
        the same second from another rank is that one occurrence again, not another (the same rank saying it
        twice is two)."""
        out = super().events_for(split, lines, path, offset)
        for event in [e for e in out if isinstance(e, Event) and e.kind is EventKind.PREEMPTION]:
            message, ts, tags = self._retraction
            if event.message == message and event.ts == ts and split.tag not in tags:
                tags.add(split.tag)
                out.remove(event)
            else:
                self._retraction = (event.message, event.ts, {split.tag})
        return out

    def split(self, text: str) -> Split:
        ray = ""
        if text.startswith("(") and (r := _RAY_TAG.match(text)) is not None:
            ray, text = r.group(0).strip(), text[r.end():]
        m = _PREFIX.match(text)
        if m is None:
            return Split(text, tag=ray)
        stamp = m.group(0)
        ranks = m.group(9) or m.group(8)
        tag = f"{ray} {ranks.strip()}" if ray else ranks.strip()
        ts = None
        if m.group(1):
            second = int(m.group(6)) + (int(m.group(7)) / 1000 if m.group(7) else 0.0)
            ts = self.stamps.local(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)),
                            second, stamp)
        return Split(text[m.end():], ts, None, tag, ray + stamp)

    def stats_line(self, split: Split, path: str | None, offset: int | None) -> list[Record] | None:
        """The batch line's `#name: value` fields wherever they sit: any order, extra fields (PD servers'
        `#transferring-req`, hybrid models' `mamba usage`), and after a progress bar that swallowed the prefix
        (whose `[date TPn]` then still supplies time and rank)."""
        msg = split.msg
        b = _BATCH.search(msg, 0, 600)
        if b is None:
            return None
        if b.start() > 0:
            head = msg[:b.start()]
            if quoted_or_request(head, msg):
                return None
            k = head.rfind("[")
            if split.key is None and k >= 0 and (p := _PREFIX.match(head, k)) is not None and p.end() == len(head):
                split = self.split(msg[k:])
            msg = msg[b.start():]
        ints = {k: int(m.group(1)) for k, p in _INT.items() if (m := p.search(msg)) is not None}
        floats = {k: float(m.group(1)) for k, p in _FLOAT.items() if (m := p.search(msg)) is not None}
        if "prefix_hit_ratio" in floats:
            floats["prefix_hit_ratio"] /= 100
        return self.sample(ServerStats(split.ts, self.source, Server.SGLANG, path=path, offset=offset,
                                       **ints, **floats), split.tag)  # type: ignore[arg-type]

    def line_records(self, split: Split, path: str | None, offset: int | None) -> list[Record]:
        msg = split.msg
        if "model config: {" in msg:  # Xinference launching this SGLang (parsers/xinference.py)
            return [self.fact(split, name, value) for name, value in xinference.facts(msg)]
        out: list[Record] = []
        for name, pattern, conv in _FACTS:
            m = pattern.search(msg)
            if m is not None:
                out.append(self.fact(split, name, conv(m.group(1))))
        if (m := _KV_SIZE.search(msg)) is not None:
            total = size_bytes(m.group(3), "GB") if m.group(3) else size_bytes(m.group(1), "GB") + size_bytes(
                m.group(2), "GB")
            out.append(self.fact(split, "kv_cache_bytes", total))
        if (m := _WEIGHTS.search(msg)) is not None:
            out.append(self.fact(split, "weights_bytes", size_bytes(m.group(1), "GB")))
        if (m := _GRAPHS.search(msg)) is not None:
            out.append(self.fact(split, "cuda_graph_bytes", size_bytes(m.group(1), "GB")))
        return out
