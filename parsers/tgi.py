"""Hugging Face TGI (v1 → v3): overload refusals, shard crashes, start-up memory failures, capacity.

Formats: parsers/catalogue/tgi.yaml (the logging calls, read in the source). Two Rust processes share stdout: the
launcher (`text_generation_launcher`, which also re-emits the Python shards' log records and their stderr) and the
router (`text_generation_router`). The prefix is an RFC 3339 UTC time, a level, an optional span and the target;
`--json-output` prints one JSON object per record instead. TGI has no periodic queue/KV line and no access log:
`Model is overloaded` (HTTP 429, the `--max-concurrent-requests` semaphore) is its admission refusal; `Request failed
during generation: …` carries the shard's error (often a CUDA OOM), classified by its inner text. The span holds the
request's sampling parameters, so it never reaches a record.
"""

from __future__ import annotations

import re

from agent.records import EventKind, Phase, Record, Server, Severity
from parsers import catalogued, families, gpu, http_access, kernel
from parsers.base import StreamParser
from parsers.prefix import OUTER, Split
from parsers.signature import ADVICE, Signature, hot, json_object, signature

TGI_SIGNATURES: tuple[Signature, ...] = (
    signature(EventKind.OOM, r"Not enough memory to handle (?:(?P<prefill>\d+) prefill tokens|`max_total_tokens)"
         r"|Not enough VRAM to run the model", Severity.CRITICAL, Phase.STARTUP,
         lambda m: {"prefill_tokens": int(m.group("prefill"))} if m.group("prefill") else {}),
    *gpu.GPU_SIGNATURES,
    *kernel.KERNEL_SIGNATURES,
    signature(EventKind.QUEUE_FULL, r"Model is overloaded", Severity.WARNING, Phase.ADMISSION,
         lambda m: {"reason": "max_concurrent_requests", "status": 429}, unless=ADVICE),
    signature(EventKind.ENGINE_DEAD, r"Shard \d+ failed to start|Unable to warmup (?:the Python model shards|model)"
         r"|Method Warmup encountered an error|Error: (?:ShardCannotStart|WebserverCannotStart|DownloadError)\b",
         Severity.CRITICAL, Phase.STARTUP, incident=True),
    # the launcher's exit (`Error: <LauncherError>`), and a router whose shard socket is gone
    signature(EventKind.ENGINE_DEAD, r"Shard \d+ crashed|Webserver Crashed|Shard process was signaled to shutdown"
         r"|Error: (?:ShardFailed|ShardDisconnected|WebserverFailed)\b"
         r"|Server error: (?:error trying to connect|transport error)",
         Severity.CRITICAL, incident=True),
    *catalogued.signatures("auto"),  # clients and proxies: more precise than the access-line forms
    *http_access.HTTP_SIGNATURES,
    *http_access.TIMEOUT_SIGNATURES,
    *catalogued.signatures("tgi"),
    *families.FAMILY_SIGNATURES,
)

_PREFIX = re.compile(
    r"((\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z) {1,2}(TRACE|DEBUG|INFO|WARN|ERROR) "
)
_TARGET = re.compile(r"(text_generation_\w{1,40}(?:::\w{1,40}){0,6}): (?:[\w/.-]{1,200}\.rs:\d{1,6}: )?")
_FACTS = (
    ("kv_cache_tokens", re.compile(r"(?:Setting max batch total tokens to|Inferred max batch total tokens:) (\d+)")),
    ("gpu_blocks", re.compile(r"KV-cache blocks: (\d+)")),
    ("block_size", re.compile(r"KV-cache blocks: \d+, size: (\d+)")),
    ("max_concurrent_requests", re.compile(r"\bmax_concurrent_requests: (\d+)")),
    ("max_num_seqs", re.compile(r"\bmax_batch_size: Some\((\d+)\)")),
    ("max_model_len", re.compile(r"\bmax_total_tokens: (?:Some\()?(\d+)")),
    ("max_batch_prefill_tokens", re.compile(r"\bmax_batch_prefill_tokens: (?:Some\()?(\d+)")),
    # the router's `warmup` span (router/client: `#[instrument] warmup(max_input_length, max_prefill_tokens,
    # max_total_tokens, …)`) prints the same limits on every record logged inside it, a failed warmup's among them
    ("max_model_len", re.compile(r"\bwarmup\{[^}]{0,200}\bmax_total_tokens=(\d+)")),
    ("max_batch_prefill_tokens", re.compile(r"\bwarmup\{[^}]{0,200}\bmax_prefill_tokens=(\d+)")),
    ("gpu_memory_utilization", re.compile(r"\bcuda_memory_fraction: ([\d.]+)")),
    ("tensor_parallel_size", re.compile(r"\bnum_shard: Some\((\d+)\)")),
    # the launcher's own default for a model whose context is longer (launcher/src/main.rs, 2.1 on): the
    # `--max-total-tokens` it will use, far under what the model supports
    ("max_model_len", re.compile(r"\bbut tgi will now set its default to (\d+) instead\b")),
)
_MODEL = re.compile(r"\bmodel_id: \"([^\"]{1,300})\"")


