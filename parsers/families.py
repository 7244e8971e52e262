"""Engine-agnostic signature families: the recall layer under every parser's own signatures.

Each engine module lists its own signatures first (precise wording, the numbers its lines carry); the
families come after them in every parser, GenericParser included, so a line still means something when
the stream was not recognised, the excerpt is too short to tell, or a fork or binding reworded the engine's
message. One event per kind per occurrence still holds (`StreamParser.events_for`), so a family never
doubles an engine signature that already matched. The formats: docs/parsers.md.

Families and their guards against the known hard negatives:

- **engine-internal timeouts** (`deadline_exceeded`, `scope` = `engine`, `knob` = the setting that
  governs it, an `agent.records.Knob` value): vLLM's engine iteration, RPC, execute-model and heartbeat
  timeouts, SGLang's scheduler watchdog, Ollama's runner load timeout. Only the line that says the
  timeout *fired* matches; a setting echoed in a config dump (`OLLAMA_LOAD_TIMEOUT:5m0s`) or a shutdown
  `timeout=15s` does not. Death that follows is the engine's own `engine_dead` line.
- **request timeouts** live in http_access.TIMEOUT_SIGNATURES (`scope` = `request`).
- **KV exhaustion**: llama.cpp's forks and bindings: the batch of one that still fails (or a binding's
  `NoKvSlot`) is an `oom` of the KV pool. A retry with a smaller batch is nothing (llama.cpp does not preempt:
  it halves the batch and goes on), and "the request exceeds the available context size" is a request refused
  before any allocation, never an `oom` (parsers/catalogue/llamacpp.yaml). SGLang's "out of memory. Try to
  lower your batch size" and the start-up "free memory less than desired" are `oom`; SGLang's retraction
  stays a preemption (its own signature, matched first).
- **allocation failures** of ggml and FlashInfer buffers, and a guarded catch-all: "out of memory" in an
  error/failure line, unless the line is advice ("If out-of-memory error occurs, consider …").
- **relayed refusals**: Ollama's "server busy … maximum pending requests exceeded" and "no slots available"
  as a client logs them (`queue_full`).
- **engine death** in wordings no parser had (Ollama's newer `llama-server process has terminated`,
  vLLM's API server noticing its engine is gone, V0's engine-dead 500 body as a client relays it).

A bare `TimeoutError` exception line is an engine timeout without a knob, unless it names a network wait
(errno, connection, socket, URL: a model download is not the engine waiting on itself).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agent.records import EventKind, FieldValue, Knob, Phase, Severity
from parsers.signature import Signature, signature, size_bytes

GIB = 1024**3


def _timeout(scope: str, knob: Knob | None = None, on: str = "unknown") -> Callable[[re.Match[str]],
                                                                                   dict[str, FieldValue]]:
    """An engine's own timeout: who gave up (`timeout_by` = the engine), on what (`timeout_on`: its workers'
    RPC, a batch that stopped making progress, a runner that never came up), and the limit when the line
    names it (`timeout_s`; `timeout_seconds` is the older name)."""
    def extract(m: re.Match[str]) -> dict[str, FieldValue]:
        out: dict[str, FieldValue] = {"scope": scope, "timeout_by": "engine", "timeout_on": on}
        if knob is not None:
            out["knob"] = knob.value
        seconds = m.groupdict().get("s")
        ms = m.groupdict().get("ms")
        if seconds:
            out["timeout_seconds"] = int(seconds)
            out["timeout_s"] = float(seconds)
        elif ms:
            out["timeout_seconds"] = out["timeout_s"] = int(ms) / 1000
        return out
    return extract


# Ollama's `timed out waiting for … to start: context canceled`: the request's context ended before the load did,
# the client's timeout (catalogue: ollama), neither the engine's timeout nor its death
CLIENT_LEFT_LOAD = r"to start: context "

ENGINE_TIMEOUT_SIGNATURES: tuple[Signature, ...] = (
    signature(EventKind.DEADLINE_EXCEEDED, r"Engine iteration timed out", Severity.ERROR, Phase.RUNTIME,
              _timeout("engine", Knob.VLLM_ENGINE_ITERATION_TIMEOUT_S, "rpc"), incident=True),
    signature(EventKind.DEADLINE_EXCEEDED, r"RPC call to execute_model timed out", Severity.ERROR, Phase.RUNTIME,
              _timeout("engine", Knob.VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, "rpc"), incident=True),
    # V0's multiprocessing client: every RPC, and the engine's heartbeat, wait VLLM_RPC_TIMEOUT
    signature(EventKind.DEADLINE_EXCEEDED, r"RPC call to \w{1,80} timed out"
              r"|Server didn't reply within (?P<ms>\d{1,9}) ms|No heartbeat received from MQLLMEngine",
              Severity.ERROR, None,
              _timeout("engine", Knob.VLLM_RPC_TIMEOUT, "rpc"), incident=True),
    signature(EventKind.DEADLINE_EXCEEDED, r"[Ww]atchdog timeout \((?:self\.)?watchdog_timeout=(?P<s>\d{1,9})",
              Severity.ERROR, Phase.RUNTIME, _timeout("engine", Knob.WATCHDOG_TIMEOUT, "generation"), incident=True),
    signature(EventKind.DEADLINE_EXCEEDED, r"timed out waiting for llama(?: runner|-server) to start", Severity.ERROR,
              Phase.STARTUP, _timeout("engine", Knob.OLLAMA_LOAD_TIMEOUT, "connect"), incident=True,
              unless=CLIENT_LEFT_LOAD),
    BARE_TIMEOUT := signature(
        # (a traceback pasted indented, or with a terminal's padding after it, as a report's "Stack trace:" shows it)
        EventKind.DEADLINE_EXCEEDED, r"^\s{0,8}(?:[\w.]{0,80}\.)?TimeoutError(?::|\s{0,200}$)", Severity.ERROR, None,
        _timeout("engine"), incident=True,
        # a network wait (a model download, a remote store) is not the engine waiting on itself
        unless=r"(?i:errno|connect|socket|https?pool|read timed out|huggingface|\burl\b)"),
)

# Who raised a bare `TimeoutError`, read from the traceback's frames: an engine's package, or a client library
# that raises the builtin for its own deadline (aiohttp's `ClientTimeout(total=…)` leaves TimerContext with
# `raise asyncio.TimeoutError`, the builtin since Python 3.11; anyio's `fail_after` under httpx and the SDKs)
_FRAME = re.compile(r'^\s*File "(?P<path>[^"\n]{1,400})", line \d+, in ')
_ENGINE_PACKAGE = re.compile(r"[/\\](?:vllm|sglang|text_generation_server|tensorrt_llm|lmdeploy)[/\\]")
# (and an application's own `asyncio.wait_for` / `asyncio.timeout` around its call, asyncio/timeouts.py: with no
# engine frame in the traceback, the application, the engine's client, gave up)
_CLIENT_PACKAGE = re.compile(r"[/\\](?:aiohttp|httpx|httpcore|openai|anthropic|requests|urllib3|litellm|langchain\w*"
                             r"|llama_index|ollama)[/\\]|[/\\]asyncio[/\\]timeouts\.py$")


def timeout_waiter(lines: list[str]) -> str:
    """Who waited for the bare `TimeoutError` a traceback ends in: `client` when its frames run through a client
    library or asyncio's deadline and through no engine's package, else `engine` (a frame of the engine anywhere
    means the engine was waiting, whatever library it waited with; a traceback without frames is taken as the
    engine's, as before)."""
    paths = [m.group("path") for line in lines if (m := _FRAME.match(line)) is not None]
    if any(_ENGINE_PACKAGE.search(p) for p in paths) or not any(_CLIENT_PACKAGE.search(p) for p in paths):
        return "engine"
    return "client"


CLIENT_TIMEOUT: dict[str, FieldValue] = {"scope": "request", "timeout_by": "client", "timeout_on": "unknown"}


def _kv_pool(m: re.Match[str]) -> dict[str, FieldValue]:
    tokens = m.groupdict().get("tokens")
    return {"pool": "kv", **({"requested_tokens": int(tokens)} if tokens else {})}


def _free_memory(m: re.Match[str]) -> dict[str, FieldValue]:
    return {"free_bytes": round(float(m.group("free")) * GIB), "total_bytes": round(float(m.group("total")) * GIB),
            "gpu_memory_utilization": float(m.group("util")), "requested_bytes": round(float(m.group("req")) * GIB)}


def _flashinfer(m: re.Match[str]) -> dict[str, FieldValue]:
    return {"requested_bytes": int(m.group(1))}


def _ggml(m: re.Match[str]) -> dict[str, FieldValue]:
    return {"requested_bytes": size_bytes(m.group(1), "MiB")} if m.group(1) else {}


KV_SIGNATURES: tuple[Signature, ...] = (
    # the last retry (a batch of one) failing, or a binding's error code for it: the KV cells ran out and the
    # requests in the batch fail (llama.cpp never preempts: "failed to find free space in the KV cache, retrying
    # with smaller batch size" and "failed to find a memory slot for batch of size N" are the retries on the way,
    # a dozen lines per failure, and no event; the failed requests are `request_failed`, parsers/llamacpp.py)
    signature(EventKind.OOM, r"failed to decode the batch, n_batch = 1\b|llama_decode failed: '?NoKvSlot"
              # llama-server's wordings of the failed decode; its per-request `send_error: … error: Context size …`
              # lines are the requests it failed (request_failed, parsers/llamacpp.py)
              r"|could not find a kv cache slot|(?<!error: )Context size has been exceeded",
              Severity.ERROR, Phase.RUNTIME, _kv_pool, incident=True),
)

def _node_memory(m: re.Match[str]) -> dict[str, FieldValue]:
    return {"pool": "kv", "free_bytes": round(float(m.group("free")) * GIB),
            "total_bytes": round(float(m.group("total")) * GIB), "requested_bytes": round(float(m.group("req")) * GIB)}


OOM_SIGNATURES: tuple[Signature, ...] = (
    # vLLM's CPU backend (0.2x on): the KV space asked for (VLLM_CPU_KVCACHE_SPACE) is more than the node has
    signature(EventKind.OOM, r"Available memory on node \d{1,4} \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on kv cache "
              r"allocation is less than requested memory for kv \((?P<req>[\d.]+) GiB\)",
              Severity.CRITICAL, Phase.STARTUP, _node_memory, incident=True),
    signature(EventKind.OOM, r"Free memory on device[^\n(]{0,40}\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) "
              r"on startup is less than desired GPU memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)",
              Severity.CRITICAL, Phase.STARTUP, _free_memory, incident=True),
    signature(EventKind.OOM, r"(?:Prefill|Decode) out of memory\. (?:Try to lower your batch size|This should ne)"
              r"(?:[^\n]{0,40}?Try to allocate (?P<tokens>\d{1,12}) tokens)?", Severity.ERROR, Phase.RUNTIME, _kv_pool,
              incident=True),
    # libllama's context and cache are allocated once, when the model loads
    signature(EventKind.OOM, r"failed to allocate (?:compute|KV) buffers?|failed to allocate buffer for kv cache",
              Severity.ERROR, Phase.STARTUP, incident=True),
    # not Kubernetes' scheduler ("0/3 nodes are available: 3 Insufficient memory", a pod that "cannot be scheduled
    # because of insufficient memory"): a node's RAM request, no allocation that failed
    # and a loader that refuses a model its estimate does not fit (Ollama's "model requires more system memory",
    # LM Studio's guardrail: "Model loading aborted due to insufficient system resources")
    signature(EventKind.OOM, r"unable to allocate \w{1,20} buffer|insufficient memory"
              r"|model requires more system memory|loading aborted due to insufficient system resources",
              Severity.ERROR, incident=True,
              unless=r"(?i:cannot be scheduled|nodes are available|FailedScheduling)"),
    signature(EventKind.OOM, r"Failed to allocate memory for \w{1,80} with size (\d{1,15})", Severity.ERROR,
              extract=_flashinfer, incident=True),
    signature(EventKind.OOM, r"alloc_buffer: allocating ([\d.]+) MiB on device \d+: \w{1,40} failed", Severity.ERROR,
              extract=_ggml, incident=True),
    # catch-all: an error or failure line that says out of memory; advice and warnings about it are not one, nor
    # ggml's pinned host buffer (ggml-cuda.cu ggml_cuda_host_malloc warns "failed to allocate N MiB of pinned memory:
    # out of memory" and returns nothing, and its caller takes ordinary host memory instead)
    signature(EventKind.OOM, r"(?:[Ee]rror|ERROR|[Ff]ailed|FAILED|[Ee]xception|panic)\b"
              r"[^\n]{0,160}?\b[Oo]ut of memory\b",
              Severity.ERROR, incident=True,
              unless=r"(?i:\bif\b[^\n]{0,80}out.of.memory|\bconsider\b|\bto avoid\b|\bprevent\b"
                     r"|\bMiB of pinned memory: )"),
)

# Ollama's refusals as its clients relay them (the server's own GIN line is the 503 in http_access)
QUEUE_SIGNATURES: tuple[Signature, ...] = (
    signature(EventKind.QUEUE_FULL, r"server busy, please try again|maximum pending requests exceeded",
              Severity.WARNING, Phase.ADMISSION, lambda m: {"reason": "max_queue", "status": 503}),
    signature(EventKind.QUEUE_FULL, r"llm busy - no slots available|no slots available after \d{1,6} retries",
              Severity.WARNING, Phase.ADMISSION, lambda m: {"reason": "no_slots"}),
    # SGLang's queue deadlines (`--queued-timeout` / SGLANG_QUEUED_TIMEOUT_MS, and the older waiting timeout),
    # also as the 503 body a client or proxy logs: a request that waited out its queue time produced no token
    signature(EventKind.QUEUE_FULL, r"Request (?:queue|waiting) timeout reached", Severity.WARNING, Phase.QUEUE,
              lambda m: {"reason": "queue_timeout", "status": 503}),
)

ENGINE_DEATH_SIGNATURES: tuple[Signature, ...] = (
    signature(EventKind.ENGINE_DEAD, r"llama-server process (?:has terminated|no longer running)"
              r"|(?:is already dead|has failed), terminating "
              r"server process|Engine loop has died", Severity.CRITICAL, incident=True),
    # vLLM V0's engine-dead errors (engine/multiprocessing/__init__.py ENGINE_DEAD_ERROR, 0.6 on;
    # engine/async_llm_engine.py AsyncLLMEngine.generate) are the 500 body every later request gets, so a
    # client relays them without the exception's class name or vLLM's prefix
    signature(EventKind.ENGINE_DEAD, r"Engine loop is not running\. Inspect the (?:stacktrace|output) to find"
              r"|Background loop has errored already", Severity.CRITICAL, incident=True),
)

FAMILY_SIGNATURES: tuple[Signature, ...] = (
    *ENGINE_TIMEOUT_SIGNATURES, *KV_SIGNATURES, *OOM_SIGNATURES, *QUEUE_SIGNATURES, *ENGINE_DEATH_SIGNATURES)

HOT_WORDS = ("TimeoutError", "timed out", "didn't reply", "No heartbeat", "atchdog timeout", "llama runner to start",
             "n_batch = 1", "NoKvSlot", "kv cache slot", "Context size has been exceeded", "Free memory on device",
             "on kv cache allocation",
             "out of memory", "Out of memory", "allocate",
             "insufficient memory", "more system memory", "insufficient system resources", "server busy",
             "pending requests", "no slots available",
             "timeout reached",
             "terminated", "no longer running", "terminating server", "Engine loop has died",
             "Engine loop is not running", "Background loop has errored")
