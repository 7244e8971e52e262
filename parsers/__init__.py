"""Pure log parsers, one module per inference server: text in, records out, no I/O and no clock.

The daemon and `scan` use three things from here:

- `make_parser(server, source, ref_time, tz)` → a `Parser` for one stream; `Server.AUTO` gives an
  `AutoParser` that detects the server from the first lines and then behaves as that server's parser.
- `Parser.feed(text, ts, path, offset) -> list[Record]` per line (without its newline; `ts` is the
  envelope's time when there is one), and `Parser.flush() -> list[Record]` at end of stream or after a
  quiet spell (an open traceback is held until its end is seen).
- `Parser.feed_batch(texts, offsets, path, first_line)`: the same for a run of one plain stream's decoded
  lines, each at its byte offset (how `scan` and the daemon read plain files: the commonest lines are settled
  without per-line calls); with `first_line`, load samples carry their line number.
- `Parser.set_reference_time(now)`: the time yearless stamps (vLLM, syslog) are placed near; a daemon
  moves it as its clock advances (the parsers never read a clock).
- `detect(lines) -> Server | None`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import timezone, tzinfo
from typing import Protocol

from agent.records import Record, Server
from parsers.base import MAX_LINE_CHARS, StreamParser
from parsers.paste import STARTS as PASTE_STARTS
from parsers.paste import unpaste
from parsers.prefix import COMPOSE, OUTER, earliest


class Parser(Protocol):
    """A stateful parser of one log stream."""

    server: Server

    @property
    def parse_errors(self) -> int:
        """Lines skipped because a number in them could not be one (the daemon's parse-error metric)."""
        ...

    def feed(self, text: str, ts: float | None = None, path: str | None = None,
             offset: int | None = None) -> list[Record]: ...

    def feed_batch(self, texts: Sequence[str], offsets: Sequence[int], path: str | None,
                   first_line: int | None = None) -> list[Record]:
        """`feed` for a run of one plain stream's decoded lines, each at its byte offset: the same records."""
        ...

    def flush(self) -> list[Record]: ...

    def held_offsets(self) -> dict[str, int]:
        """Path → offset of the earliest line still held (an open traceback, undetected first lines):
        a cursor persisted past it would lose that occurrence in a crash."""
        ...

    def set_reference_time(self, ref_time: float) -> None: ...


def parser_class(server: Server) -> type[StreamParser]:
    """The parser class of a server (`Server.AUTO`: the generic one), its module imported on first use: each
    engine's module compiles its signatures and its pre-filter at import, and a stream needs one engine's, so
    importing them all cost every `scan` of one engine's log several times the start-up it needs."""
    if server is Server.VLLM:
        from parsers.vllm import VllmParser
        return VllmParser
    if server is Server.SGLANG:
        from parsers.sglang import SglangParser
        return SglangParser
    if server is Server.TGI:
        from parsers.tgi import TgiParser
        return TgiParser
    if server is Server.LLAMACPP:
        from parsers.llamacpp import LlamaCppParser
        return LlamaCppParser
    if server is Server.KERNEL:
        from parsers.kernel import KernelParser
        return KernelParser
    if server in (Server.TENSORRT_LLM, Server.VLLM_RS, Server.LLAMA_BOX):
        from parsers.generic import LlamaBoxParser, TensorRtLlmParser, VllmRsParser
        return {Server.TENSORRT_LLM: TensorRtLlmParser, Server.VLLM_RS: VllmRsParser,
                Server.LLAMA_BOX: LlamaBoxParser}[server]
    from parsers.generic import GenericParser
    return GenericParser


class _Registry(Mapping[Server, type[StreamParser]]):
    """Server → its parser class, for every server with a parser of its own (not `auto`), each looked up
    through `parser_class`, so only the engines asked for are imported."""

    _SERVERS = (Server.VLLM, Server.SGLANG, Server.TGI, Server.LLAMACPP, Server.KERNEL, Server.TENSORRT_LLM,
                Server.VLLM_RS, Server.LLAMA_BOX)

    def __getitem__(self, server: Server) -> type[StreamParser]:
        if server not in self._SERVERS:
            raise KeyError(server)
        return parser_class(server)

    def __iter__(self) -> Iterator[Server]:
        return iter(self._SERVERS)

    def __len__(self) -> int:
        return len(self._SERVERS)


REGISTRY: Mapping[Server, type[StreamParser]] = _Registry()

# Evidence per server: (pattern, weight). Weight 3 = unmistakable on its own; a negative weight is evidence
# against (another engine that shares the prefix).
_SIGNS: dict[Server, tuple[tuple[re.Pattern[str], int], ...]] = {
    server: tuple((re.compile(p), w) for p, w in signs)
    for server, signs in {
        Server.VLLM: (
            (r"\((?:APIServer|EngineCore\w*|VllmWorker\w*|Worker_\w+|Worker|RayWorkerWrapper)(?: rank=\d+| TP\d+)?"
             r" pid=\d+", 3),
            (r"vLLM API server version|vLLM server version|Initializing an? (?:V\d )?LLM engine|vllm\.\w"
             r"|[/\\]vllm[/\\]|\bcumem_allocator\.cpp:\d", 3),  # the last: its sleep-mode allocator's own printf
            # the logger prefix, wherever a runtime or a Ray/process tag put it on the line
            (r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w.]+\.py:\d+\] ", 2),
            (r"Avg prompt throughput: [\d.]+ tokens/s", 3),
            # messages only vLLM prints: a short excerpt (a comment, a crash tail) has no prefix at all
            (r"# (?:GPU|gpu|cuda|CUDA) blocks: \d+|Maximum concurrency for [\d,]+ tokens per request"
             r"|is preempted (?:by|in) PreemptionMode|No available memory for the cache blocks"
             r"|max seq len \(\d+\) is larger than|EngineCore"
             r"|Memory profiling results|Loading model weights took|EngineDeadError"
             r"|Available KV cache memory: -?[\d.]+ GiB|GPU KV cache size: [\d,]+ tokens"
             r"|Model loading took [\d.]+ GiB memory|Aborted due to the lack of CPU swap space"
             # its process names in the start-up and death lines a crash tail keeps
             r"|\bWorkerProc (?:hit an exception|failed)|RPCServer process died|Engine process failed to start"
             r"|Engine core initialization failed|\bMQLLMEngine\b|\bAsyncLLMEngine\b", 3),
        ),
        Server.SGLANG: (
            (r"server_args=ServerArgs\(|sglang", 3),
            (r"(?:Prefill|Decode) batch[.,] #|^new fill batch\. #seq: ", 3),  # 0.1's router: the latter
            (r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: (?:TP|DP|PP|EP)\d+)*\] ", 1),
            (r"--mem-fraction-static|#retracted_reqs|KV cache pool is full|max_total_num_tokens="
             r"|Decode out of memory happened|[Ww]atchdog timeout \(self\.watchdog_timeout=\d"
             r"|Exception in (?:ModelTpServer|ControllerSingle|ControllerMulti):"
             r"|Initialization failed\. (?:warmup error|Please see the error messages above)"
             r"|Rank \d+ scheduler is dead|Child process unexpectedly failed|Received sigquit from a child process"
             r"|SIGQUIT received\. signum=|crashed with exit code -?\d+\. Triggering SIGQUIT"
             r"|\b(?:Scheduler|TokenizerManager|DetokenizerManager|TpModelWorkerClient) hit an exception"
             r"|Rank \d+ scheduler died during initialization|timed out after [\d.]+s in KVPoll\.", 3),
            # MLC LLM's Python engine stamps its lines `[YYYY-MM-DD HH:MM:SS] INFO file.py:N:` too: its start-up
            # wordings (parsers/mlc.py) count against SGLang, so the stream stays with the generic path that reads them
            (r"Estimated KVCacheConfig|Estimated total single GPU memory usage|The actual engine mode is \"", -2),
            # so does LMDeploy's metrics logger (`[YYYY-MM-DD HH:MM:SS DP0] Avg thr (in/out): …`, parsers/lmdeploy.py)
            (r"Engine \(running/waiting\): \d|API server \(completed/routed/waiting\)", -2),
        ),
        Server.TGI: (
            (r"text_generation_(?:launcher|router|server|client)|text-generation-(?:launcher|router|server)", 3),
            (r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z +(?:INFO|WARN|ERROR|DEBUG) ", 1),
            (r"Not enough memory to handle \d+ prefill tokens|--max-batch-prefill-tokens"
             r"|Error: (?:Shard|Webserver)[A-Z]\w+|Model is overloaded|shard-manager"
             r"|Setting max batch total tokens to \d+|Inferred max batch total tokens"
             r"|Default `max_batch_prefill_tokens` to|Shard complete standard error output"
             r"|Shard \d+ (?:crashed|failed to start)|Webserver Crashed|Shard status channel disconnected",
             3),
            # the launcher's `info!("{:?}", args)` (launcher/src/main.rs main): its Args struct opens with these two
            # fields in every release, so the dump is TGI's even when a paste lost the `Args` before the brace
            (r"\{ model_id: \"[^\"]{0,300}\", revision: (?:None|Some)", 3),
            # the same `tracing` prefix from vllm.rs, another Rust engine (parsers/vllm_rs.py): its words count
            # against TGI, so its stream stays with the generic path that reads it
            (r"\bvllm_rs::|\bKVCacheSwap\b|\bGPU Kvcache: ", -2),
            # and mistral.rs's (parsers/mistralrs.py), read by the generic path
            (r"\bmistralrs_\w{1,40}::", -2),
        ),
        Server.LLAMACPP: (
            (r"llama_model_loader|llama_context:|llama_new_context_with_model|llm_load_\w+|ggml_\w+|\[GIN\]", 3),
            (r"^(?:\d+\.\d\d\.\d{3}\.\d{3} [IWED] )?(?:srv  |slot |que  |res  )\s*\w{1,40}: ", 3),
            (r"level=\w+? ?source=\w+\.go:\d+", 3),  # Ollama's slog pairs (a paste may lose their spaces)
            (r"GGML_ASSERT|load_tensors:|print_info:|exiting due to model loading error|llama runner|llama_kv_cache"
             r"|ggml-cuda\.cu:\d|llama_model_load|\bollama\b|model runner has unexpectedly stopped"
             r"|an error was encountered while running the model", 3),
            (r"^(?:INFO|WARN|ERR|VERB) \[ {0,24}\w+\] ", 3),  # mid-2024 text mode
            # server timing/slot lines of any build or fork, whatever wraps them (`[pid] `, a compose prefix)
            (r"\b(?:print_timings?|update_slots|launch_slot_|log_server_r)\b|prompt eval time +=", 3),
            (r"\bmain: failed to initialize router models\b", 3),  # llama-server's router mode
        ),
        Server.KERNEL: ((r"NVRM: ", 2), (r"kernel: \[ *\d+\.\d+\]", 1)),
        # engines without a parser of their own, named by their own tags and statements (parsers/catalogue)
        Server.TENSORRT_LLM: ((r"\[TensorRT-LLM\]\[|\[TRT-LLM\]|\btensorrt_llm\b|\btrtllm-serve\b"
                               r"|\bin paged KV cache\b|KV cache primary pool|Max KV cache blocks per sequence"
                               r"|Failed to initialize executor on rank|Executor creation failed due to insufficient"
                               r"|\bkv_cache_free_gpu_mem_fraction\b|\bNumber of tokens per block: \d+\."
                               r"|\bTRTGptModel max\w+: |\{\"cpuMemUsage\":\d+,\"gpuMemUsage\":"
                               r"|\bmaxTokensInPagedKvCache must be large enough", 3),),
        Server.VLLM_RS: ((r"\bvllm_rs::|\bKVCacheSwap\b|\bGPU Kvcache: |KV cached blocks swapped (?:out to CPU|in GPU)"
                          r"|Trying to swap out preempt Seq", 3),),
        Server.LLAMA_BOX: ((r"\bllama-box\b|batching, waiting previous batch finished", 3),),
    }.items()
}
DETECT_LINES = 200  # how many lines `AutoParser` looks at before settling on the best guess


