"""llama.cpp `llama-server` (mid-2024 → newest), also as embedded in Ollama: failures, KV pressure, capacity.

Formats: parsers/catalogue/llamacpp.yaml and ollama.yaml (the logging calls, read in the source). Three prefix eras:
mid-2024 `INFO [function] msg | k=v` or JSON; late 2024 no prefix at all (`srv  update_slots: …`, `slot launch_slot_:
id 0 | task 3 | …`); newest `0.13.678.564 I srv …` — minutes.seconds.ms.µs *since start*, not a wall clock, so those
lines get the envelope time or none. Ollama wraps the same engine: its own lines are Go `slog` (`time=… level=…
source=… msg="…"`) and GIN access lines, and it prints the runner's llama.cpp lines verbatim. llama-server never
sends 429 (excess requests wait for a slot); Ollama refuses with 503 "server busy … maximum pending requests
exceeded" once `OLLAMA_MAX_QUEUE` is full.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timezone, tzinfo

from agent.records import EventKind, FieldValue, Phase, Record, Server, ServerStats, Severity
from parsers import catalogued, families, gpu, http_access, kernel, koboldcpp, server_args, textgen
from parsers.base import LoadReaders, SpeedReaders, StreamParser
from parsers.prefix import Split, quoted_or_request
from parsers.signature import Signature, hot, json_object, signature, size_bytes


def _oversize(m: re.Match[str]) -> dict[str, FieldValue]:
    sizes = {k: int(v) for k, v in (("prompt_tokens", m.group("tokens")), ("context_tokens", m.group("ctx"))) if v}
    return {"status": 400, "reason": "prompt_too_long", **sizes}


LLAMACPP_SIGNATURES: tuple[Signature, ...] = (
    *gpu.GPU_SIGNATURES,
    *kernel.KERNEL_SIGNATURES,
    signature(EventKind.QUEUE_FULL,
        r"server busy, please try again|maximum pending requests exceeded", Severity.WARNING,
         Phase.ADMISSION, lambda m: {"reason": "max_queue", "status": 503}),
    # (a runner that terminated says so on the same line, and is read as the process's end below)
    LOAD_FAILED := signature(EventKind.ENGINE_DEAD,
        r"timed out waiting for llama runner to start|error loading model|failed to load model",
         Severity.CRITICAL, Phase.STARTUP, incident=True,
         unless=families.CLIENT_LEFT_LOAD + r"|llama (?:runner|server) process has terminated"),
    signature(EventKind.ENGINE_DEAD, r"llama (?:runner|server) process has terminated"
         r"|llama runner process no longer running|llama runner exited|GGML_ASSERT(?:\(|: )|Segmentation fault"
         r"|core dumped"
         # Ollama's patched server loop (late 2023 on): the loop ends, the engine is gone
         r"|unexpected error in llama server update_slots - exiting main loop"
         r"|caught (?:unknown )?exception in llama server main loop"
         r"|: Assertion [`'][^\n]{1,300}' failed\.",  # a C / libstdc++ assert: the process aborts
         Severity.CRITICAL, incident=True),
    # One line per request the server answered with an error (`send_error`, 2025 on): the count of failed
    # requests, as the clients saw them. A request longer than a slot's context is refused before any work
    # (HTTP 400); "Context size has been exceeded" is a request cut off when the shared cells ran out (HTTP 500).
    signature(EventKind.REQUEST_FAILED, r"send_error: task id = \d+, error: (?:request \((?P<tokens>\d+) tokens\) "
              r"exceeds the available context size \((?P<ctx>\d+) tokens\)|the request exceeds the available context "
              r"size)", Severity.INFO, Phase.ADMISSION, _oversize),
    signature(EventKind.REQUEST_FAILED, r"send_error: task id = \d+, error: Context size has been exceeded",
              Severity.ERROR, Phase.GENERATION, lambda m: {"status": 500, "reason": "context_exceeded"}),
    signature(EventKind.DEADLINE_EXCEEDED, r"should_stop condition \(adjust the --timeout", Severity.WARNING,
         Phase.GENERATION, lambda m: {"reason": "server_timeout", "scope": "request"}),
    *catalogued.signatures("auto"),  # clients and proxies: more precise than the access-line forms
    *http_access.TIMEOUT_SIGNATURES,
    *http_access.HTTP_SIGNATURES,
    *catalogued.signatures("llamacpp"),
    *families.FAMILY_SIGNATURES,
)

_SINCE_START = re.compile(r"\d{1,6}\.\d\d\.\d{3}\.\d{3} ([IWED]) ")
_TEXT_A = re.compile(r"(INFO|WARN| ERR|ERR|VERB|DBUG|DEBUG) \[ {0,24}(\w{1,40})\] ")
# Go slog's text handler; a paste that lost the spaces between its pairs (`…865Zlevel=INFOsource=server.go:383msg=…`)
# reads the same, the keys being fixed
_SLOG = re.compile(r"time=(\S{10,40}?) ?level=([A-Z]{1,8}|\w{1,8}?) ?source=\S{1,200}? ?msg=")
_QUOTED_MSG = re.compile(r"\"((?:[^\"\\\n]|\\.){0,2000})\"")
_GOLOG = re.compile(r"(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d) ")
_GIN = re.compile(r"\[GIN\] (\d{4})/(\d\d)/(\d\d) - (\d\d):(\d\d):(\d\d) ")
_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "D": "DEBUG", "ERR": "ERROR", "WARN": "WARNING"}
def _slot_pool(slots: str, per_slot: str, unified: str) -> float:
    return float(per_slot) if unified == "true" else float(slots) * float(per_slot)


_FACTS: tuple[tuple[str, re.Pattern[str], Callable[..., float | str]], ...] = (
    # `n_ctx` at start-up is the whole cache; a slot's own (`new slot, n_ctx = 4096`, newest builds) is a
    # request's limit, as `n_ctx_slot` is; the per-request `new prompt, n_ctx_slot = …` line is no start-up fact,
    # nor the server's infill debug line (`format_infill`'s `extra: n_ctx = 4096, n_extra_take = …`, a request's)
    ("kv_cache_tokens", re.compile(r"(?<!new slot, )(?<!extra: )\bn_ctx +(?:= )?(\d+)"), float),
    ("max_model_len", re.compile(r"new slot, n_ctx += (\d+)"), float),
    ("kv_cache_tokens", re.compile(r"\bsize = +[\d.]+ MiB \( *(\d+) cells"), float),
    # newer builds and bindings: the (non-SWA) cache's cells; old builds: `llama_kv_cache_init: kv_size = N`
    ("kv_cache_tokens", re.compile(r"creating non-SWA KV cache, size = (\d+) cells|\bkv_size = (\d+)"), float),
    ("max_num_seqs", re.compile(r"\bn_seq_max +(?:= )?(\d+)|initializing(?: slots)?, n_slots = (\d+)"), float),
    # `n_ctx_seq = 4096` in the context's summary; late 2025 on also the warning `n_ctx_seq (131072) < n_ctx_train
    # (262144) -- the full capacity …` (or `>`, a possible overflow), the one size printed at the default verbosity
    ("max_model_len", re.compile(r"(?<!new prompt, )\bn_ctx_(?:slot|per_seq|seq)(?: +(?:= )?| \()(\d+)"), float),
    # 2025 on, at the default verbosity the only size printed: `initializing, n_slots = 4, n_ctx_slot = 512,
    # kv_unified = 'true'` — one pool of n_ctx_slot cells shared by every slot, or n_slots pools of it
    ("kv_cache_tokens", re.compile(r"n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(true|false)'"), _slot_pool),
    ("kv_cache_dtype", re.compile(r"(?:KV self size|size) += +[\d.]+ MiB[^\n]{0,80}?K \((\w{1,12})\)"), str),
    # late 2023's server: each slot's context as it starts (`Available slots:` then ` -> Slot 0 - max context: 512`)
    ("max_model_len", re.compile(r"-> Slot \d{1,4} - max context: (\d{1,9})"), float),
    # late 2023's libllama: the device total after the context is made, the weights' part first (MiB, printed "MB")
    ("weights_bytes", re.compile(r"total VRAM used: [\d.]{1,12} MB \(model: (\d{1,9}(?:\.\d{1,6})?) MB, "),
     lambda mib: float(size_bytes(mib, "MiB"))),
)
# The JSON form's start-up sizes (server.cpp's `LOG_INFO("initializing slots", {{"n_slots", …}})` and `("new slot",
# {{"n_ctx_slot", …}})`, mid-2024): the field that carries each message's size
_JSON_SIZES = {"initializing slots": "n_slots", "new slot": "n_ctx_slot"}
# A slot's line about a request (`slot operator(): id 0 | task 44674 | … n_ctx_slot = 8192`; server.cpp's SLT_*
# macros print the task's id, -1 while the slot is being set up at start): its sizes are that request's, no facts
_REQUEST_SLOT = re.compile(r"\| task \d{1,12} \|")
# the servers' command lines (Ollama's runner, llama-box): parsers/server_args.py
# slog always closes a quoted value: a command line whose quote is still open was cut (a terminal or a viewer
# wrapped it mid-path), and the next line, with no prefix of its own, holds the rest
_OLLAMA_CMD_CUT = re.compile(r'^starting llama server ?cmd="[^"\n]{0,2000}$')
_CTX_SIZE = re.compile(r"(?:^| )--ctx-size (\d+)\b")
# The buffers' sizes are printed with `%.2f` under the process's locale: `1024.00`, or `1024,00` where the
# decimal mark is a comma; a device is its backend's name (`CUDA0`, `SYCL1`, `Vulkan0`) or an RPC server's
# (`RPC[10.0.2.209:50052]`)
_MIB = r"(\d{1,9}(?:[.,]\d{1,6})?) MiB"
_DEVICE = r"(?!CPU)(?!\w{1,20}_Host)(?:\w{1,20}|RPC\[[^\]\s]{1,60}\])"
_KV_MIB = re.compile(r"(?:KV self size|llama_kv_cache\w{0,20}: +size) += +" + _MIB
                     # each accelerator's share (a CPU or host buffer is RAM); the total line, where printed, wins
                     + r"|llama_kv_cache\w{0,20}: +" + _DEVICE + " KV buffer size = +" + _MIB)
# Weights on an accelerator (a CPU or host buffer is RAM): `load_tensors: CUDA0 model buffer size = … MiB`
# (`llm_load_tensors:` in older builds, no `model` in some forks). One fact per device; the last one wins.
_WEIGHTS_MIB = re.compile(r"load_tensors: +(" + _DEVICE + ") (?:model )?buffer size = +" + _MIB)
# The graph's scratch memory on an accelerator, reserved at start-up: llama.cpp's activation peak
# (`llama_context:      CUDA0 compute buffer size =   560.00 MiB`; a host buffer is RAM)
_COMPUTE_MIB = re.compile(r"(?:llama_context|llama_new_context_with_model): +(" + _DEVICE + ") "
                          r"compute buffer size = +" + _MIB)


def _mib(number: str) -> int:
    """Bytes of a buffer's `%.2f` MiB, whichever decimal mark the locale printed."""
    return size_bytes(number.replace(",", "."), "MiB")
