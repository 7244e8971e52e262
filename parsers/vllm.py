"""vLLM: start-up capacity facts (0.4 → 0.33, V0 and V1 engines).

The formats are quoted in shared/reference/server-formats.md §1.2. vLLM prints sizes in GiB with two
to four decimals ("GB" in 0.4–0.7 is GiB too: it divides by 2**30), so sizes here are rebuilt as
bytes and carry that rounding. Patterns match anywhere in the line, so every prefix era, process tag
and ANSI colour works without a prefix parser.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator

import regex

from agent.records import CapacityFact

GIB = 1024**3
_ANSI = regex.compile(r"\x1b\[[0-9;]*m")
_NUM = r"(\d[\d,]*(?:\.\d+)?)"


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _gib(text: str) -> int:
    return round(_num(text) * GIB)


# (fact name, pattern, converter of group 1); several facts may come from one line.
_Conv = Callable[[str], float | str]
_PATTERNS: tuple[tuple[str, regex.Pattern[str], _Conv], ...] = tuple(
    (name, regex.compile(pattern), conv)
    for name, pattern, conv in (
        ("kv_cache_tokens", r"\b(?:GPU|CUDA|[XNHT]PU|CPU)(?: \+ host)? KV cache size: " + _NUM + " tokens", _num),
        ("tokens_per_request", r"Maximum concurrency for " + _NUM + r" tokens per request", _num),
        ("max_concurrency", r"Maximum concurrency for [\d,]+ tokens per request: " + _NUM + r"x", _num),
        ("gpu_blocks", r"# (?:GPU|cuda|CUDA|gpu) blocks: " + _NUM, _num),
        ("cpu_blocks", r"# CPU blocks: " + _NUM, _num),
        ("weights_bytes", r"(?:Model loading took|Loading model weights took) " + _NUM + r" ?Gi?B", _gib),
        ("kv_cache_bytes", r"Available KV cache memory: " + _NUM + r" ?GiB", _gib),
        ("kv_cache_bytes", r"the rest of the memory reserved for KV Cache is " + _NUM + r" ?GiB", _gib),
        ("total_gpu_memory_bytes", r"total_gpu_memory \(" + _NUM + r" ?GiB\)", _gib),
        ("gpu_memory_utilization", r"x gpu_memory_utilization \(" + _NUM + r"\)", _num),
        ("requested_memory_bytes", r"x gpu_memory_utilization \([\d.]+\) = " + _NUM + r" ?GiB", _gib),
        ("weights_bytes", r"model weights take " + _NUM + r" ?GiB", _gib),
        ("weights_bytes", r"; weights memory: " + _NUM + r" ?GiB", _gib),
        ("non_torch_bytes", r"non_torch_memory takes " + _NUM + r" ?GiB", _gib),
        ("non_torch_bytes", r"non-torch forward increase memory: " + _NUM + r" ?GiB", _gib),
        ("activation_peak_bytes", r"PyTorch activation peak memory takes " + _NUM + r" ?GiB", _gib),
        ("activation_peak_bytes", r"torch peak memory increase: " + _NUM + r" ?GiB", _gib),
        ("non_kv_cache_bytes", r"Total non KV cache memory: " + _NUM + r" ?GiB", _gib),
        ("cuda_graph_bytes", r"Graph capturing finished in [\d.]+ secs?, took " + _NUM + r" ?GiB", _gib),
        ("block_size", r"Forcing kv cache block size to " + _NUM, _num),
        ("gpu_memory_utilization", r"The current --gpu-memory-utilization=" + _NUM + r" is equivalent", _num),
        ("max_model_len", r"max seq len \(" + _NUM + r"\)", _num),
        ("kv_cache_tokens", r"maximum number of tokens that can be stored in KV cache \(" + _NUM + r"\)", _num),
        ("required_kv_bytes", r"\(" + _NUM + r" GiB KV cache is needed", _gib),
        ("kv_cache_bytes", r"larger than the available KV cache memory \(" + _NUM + r" GiB\)", _gib),
        ("estimated_max_model_len", r"the estimated maximum model length is " + _NUM, _num),
    )
)

# Engine arguments as they appear in the config dump (`key=value, `), `args: Namespace(key=value, …)`
# and `non-default args: {'key': value, …}`. The config dump calls max_model_len `max_seq_len`.
_ARG_NAMES = {
    "max_seq_len": "max_model_len", "max_model_len": "max_model_len", "max_num_seqs": "max_num_seqs",
    "gpu_memory_utilization": "gpu_memory_utilization", "block_size": "block_size",
    "kv_cache_dtype": "kv_cache_dtype", "tensor_parallel_size": "tensor_parallel_size",
    "quantization": "quantization", "model": "model",
}
_ARG_LINE = regex.compile(r"with config: |\bargs: Namespace\(|non-default args: \{")
_ARG = regex.compile(
    r"(?<![\w.])'?(" + "|".join(_ARG_NAMES) + r")'?(?:=|: )('[^']*'|\"[^\"]*\"|[\w.:/-]+)"
)
_NUMERIC_ARGS = {"max_model_len", "max_num_seqs", "gpu_memory_utilization", "block_size", "tensor_parallel_size"}
_PREFILTER = regex.compile(
    r"KV cache|blocks:|took|memory|Maximum concurrency|max seq len|block size|estimated maximum|with config: |args: "
)


def _arg_facts(line: str) -> Iterator[tuple[str, float | str]]:
    for match in _ARG.finditer(line):
        name = _ARG_NAMES[match.group(1)]
        raw = match.group(2)
        if raw.startswith(("'", '"')):
            raw = ast.literal_eval(raw)
        if raw in ("None", "", "null"):
            continue
        if name in _NUMERIC_ARGS:
            try:
                yield name, float(raw)
            except ValueError:
                continue
        else:
            yield name, raw


def startup_facts(lines: Iterable[str], source: str = "-") -> list[CapacityFact]:
    """Every capacity fact in a vLLM log, in line order (later lines restate earlier ones after restarts)."""
    facts: list[CapacityFact] = []
    for raw_line in lines:
        if not _PREFILTER.search(raw_line):
            continue
        line = _ANSI.sub("", raw_line)
        for name, pattern, conv in _PATTERNS:
            match = pattern.search(line)
            if match:
                facts.append(CapacityFact(None, source, name, conv(match.group(1))))
        if _ARG_LINE.search(line):
            facts.extend(CapacityFact(None, source, name, value) for name, value in _arg_facts(line))
    return facts