def _evidence(line: str) -> tuple[str, ...]:
    """What signatures are matched against: the line, and the line without a `docker compose logs` service
    prefix or a runtime time stamp, so the anchored signatures still see the server's own prefix (TGI's
    own prefix *is* such a stamp, hence both)."""
    line = line[:4096]
    if line[:1] in PASTE_STARTS and (pasted := unpaste(line)) is not None:
        return tuple(e for inner in pasted[0] for e in _evidence(inner))  # quoted, bulleted, shipped as JSON
    bare = line
    if (m := COMPOSE.match(bare)) is not None:
        bare = bare[m.end():]
    if bare[:1].isdigit() or bare[:1] == "[":
        bare = bare[OUTER.match(bare).end():]  # type: ignore[union-attr]  # everything in OUTER is optional
    return (line,) if bare == line else (line, bare)


def _shows(pattern: re.Pattern[str], evidence: tuple[str, ...]) -> bool:
    return any(pattern.search(text) is not None for text in evidence)


def detect(lines: list[str]) -> Server | None:
    """The server whose signatures these lines show most; None when none shows any."""
    scores = dict.fromkeys(_SIGNS, 0)
    for line in lines:
        evidence = _evidence(line)
        for server, signs in _SIGNS.items():
            for pattern, weight in signs:
                if _shows(pattern, evidence):
                    scores[server] += weight
    best = max(scores, key=lambda s: scores[s])
    return best if scores[best] > 0 else None


