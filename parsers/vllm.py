"""vLLM (0.4 → 0.33, V0 and V1 engines): events, load samples and start-up capacity facts.

Formats: parsers/catalogue/vllm.yaml (the logging calls, read in the source). The prefix has changed in every era
(`LEVEL date file:line]`, then `[file:line]`, process tags `(APIServer pid=…)` written by a stdout wrapper with ANSI
colour in 0.10–0.30 and by the formatter from 0.31); lines without a logger prefix (raw tracebacks, uvicorn) still
carry the tag. Start-up capacity facts (sizes, engine arguments) are read by parsers/vllm_facts.py; they match
anywhere in the message, so every era works without knowing which.

What vLLM does *not* log matters as much: V1 has no preemption line (0.12+ adds `Preemptions: N` to
the stats line, otherwise only `/metrics` knows), no request deadline, and before 0.29 no queue cap —
excess requests wait, which shows as `Waiting:` (V1) or `Pending:` (V0), never as a 429.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import timezone, tzinfo

from agent.records import CapacityFact, Event, EventKind, FieldValue, Phase, Record, Server, ServerStats, Severity
from parsers import catalogued, families, gpu, http_access, kernel, lightllm, vllm_stats, xinference
from parsers.base import LoadReaders, StreamParser
from parsers.prefix import ANSI, Split
from parsers.redact import scrub
from parsers.signature import Signature, hot, json_object, signature
from parsers.vllm_facts import FACT_WORDS, GIB, line_facts

# Facts that only come once the engine has sized its KV cache: a start-up line after one of these begins
# another start-up (a restart, or a second run appended to the same file).
_RESULT_FACTS = frozenset({"kv_cache_tokens", "gpu_blocks", "kv_cache_bytes", "max_concurrency", "required_kv_bytes"})


# A new start-up begins (not merely a start-up step such as loading weights, which ranks print in any order).
_BANNER = re.compile(r"vLLM API server version|vLLM server version|Initializing an? (?:V1 )?LLM engine")


def startup_facts(lines: Iterable[str], source: str = "-") -> list[CapacityFact]:
    """The capacity facts of the last start-up in a vLLM log, in line order.

    A file often holds several start-ups (restarts, a retry with other flags). Mixing them would pair one
    run's KV memory with another's token count, so a start-up banner (`vLLM API server version`,
    `Initializing … LLM engine`) seen after KV-sizing facts drops everything before it. Ranks of one
    start-up print the same lines; those are kept (the last value of each fact wins in `latest`).
    """
    parser = VllmParser(source)
    records: list[Record] = []
    sized = False
    for line in lines:
        text = line.rstrip("\r\n")
        if sized and _BANNER.search(text) is not None:
            records.extend(parser.flush())
            records = []
            sized = False
        new = parser.feed(text)
        records.extend(new)
        sized = sized or any(isinstance(r, CapacityFact) and r.name in _RESULT_FACTS for r in new)
    records.extend(parser.flush())
    return [r for r in records if isinstance(r, CapacityFact)]


# ---- events ---------------------------------------------------------------------------------------
def _seq_len(m: re.Match[str]) -> dict[str, FieldValue]:
    return {k: int(v.replace(",", "")) for k, v in m.groupdict().items() if v}


def _kv_needed(m: re.Match[str]) -> dict[str, FieldValue]:
    out: dict[str, FieldValue] = {"max_model_len": int(m.group("len"))}
    if m.group("need"):
        out["required_kv_bytes"] = round(float(m.group("need")) * GIB)
        out["kv_cache_bytes"] = round(float(m.group("avail")) * GIB)
    return out


def _reason(reason: str) -> Callable[[re.Match[str]], dict[str, FieldValue]]:
    return lambda m: {"reason": reason, "status": 503}


def _died(m: re.Match[str]) -> dict[str, FieldValue]:
    code = m.group("code") or m.group("code2") or m.group("code3")
    return {"exit_code": int(code)} if code else {}


def _dummy(m: re.Match[str]) -> dict[str, FieldValue]:
    return {"dummy_requests": int(m.group(1))} if m.group(1) else {}


# Start-up capacity failures are incidents: each rank states them, and the engine re-raises them.
VLLM_SIGNATURES: tuple[Signature, ...] = (
    signature(EventKind.OOM,
        r"No available memory for the cache blocks", Severity.CRITICAL, Phase.STARTUP, incident=True),
    # The profile left less than nothing for the cache (weights and activations over util × VRAM): the worker
    # logs the negative size, then the check of the cache's size raises "No available memory for the cache
    # blocks" (v1/core/kv_cache_utils.py check_enough_kv_cache_memory, V0's raise_if_cache_size_invalid)
    signature(EventKind.OOM,
        r"Available KV cache memory: -[\d.]+ GiB", Severity.CRITICAL, Phase.STARTUP, incident=True),
    # V0's scheduler preempting by swap found the CPU swap space (--swap-space) full: it raises, and the step
    # with it (core/scheduler.py _preempt_by_swap -> _swap_out); a swap preemption, and the memory it needed gone
    signature(EventKind.PREEMPTION, r"Aborted due to the lack of CPU swap space", Severity.ERROR, Phase.RUNTIME,
              lambda m: {"mode": "swap"}),
    signature(EventKind.OOM, r"Aborted due to the lack of CPU swap space", Severity.ERROR, Phase.RUNTIME,
              lambda m: {"pool": "cpu_swap"}, incident=True),
    # nothing catches it: the step raises it out of the engine (the sync `LLM` returns it to its caller, the async
    # engine's background loop ends), so the exception's own line is the engine's end as well
    signature(EventKind.ENGINE_DEAD, r"\bRuntimeError: Aborted due to the lack of CPU swap space", Severity.CRITICAL,
              Phase.RUNTIME, incident=True),
    signature(EventKind.OOM,
        r"max seq len \((?P<max_model_len>\d+)\) is larger than the maximum number of tokens that can "
        r"be stored in KV cache \((?P<kv_cache_tokens>\d+)\)", Severity.CRITICAL, Phase.STARTUP, _seq_len,
        incident=True),
    signature(EventKind.OOM, r"To serve at least one request with the models?'s max seq len \((?P<len>\d+)\)"
         r"(?:, \((?P<need>[\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory "
         r"\((?P<avail>[\d.]+) GiB)?",
         Severity.CRITICAL, Phase.STARTUP, _kv_needed, incident=True),
    # ≤0.3 printed the block count and raised only after it: zero GPU blocks is the same failure
    signature(EventKind.OOM, r"# (?:GPU|gpu|cuda|CUDA) blocks: 0\b", Severity.CRITICAL, Phase.STARTUP,
         lambda m: {"gpu_blocks": 0}, incident=True),
    # V1 warms the sampler/pooler up with max_num_seqs dummy requests before serving: an OOM there is start-up
    signature(EventKind.OOM, r"CUDA out of memory occurred when warming up \w{1,20}(?: with (\d+) dummy requests)?",
         Severity.CRITICAL, Phase.STARTUP, _dummy, incident=True),
    *gpu.GPU_SIGNATURES,
    *kernel.KERNEL_SIGNATURES,
    signature(EventKind.QUEUE_FULL,
         r"engine is currently busy and cannot accept new requests|Request queue full - rejecting",
         Severity.WARNING, Phase.ADMISSION, _reason("max_num_queued_reqs")),
    signature(EventKind.QUEUE_FULL, r"reached its prefill token backlog limit|Max queued tokens reached - rejecting",
         Severity.WARNING, Phase.ADMISSION, _reason("max_num_queued_tokens")),
    signature(EventKind.ENGINE_DEAD, r"EngineCore failed to start|Engine core initialization failed"
         r"|Engine process failed to start", Severity.CRITICAL, Phase.STARTUP, incident=True),
    signature(EventKind.ENGINE_DEAD, r"Worker \S{1,80} pid \d+ died, exit code: (?P<code>-?\d+)"
         r"|Worker proc \S{1,80} died unexpectedly(?: \(exit code: (?P<code2>-?\d+)\))?"
         r"|Engine core proc(?:ess)? \S{1,80} died unexpectedly"
         r"|Process \S{1,80} \(PID: \d+\) died with exit code (?P<code3>-?\d+)"
         r"|EngineCore encountered a fatal error|EngineCore hit an exception|WorkerProc hit an exception"
         r"|EngineDeadError|AsyncEngineDeadError|MQEngineDeadError"
         r"|Engine background task failed"
         r"|AsyncLLM output_handler failed|Background loop (?:has errored|is not running|is stopped)"
         r"|Engine iteration timed out|RPC call to \w{1,80} timed out|Engine loop is not running"
         r"|RayActorError|The actor died unexpectedly"
         # V1's run_engine_core logs the traceback, tells the front end the engine is dead and re-raises: a
         # traceback through that frame is the engine core dying, even when the paste lost the first line
         r"|vllm/v1/engine/core\.py\", line \d+, in run_engine_core\b"
         # V0's AsyncLLMEngine: the background task's traceback (logged by _log_task_completion, "Engine
         # background task failed") runs through run_engine_loop; no request's own traceback does
         r"|vllm/engine/async_llm_engine\.py\", line \d+, in run_engine_loop\b"
         # ... and its engine_step's call of the step (0.2–0.10): run_engine_loop catches nothing of it (only its
         # iteration timeout, re-raised), so a traceback through that source line is the loop ending; the same
         # frame over add_request_async is a request's ValueError, caught and handed to that request alone
         r"|request_outputs = await self\.engine\.step(?:_async\(|\.remote\(\))"
         # V0's MQLLMEngine (0.6–0.10, engine/multiprocessing/engine.py): `start` runs run_engine_loop under
         # `except Exception: logger.exception(repr(e))` and the process ends; engine_step re-raises whatever
         # step raised (an input error of one request is answered, never re-raised): either frame is the end
         r"|vllm/engine/multiprocessing/engine\.py\", line \d+, in (?:run_engine_loop|engine_step)\b"
         # V1's busy loop (v1/engine/core.py): nothing between it and run_engine_core catches an exception
         r"|vllm/v1/engine/core\.py\", line \d+, in (?:run_busy_loop|_process_engine_step)\b",
         Severity.CRITICAL, extract=_died, incident=True),
    *catalogued.signatures("auto"),  # clients and proxies: more precise than the access-line forms
    *http_access.HTTP_SIGNATURES,
    *http_access.TIMEOUT_SIGNATURES,
    *catalogued.signatures("vllm"),
    *families.FAMILY_SIGNATURES,
)

_PREEMPT_V0 = re.compile(
    r"is preempted (?:by|in) PreemptionMode\.(?P<mode>RECOMPUTE|SWAP) mode because there is not enough KV cache space"
    r"(?:[^\n]{0,300}total_num_cumulative_preemption=(?P<total>\d+))?"  # the total arrived in 0.4
)
_COLOUR_LEFT = re.compile(r"(?:\[?\d{1,3}(?:;\d{1,3}){0,3}m)+(?=\()")
_PREFIX = re.compile(
    r"((?:\([^()\n]{1,80} pid=\d{1,9}[^()\n]{0,40}\) ){0,3})"
    r"(?:(DEBUG|INFO|WARNING|ERROR|CRITICAL) ((\d\d)-(\d\d) (\d\d):(\d\d):(\d\d))(?:\.\d{1,6})? "
    r"\[?([^\]\s]{1,200}:\d{1,6})\] "
    r"|((\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d))(?:[.,]\d{1,6})? (DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{1,9} "
    r"\[([^\]\s]{1,200}:\d{1,6})\] )?"
)

# A record's own file names the statement when a paste kept only its traceback's tail. V0's
# async_llm_engine.py logs a traceback in one place, _log_task_completion ("Engine background task failed",
# exc_info=e, 0.4–0.10): its ERROR record with a frame is the background loop's end. V1's core.py logs one
# that runs through the model's forward only from run_engine_core ("EngineCore encountered a fatal error."):
# execute_model's errors are re-raised (execute_model_with_error_logging dumps the batch and raises); the
# other tracebacks of core.py (a failed utility call, a request that fails pre-processing) never reach the
# model, and a line naming them keeps the record what it is; so does one through the busy loop's own step
# (`step`, `step_with_batch_queue`: the executor's call out to the model). V0's multiprocessing engine.py logs an
# error in two places only, both with the traceback: `MQLLMEngine.start` (`repr(e)`, when its startup or engine loop
# raised: the engine then shuts down, its cleanup follows) and `run_mp_engine` (`e` itself, when building or running
# the engine raised: it marks the engine not alive and re-raises), so an ERROR record of that file that opens with
# its message is the engine's end, even when the paste kept no frame (one that opens with a frame is a paste's cut
# of the traceback, read by the frames it names).
_BACKGROUND_RECORD = re.compile(r"async_llm_engine\.py:\d+$")
_CORE_RECORD = re.compile(r"(?<![A-Za-z_])core\.py:\d+$")  # the key runs the stamp into the file
_MQ_ENGINE_RECORD = re.compile(r"(?<![A-Za-z_])engine\.py:\d+$")  # not llm_engine.py, async_llm_engine.py
_FRAME = re.compile(r"\s*File \"")
_RAISED = re.compile(r"(?:[a-z_]\w{0,40}\.){0,6}[A-Z]\w{0,60}(?:Error|Exception): \S")  # a traceback's last line
_FORWARD_FRAME = re.compile(
    r"\s*File \"[^\"]*/vllm/(?:(?:v1/attention|v1/worker|v1/sample|v1/executor|model_executor|attention)/"
    r"|v1/engine/core\.py\", line \d+, in (?:step|step_with_batch_queue)$)")
_NOT_FATAL = re.compile(r"_handle_client_request|Invocation of \w+ method failed|pre-?processing request")

_PREEMPT_WORD = "is preempted "  # "by" until 0.6.0, "in" from 0.6.1


# LightLLM's router lines, behind a logger prefix of vLLM's shape (parsers/lightllm.py)
_LOAD_READERS: LoadReaders = ((lightllm.HOT_WORDS, lightllm.load_sample),)


class VllmParser(StreamParser):
    """One vLLM log stream (API server and engine processes interleaved, any era)."""

    server = Server.VLLM
    REFUSAL_LINES = True
    SIGNATURES = VLLM_SIGNATURES
    # a (re)start, or a step only start-up takes (weights, profiling, warm-up, compilation)
    STARTING = re.compile(r"vLLM API server version|vLLM server version|Initializing an? (?:V1 )?LLM engine"
                          r"|Loading (?:model )?weights took|Model loading took|Warming up model"
                          r"|Initial profiling/warmup run|init engine \(profile")
    READY = re.compile(r"Application startup complete|Starting vLLM API server|Avg prompt throughput")
    STATS_WORD = "prompt throughput: "
    HOT = hot(_PREEMPT_WORD, *FACT_WORDS, *gpu.HOT_WORDS, *kernel.HOT_WORDS, *http_access.HOT_WORDS,
              *families.HOT_WORDS,
              *catalogued.hot_words("vllm"), *catalogued.hot_words("auto"),
              "busy", "backlog", "rejecting", "died", "Dead", "dead", "timed out", "fatal", "failed",
              "vLLM API server version", "vLLM server version", "LLM engine", "startup complete",
              "Starting vLLM", "Background loop", "Engine loop", "hit an exception", "Warming up model",
              "ERROR",  # an ERROR record opens a block whatever it says (a traceback's first frame says nothing)
              "warmup run", "init engine", "run_engine_core", "run_engine_loop", "engine_step", "run_busy_loop",
              "_process_engine_step", "Preempted request", "await self.engine.step", *xinference.HOT_WORDS,
              *lightllm.HOT_WORDS)

    def __init__(self, source: str = "-", ref_time: float | None = None, tz: tzinfo = timezone.utc) -> None:
        super().__init__(source, ref_time, tz)
        self._preempt_total: int | None = None

    # ---- the stats line (read by parsers/vllm_stats.py; what it means for the stream is here) --------------
    def _feed(self, text: str, ts: float | None, path: str | None, offset: int | None,
              line: int | None) -> list[Record]:
        """The stats line is most of a busy vLLM log: behind vLLM's own prefix it is found with three `find`s
        and one match, no split, no rules. Any other prefix takes the general path (`stats_line`)."""
        i = text.find(vllm_stats.STATS_WORD)
        if i < 0 or (records := self._behind_own_prefix(text, i, ts, path, offset, line)) is None:
            return StreamParser._feed(self, text, ts, path, offset, line)
        return records

    def _behind_own_prefix(self, text: str, i: int, ts: float | None, path: str | None, offset: int | None,
                           line: int | None) -> list[Record] | None:
        """The records of a stats line whose fields start at `i` behind vLLM's own prefix (None for any other
        line): the line is counted and dated as `_feed` would, and a new record ends its process's open one."""
        if (prefix := vllm_stats.own_prefix(text, i)) is None:
            return None
        tag, stamp, start = prefix
        if (m := vllm_stats.match(text, start)) is None:
            return None
        self.lines_seen += 1
        if "\x1b" in tag:
            tag = ANSI.sub("", tag)
        if ts is None:
            ts = self.stamps.yearless_text(stamp)
        self._last_ts = ts
        self._starting = False
        out: list[Record] = []
        if self._blocks:
            self._continue_block(Split("", ts, "INFO", tag, stamp), out)
        return out + self._sampled(*vllm_stats.sample(m, ts, self.source, path, offset, line), tag)

    def settle_sample(self, minute: str, second: int, tag: str, engine: str | None, pt: float, gt: float,
                      running: int, waiting: int, kv: float, hit: float | None, path: str | None, offset: int,
                      line: int | None) -> list[Record] | None:
        """The records of a stats line in V1's plain shape behind vLLM's own prefix that the compiled lane read
        (parsers/_lane.c: prefix and fields checked, numbers converted, no ANSI colour): what `_behind_own_prefix`
        gives for it, without the finds and the match. None, and nothing done, when the line needs `feed` after
        all: something is open (`between_records`), or its minute is not converted yet."""
        base = self.stamps.minute_base(minute)
        if base is None or not self.between_records():
            return None
        self.lines_seen += 1
        ts = self._last_ts = base + second
        self._starting = False
        stats = vllm_stats.settled(ts, self.source, path, offset, line, pt, gt, running, waiting, kv, hit)
        # `_sampled` without the preemption count, which this shape has not; `pending` is the one record to scrub
        out = self.sample(stats, f"{tag} engine {engine}" if engine else tag)
        if len(out) > 1:
            out[1] = scrub(out[1])
        return out

    def stats_line(self, split: Split, path: str | None, offset: int | None) -> list[Record] | None:
        m = vllm_stats.match(split.msg)
        read = (vllm_stats.sample(m, split.ts, self.source, path, offset) if m is not None else
                vllm_stats.anywhere(split.msg, split.ts, split.level is not None, self.stamps.yearless, self.source,
                                    path, offset))
        return None if read is None else self._sampled(*read, split.tag)

    def _sampled(self, stats: ServerStats, engine: str | None, tag: str) -> list[Record]:
        """A sample's records: it, a `pending` event when its queue has just formed (each DP engine has its own
        queue), and a preemption event when the line counted some."""
        out = self.sample(stats, f"{tag} engine {engine}" if engine else tag)
        if stats.preemptions:
            out.append(Event(
                ts=stats.ts, source=self.source, server=Server.VLLM, kind=EventKind.PREEMPTION,
                severity=Severity.WARNING, phase=Phase.RUNTIME,
                message=f"{stats.preemptions} preemptions in the last stats interval",
                fields={"count": stats.preemptions}, path=stats.path, offset=stats.offset, line=stats.line))
        return out

    # ---- the rest -----------------------------------------------------------------------------------------
    def events_for(self, split: Split, lines: Iterable[str], path: str | None, offset: int | None) -> list[Record]:
        """The signatures' events, and an engine death that only the record's file tells (see
        _BACKGROUND_RECORD): a traceback pasted from its middle has no wording and no loop frame left."""
        lines = list(lines)
        out = super().events_for(split, lines, path, offset)
        if split.level != "ERROR" or split.key is None or self._engine_dead:
            return out
        key = split.key.rstrip()
        if _BACKGROUND_RECORD.search(key) is not None:
            dead = any(_FRAME.match(line) for line in lines)
        elif _CORE_RECORD.search(key) is not None:
            dead = (any(_FORWARD_FRAME.match(line) for line in lines)
                    and not any(_NOT_FATAL.search(line) for line in lines))
        elif _MQ_ENGINE_RECORD.search(key) is not None:
            # the record's own message; or a paste cut into the traceback that still ends in the raised exception
            # (the file logs a traceback only where the engine ends), not a paste's run of its frames alone
            dead = not lines[0][:1].isspace() or (any(_FRAME.match(line) for line in lines)
                                                  and _RAISED.match(lines[-1]) is not None)
        else:
            return out
        if dead:
            self._engine_dead = True
            if not self._repeat(EventKind.ENGINE_DEAD, split.ts):
                said = next((line for line in reversed(lines) if line[:1].strip()), lines[0])  # the exception
                out.append(self.event(split, EventKind.ENGINE_DEAD, Severity.CRITICAL, None, {}, path, offset, said))
        return out

    def split(self, text: str) -> Split:
        if text.startswith("{"):
            return self._split_json(text)
        if text[:1] in "[0123456789" and (c := _COLOUR_LEFT.match(text)) is not None:
            text = text[c.end():]  # a pasted colour code whose ESC was lost: `[36m(RayWorkerWrapper pid=…)`
        m = _PREFIX.match(text)
        if m is None or m.end() == 0:
            return Split(text)
        tag = m.group(1).strip()
        msg = text[m.end():]
        level = m.group(2)
        if level:
            stamp = m.group(3)
            cached, ts = self.stamps.last
            if stamp != cached:
                ts = self.stamps.yearless(int(m.group(4)), int(m.group(5)), int(m.group(6)), int(m.group(7)),
                                   int(m.group(8)), stamp)
            return Split(msg, ts, level, tag, tag + level + stamp + m.group(9))
        if m.group(10):
            ts = self.stamps.local(int(m.group(11)), int(m.group(12)), int(m.group(13)), int(m.group(14)),
                            int(m.group(15)), int(m.group(16)), m.group(10))
            return Split(msg, ts, m.group(17), tag, f"{tag}{m.group(17)}{m.group(10)}{m.group(18)}")
        return Split(msg, tag=tag)

    def _split_json(self, text: str) -> Split:
        """0.33's opt-in JSON formatter: `asctime levelname name processName process message` keys."""
        record = json_object(text)
        if record is None or not isinstance(record.get("message"), str):
            return Split(text)
        level = record.get("levelname")
        stamp = record.get("asctime")
        tag = f'{record.get("processName")} pid={record.get("process")}'
        ts = self.stamps.rfc3339(stamp.replace(",", ".")) if isinstance(stamp, str) else None
        return Split(record["message"], ts, level if isinstance(level, str) else None, tag,
                     f"{tag}{level}{stamp}{record.get('name')}")

    def line_records(self, split: Split, path: str | None, offset: int | None) -> list[Record]:
        msg = split.msg
        if _PREEMPT_WORD in msg:
            m = _PREEMPT_V0.search(msg)
            if m is not None:
                return [self._preempt_v0(split, m, path, offset)]
        if "model config: {" in msg:  # Xinference launching this vLLM (parsers/xinference.py)
            return [self.fact(split, name, value) for name, value in xinference.facts(msg)]
        if (load := self.read_load(split, path, offset, _LOAD_READERS)) is not None:
            return load
        return [self.fact(split, name, value) for name, value in line_facts(msg)]

    def _preempt_v0(self, split: Split, m: re.Match[str], path: str | None, offset: int | None) -> Record:
        """V0 warns on the 1st, 51st, 101st… preemption with the running total: the increment since the
        last warning is the count (the first warning stands for itself: total 1 → 1). Versions before the
        total (≤0.3) warn on every preemption: count 1."""
        if m.group("total") is None:
            return self.event(split, EventKind.PREEMPTION, Severity.WARNING, Phase.RUNTIME,
                              {"count": 1, "mode": m.group("mode").lower()}, path, offset)
        total = int(m.group("total"))
        before = self._preempt_total
        count = total - before if before is not None and total > before else total
        self._preempt_total = total
        return self.event(split, EventKind.PREEMPTION, Severity.WARNING, Phase.RUNTIME,
                          {"count": count, "total_preemptions": total, "mode": m.group("mode").lower()},
                          path, offset)