# Ollama's own start-up lines (Go slog, message already unquoted by the splitter)
_OLLAMA_SIZES = (
    ("weights_bytes", re.compile(r"^model weights (?:buffer|device)=(?!CPU)\w{1,20} size=\"([\d.]+) ([KMGT]i?B|B)\"")),
    ("weights_bytes", re.compile(r"\bmemory\.weights\.total=\"([\d.]+) ([KMGT]i?B|B)\"")),
    ("kv_cache_bytes", re.compile(r"\bmemory\.required\.kv=\"([\d.]+) ([KMGT]i?B|B)\"")),
    ("kv_cache_bytes", re.compile(r"^kv cache device=(?!CPU)\w{1,20} size=\"([\d.]+) ([KMGT]i?B|B)\"")),
    ("activation_peak_bytes", re.compile(r"^compute graph device=(?!CPU)\w{1,20} size=\"([\d.]+) ([KMGT]i?B|B)\"")),
)
# Ollama's scheduler, placing a model (server/sched.go): the slots it will run (`parallel`, OLLAMA_NUM_PARALLEL or
# its default) and the VRAM free for it, in bytes, before it loads
_OLLAMA_FIT = re.compile(r"^new model will fit in available VRAM[^\"\n]{0,40}, loading\"? [^\n]{0,2000}?"
                         r"\bparallel=(\d{1,4}) available=(\d{1,16})\b")