class AutoParser:
    """Holds the first lines until the server is recognised (evidence ≥ 6, or `DETECT_LINES` lines),
    then replays them through that server's parser. Unrecognised streams get `GenericParser` (CUDA,
    NCCL, Xid, HTTP status and deadline lines only)."""

    def __init__(self, source: str = "-", ref_time: float | None = None, tz: tzinfo = timezone.utc) -> None:
        self.source = source
        self.ref_time = ref_time
        self.tz = tz
        self.server = Server.AUTO
        self._inner: StreamParser | None = None
        self._held: list[tuple[str, float | None, str | None, int | None]] = []
        self._score = 0

    def feed(self, text: str, ts: float | None = None, path: str | None = None,
             offset: int | None = None) -> list[Record]:
        if self._inner is not None:
            return self._inner.feed(text, ts, path, offset)
        text = text[:MAX_LINE_CHARS]  # as the parser will cut it: 200 held lines of a NUL hole are 200 MiB
        self._held.append((text, ts, path, offset))
        evidence = _evidence(text)
        for signs in _SIGNS.values():
            for pattern, weight in signs:
                if _shows(pattern, evidence):
                    self._score += weight
        if self._score >= 6 or len(self._held) >= DETECT_LINES:
            return self._settle()
        return []

    def feed_batch(self, texts: Sequence[str], offsets: Sequence[int], path: str | None,
                   first_line: int | None = None) -> list[Record]:
        out: list[Record] = []
        i = 0
        while self._inner is None and i < len(texts):  # line by line until settled, then the server's batch
            out += self.feed(texts[i], None, path, offsets[i])
            i += 1
        if self._inner is not None and i < len(texts):
            out += self._inner.feed_batch(texts[i:] if i else texts, offsets[i:] if i else offsets, path,
                                          None if first_line is None else first_line + i)
        return out

    @property
    def parse_errors(self) -> int:
        return self._inner.parse_errors if self._inner is not None else 0

    @property
    def inner(self) -> StreamParser | None:
        """The server's parser once settled (a caller feeding many lines may then call it directly)."""
        return self._inner

    def set_reference_time(self, ref_time: float) -> None:
        self.ref_time = ref_time
        if self._inner is not None:
            self._inner.set_reference_time(ref_time)

    def held_offsets(self) -> dict[str, int]:
        if self._inner is not None:
            return self._inner.held_offsets()
        return earliest((path, offset) for _, _, path, offset in self._held)

    def flush(self) -> list[Record]:
        out = self._settle() if self._inner is None else []
        return out + (self._inner.flush() if self._inner is not None else [])

    def _settle(self) -> list[Record]:
        server = detect([held[0] for held in self._held])
        self.server = server or Server.AUTO
        self._inner = parser_class(self.server)(self.source, self.ref_time, self.tz)
        out: list[Record] = []
        for text, ts, path, offset in self._held:
            out.extend(self._inner.feed(text, ts, path, offset))
        self._held.clear()
        return out


def make_parser(server: Server, source: str = "-", ref_time: float | None = None,
                tz: tzinfo = timezone.utc) -> Parser:
    """A parser for one stream of `server` (`Server.AUTO`: detected from the first lines)."""
    if server is Server.AUTO:
        return AutoParser(source, ref_time, tz)
    return REGISTRY[server](source, ref_time, tz)


__all__ = ["DETECT_LINES", "REGISTRY", "AutoParser", "Parser", "detect", "make_parser", "parser_class"]