class TgiParser(StreamParser):
    """One TGI container's output: launcher, router and re-emitted shard records."""

    server = Server.TGI
    OUTER_STAMP = False  # a TGI line *starts* with its RFC 3339 time
    SIGNATURES = TGI_SIGNATURES
    STARTING = re.compile(r"Args \{|Starting download process|Starting shard")
    READY = re.compile(r"\bConnected\b|Starting Webserver")
    HOT = hot("Not enough", "overloaded", "Shard", "Webserver", "warmup", "max batch total tokens", "KV-cache blocks",
              "max_concurrent_requests", "max_batch_size", "max_total_tokens", "max_batch_prefill_tokens",
              "cuda_memory_fraction", "num_shard", "model_id", "Args {", "Starting download", "Starting shard",
              "Connected", "Error: ", "Server error", "Method Warmup",
              "failed during generation", "set its default to", *gpu.HOT_WORDS, *kernel.HOT_WORDS,
              *http_access.HOT_WORDS, *families.HOT_WORDS,
              *catalogued.hot_words("tgi"),
              *catalogued.hot_words("auto"))

    def split(self, text: str) -> Split:
        if text.startswith("{"):
            return self._split_json(text)
        m = _PREFIX.match(text)
        if m is None:
            if text[:1].isdigit() and (o := OUTER.match(text)) is not None and (o.group(1) or o.group(2)):
                # a runtime's or journald's time before a line (TGI's own, or a client's copy of the router's
                # error body under `kubectl logs --timestamps`): the line after it, at that time when it has none
                inner = self.split(text[o.end():])
                if inner.ts is None:
                    inner.ts = self.stamps.rfc3339(o.group(1)) if o.group(1) else float(o.group(2))
                return inner
            return Split(text)
        fraction = float("0." + m.group(8)) if m.group(8) else 0.0
        ts = self.stamps.local(int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(6)),
                        int(m.group(7)) + fraction, m.group(1), self.stamps.UTC)
        rest = text[m.end():]
        t = _TARGET.search(rest)
        target, msg = (t.group(1), rest[t.end():]) if t is not None else ("", rest)
        level = "ERROR" if m.group(9) == "ERROR" else m.group(9)
        return Split(msg, ts, level, target.split("::", 1)[0], m.group(1) + target)

    def _split_json(self, text: str) -> Split:
        record = json_object(text)
        if record is None or not ("fields" in record or "message" in record):
            return Split(text)  # not a tracing record: the router's error body (`{"error": …, "error_type": …}`)
        # tracing's JSON puts the message under `fields`; with flattened events (TGI v3) it is top-level
        fields = record.get("fields")
        msg = fields.get("message") if isinstance(fields, dict) else record.get("message")
        level = record.get("level")
        target = record.get("target")
        stamp = record.get("timestamp")
        ts = self.stamps.rfc3339(stamp) if isinstance(stamp, str) else None
        return Split(msg if isinstance(msg, str) else "", ts, level if isinstance(level, str) else None,
                     target if isinstance(target, str) else "", stamp if isinstance(stamp, str) else None)

    def line_records(self, split: Split, path: str | None, offset: int | None) -> list[Record]:
        out: list[Record] = []
        for name, pattern in _FACTS:
            m = pattern.search(split.msg)
            if m is not None:
                out.append(self.fact(split, name, float(m.group(1))))
        m = _MODEL.search(split.msg)
        if m is not None:
            out.append(self.fact(split, "model", m.group(1)))
        return out