# Load lines of programs built on libllama whose streams read as llama.cpp's: koboldcpp's request summary, and
# text-generation-webui's with its llama.cpp loader
_LOAD_READERS: LoadReaders = ((koboldcpp.HOT_WORDS, koboldcpp.load_sample),)
_SPEED_READERS: SpeedReaders = ((textgen.HOT_WORDS, textgen.speed_sample),)
# Timings: per slot every few seconds (`tg = 12.93 t/s, tg_3s = 12.57 t/s`), and a request's summary in every
# era's wording (`prompt eval time = … ms / 25 tokens (… ms per token, 33.25 tokens per second)`).
_TG = re.compile(r"\btg(_3s)? = +(\d{1,9}(?:\.\d{1,4})?) t/s")
_PROMPT_TPS = re.compile(r"prompt eval time *= *[\d.]+ ms / +\d+ tokens \( *[\d.]+ ms per token, +([\d.]+) "
                         r"tokens per second"
                         # a long prompt's progress (printed after 3 s of prefill): `prompt processing, n_tokens =
                         # 1536, progress = 0.10, t = 3.42 s / 448.61 tokens per second`
                         r"|prompt processing, n_tokens = +\d+, progress = [\d.]+, t = +[\d.]+ s / +([\d.]+) "
                         r"(?:tokens per second|t/s)")
_GEN_TPS = re.compile(r"(?<!prompt )\beval time *= *[\d.]+ ms / +\d+ (?:tokens|runs) +\( *[\d.]+ ms per token, "
                      r"+([\d.]+) tokens per second")
# Start-up allocation failures: ggml names the size of the buffer it could not get (`alloc_tensor_range: failed
# to allocate CUDA0 buffer of size 17179869184`, the CUDA backend's `allocating 16384.00 MiB on device 0:
# cudaMalloc failed`, the graph allocator's `ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size N`),
# then libllama says which buffer it was: the KV cache's or the compute graph's. Both sizes become facts, with
# the device's free memory libllama printed before loading (2025 on), so the judge can size `-c`.
_FAILED_SIZE = re.compile(r"failed to allocate \w{1,20} buffer of size (\d{1,15})"
                          r"|allocating ([\d.]{1,12}) MiB on device \d{1,3}: \w{1,40} failed")
_KV_FAILED = re.compile(r"failed to allocate buffer for kv cache|failed to allocate KV buffers?\b")
# (a KV-cache update's graph, `llama_kv_cache_update_impl: failed to allocate compute buffers`, is at runtime)
_COMPUTE_FAILED = re.compile(r"^(?![^\n]{0,80}kv_cache_update)[^\n]{0,200}?failed to allocate compute buffers?\b")
_RETRIED = re.compile(r"compute buffer allocation failed, retrying")
# An accelerator's free memory before loading: libllama's `using device CUDA0 (…) - 23755 MiB free` (2025; its PCI
# id in a second pair of brackets since, `using device CUDA0 (NVIDIA …) (0000:01:00.0) - 7044 MiB free`), and the
# device list (`--list-devices`' `  CUDA0: NVIDIA … (24123 MiB, 23755 MiB free)`, the 2026 server's `device_info:`
# block `  - CUDA0   : NVIDIA … (24123 MiB, 23755 MiB free)`); a CPU's is RAM
_DEVICE_FREE = re.compile(r"using device (?!CPU)\w{1,20}(?: \([^()\n]{0,160}\)){1,2} - (\d{1,9}) MiB free"
                          r"|^[\s>*-]{0,16}(?!CPU\b)\w{1,20} {0,12}: [^\n]{1,160}? \(\d{1,9} MiB, (\d{1,9}) MiB free\)")
_DEFER = re.compile(r"no slot is available|defer task")
_IDLE = re.compile(r"all slots are idle|slot is processing task|processing task")


class LlamaCppParser(StreamParser):
    """One llama-server (or Ollama) log stream."""

    server = Server.LLAMACPP
    SIGNATURES = LLAMACPP_SIGNATURES
    STATS_WORD = " t/s"
    STATS_WORD2 = "tokens per second"
    # model loading: libllama's loader lines (any era) precede serving
    STARTING = re.compile(r"loading model|llama_model_loader: loaded meta data|starting llama server|build: \d+"
                          r"|^(?:llm_)?load_tensors: |^llama_model_load: ")
    READY = re.compile(r"server is listening|HTTP server listening|: listening on http|all slots are idle"
                       r"|llama runner started"
                       r"|model loaded")
    HOT = hot("allocate", "will fit in available VRAM", "insufficient memory", "more system memory", "send_error",
              "Context size",
              "server busy", "pending requests", "llama runner", "GGML_ASSERT", "loading model", "load model",
              "Segmentation fault", "core dumped", "deadline", "should_stop", "n_ctx", "n_seq_max", "n_slots",
              "MiB (", "KV self size", "no slot is available", "defer task", "slots are idle", "processing task",
              "server is listening", "HTTP server listening", "listening on http", "model loaded", "loaded meta data",
              *server_args.HOT_WORDS, "--ctx-size", "build: ", "load_tensors: ", "llama_model_load: ", "Assertion ",
              "non-SWA KV cache", "kv_size", "model weights", "memory.required.kv", "kv cache device", "main loop",
              "prompt processing", "compute buffer size", "MiB free", "buffer of size", "compute buffer",
              "max context", "total VRAM used",
              "KV buffer size", "compute graph", *koboldcpp.HOT_WORDS, *textgen.HOT_WORDS,
              *gpu.HOT_WORDS, *kernel.HOT_WORDS, *http_access.HOT_WORDS, *families.HOT_WORDS,
              *catalogued.hot_words("llamacpp"),
              *catalogued.hot_words("auto"))

    def __init__(self, source: str = "-", ref_time: float | None = None, tz: tzinfo = timezone.utc) -> None:
        super().__init__(source, ref_time, tz)
        self._deferring = False
        self._failed_size: float | None = None  # the last buffer ggml could not allocate, in bytes
        self._cut_cmd_at: int | None = None  # the line number of a runner command line cut before `--ctx-size`

    def _settle(self, r: Signature, fields: dict[str, FieldValue], block: list[str] | None,
                ts: float | None) -> tuple[Severity, dict[str, FieldValue]] | None:
        """A model that failed to load just after the device ran out of memory failed because of it: libllama's
        `error loading model: unable to allocate … buffer` follows the allocator's own out-of-memory line, and the
        out-of-memory is the incident (a start-up the budget explains), not a second one. A process that then says
        it ends (`main: exiting due to model loading error`, a runner that terminated) is read as that end."""
        if r is LOAD_FAILED and self._reported_lately(EventKind.OOM, ts):
            return None
        return super()._settle(r, fields, block, ts)

    def split(self, text: str) -> Split:
        if text.startswith("{"):
            return self._split_json(text)
        if (m := _SINCE_START.match(text)) is not None:
            level = _LEVELS[m.group(1)]
            return Split(text[m.end():], None, level, "", None)
        if (m := _SLOG.match(text)) is not None:
            level = m.group(2).upper()
            rest = text[m.end():]
            q = _QUOTED_MSG.match(rest)  # Ollama's own message is kept; other quoted values are redacted
            msg = q.group(1) + rest[q.end():] if q is not None else rest
            return Split(msg, self.stamps.rfc3339(m.group(1)), level, "", None)
        if (m := _GIN.match(text)) is not None:
            ts = self.stamps.local(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)),
                            int(m.group(6)), m.group(0))
            return Split(text, ts, "INFO", "gin", None)
        if (m := _GOLOG.match(text)) is not None:
            ts = self.stamps.local(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)),
                            int(m.group(6)), m.group(0))
            return Split(text[m.end():], ts, None, "", None)
        if (m := _TEXT_A.match(text)) is not None:
            level = _LEVELS.get(m.group(1).strip(), m.group(1).strip())
            return Split(text[m.end():], None, level, "", None)
        return Split(text)

    def _split_json(self, text: str) -> Split:
        """Mid-2024 `--log-format json`: the message plus the request fields an access line needs."""
        record = json_object(text)
        if record is None or not isinstance(record.get("msg"), str):
            return Split(text)
        msg: str = record["msg"]
        if msg == "request" and isinstance(record.get("status"), int):
            msg = f'request | status={record["status"]} method="{record.get("method")}" path="{record.get("path")}"'
        elif msg in _JSON_SIZES and isinstance(size := record.get(_JSON_SIZES[msg]), int):
            msg = f"{msg}, {_JSON_SIZES[msg]} = {size}"  # the start-up size, as the text form words it
        stamp = record.get("timestamp")
        ts = float(stamp) if isinstance(stamp, int | float) and not isinstance(stamp, bool) else None
        level = record.get("level")
        return Split(msg, ts, _LEVELS.get(level, level) if isinstance(level, str) else None, "", None)

    def stats_line(self, split: Split, path: str | None, offset: int | None) -> list[Record] | None:
        """A generation or prompt speed: the per-slot progress line or a request's timing summary. llama.cpp
        prints no queue or KV usage there, so the sample carries throughput only."""
        msg = split.msg
        gen = prompt = None
        if (t := _TG.search(msg)) is not None:
            gen = float(t.group(2))
            if t.group(1) is None and (t3 := _TG.search(msg, t.end())) is not None:
                gen = float(t3.group(2))  # the last 3 s rate over the whole-request one
        elif (p := _PROMPT_TPS.search(msg)) is not None:
            prompt = float(p.group(1) or p.group(2))
        elif (g := _GEN_TPS.search(msg)) is not None:
            gen = float(g.group(1))
        else:
            return None
        if quoted_or_request("", msg):
            return None
        return [ServerStats(split.ts, self.source, Server.LLAMACPP, prompt_tps=prompt, gen_tps=gen, path=path,
                            offset=offset)]

    def _ollama_cmd(self, split: Split, ctx: int, parallel: re.Match[str] | None) -> list[Record]:
        """The runner's command line: the cache, and with `--parallel` the slots and each slot's context."""
        return [self.fact(split, name, value) for name, value in server_args.facts(ctx, parallel)]

    def _cut_cmd(self, split: Split, msg: str) -> list[Record]:
        """A runner command line cut before its `--ctx-size`: remembered for one line; the line right after it,
        if it has no prefix of its own, is its rest."""
        cut_at, self._cut_cmd_at = self._cut_cmd_at, None
        if _OLLAMA_CMD_CUT.match(msg) is not None:
            self._cut_cmd_at = self.lines_seen
        elif cut_at == self.lines_seen - 1 and split.level is None and (m := _CTX_SIZE.search(msg)) is not None:
            return self._ollama_cmd(split, int(m.group(1)), server_args.PARALLEL.search(msg, m.end()))
        return []

    def _allocation_facts(self, split: Split, msg: str) -> list[Record]:
        """The device's free memory, and which start-up buffer failed at which size (see _FAILED_SIZE)."""
        if (m := _DEVICE_FREE.search(msg)) is not None:
            return [self.fact(split, "device_free_bytes", size_bytes(m.group(1) or m.group(2), "MiB"))]
        if (m := _FAILED_SIZE.search(msg)) is not None:
            # only while loading: a runtime failure (a KV-cache update's graph) is no start-up figure
            starting = self.phase() is Phase.STARTUP
            self._failed_size = (float(m.group(1)) if m.group(1) else float(size_bytes(m.group(2), "MiB"))
                                 ) if starting else None
            return []
        if _RETRIED.search(msg) is not None:  # newest builds retry the graph without pipeline parallelism
            return [self.fact(split, "compute_buffer_failed_bytes", 0.0)]
        failed = self._failed_size
        if failed is not None and _KV_FAILED.search(msg) is not None:
            self._failed_size = None
            return [self.fact(split, "kv_buffer_failed_bytes", failed)]
        if failed is not None and _COMPUTE_FAILED.search(msg) is not None:
            self._failed_size = None
            return [self.fact(split, "compute_buffer_failed_bytes", failed)]
        return []

    def line_records(self, split: Split, path: str | None, offset: int | None) -> list[Record]:
        msg = split.msg
        out: list[Record] = []
        if _DEFER.search(msg) is not None:
            if not self._deferring:
                self._deferring = True
                out.append(self.event(split, EventKind.PENDING, Severity.INFO, Phase.QUEUE, {}, path, offset))
            return out
        if _IDLE.search(msg) is not None:
            self._deferring = False
        if (load := self.read_load(split, path, offset, _LOAD_READERS, _SPEED_READERS)) is not None:
            return load
        for name, pattern, conv in () if _REQUEST_SLOT.search(msg) else _FACTS:
            m = pattern.search(msg)
            if m is not None:
                if conv is _slot_pool:
                    out.append(self.fact(split, name, conv(*m.groups())))
                    continue
                value = next(g for g in m.groups() if g is not None)
                out.append(self.fact(split, name, conv(value)))
        if (m := server_args.COMMAND.search(msg)) is not None:
            out.extend(self._ollama_cmd(split, int(m.group(1)), server_args.PARALLEL.search(msg)))
        else:
            out.extend(self._cut_cmd(split, msg))
        if (m := _KV_MIB.search(msg)) is not None:  # allocated: an earlier start's failed KV buffer is over
            out += [self.fact(split, "kv_cache_bytes", _mib(m.group(1) or m.group(2))),
                    self.fact(split, "kv_buffer_failed_bytes", 0.0)]
        if (m := _WEIGHTS_MIB.search(msg)) is not None:
            out.append(self.fact(split, "weights_bytes", _mib(m.group(2))))
        if (m := _COMPUTE_MIB.search(msg)) is not None:  # reserved: so is an earlier failed compute buffer
            out += [self.fact(split, "activation_peak_bytes", _mib(m.group(2))),
                    self.fact(split, "compute_buffer_failed_bytes", 0.0)]
        out.extend(self._allocation_facts(split, msg))
        if (m := _OLLAMA_FIT.search(msg)) is not None:
            out += [self.fact(split, "max_num_seqs", float(m.group(1))),
                    self.fact(split, "device_free_bytes", float(m.group(2)))]
        # Ollama's estimate for a CPU-only load (`offload to cpu`, `library=cpu`) sizes RAM, not the GPU's
        if "=\"" in msg and not msg.startswith("offload to cpu") and "library=cpu" not in msg:
            for name, pattern in _OLLAMA_SIZES:
                if (m := pattern.search(msg)) is not None:
                    out.append(self.fact(split, name, size_bytes(m.group(1), m.group(2))))
        return out
