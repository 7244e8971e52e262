"""The capacity a llama.cpp-family server's own command line sets, where the log prints it: Ollama's `starting llama
server cmd=…` (server/sched.go scales `--ctx-size` to num_ctx × `--parallel`) and llama-box's start-up `arguments  :
…/llama-box … --parallel 1 --ctx-size 8192` (GPUStack's fork of llama.cpp's server). In both, `--ctx-size` is the
whole cache, as llama.cpp's `n_ctx` is, and each of the `--parallel` slots gets an equal share: a request's limit.
Shared by the llama.cpp parser and the generic one that reads a stream named llama-box's.
"""

from __future__ import annotations

import re

HOT_WORDS = ("starting llama server", "arguments ")
COMMAND = re.compile(r"(?:^starting llama server ?cmd=|(?:^|\] [IWED] )arguments {0,4}: )[^\n]{0,2000}? --ctx-size "
                     r"(\d+)\b")
PARALLEL = re.compile(r" --parallel (\d+)\b")


def facts(ctx: int, parallel: re.Match[str] | None) -> list[tuple[str, float]]:
    """The cache's tokens, and with `--parallel` the slots and each slot's context."""
    out = [("kv_cache_tokens", float(ctx))]
    if parallel is not None and (slots := int(parallel.group(1))) > 0:
        out += [("max_num_seqs", float(slots)), ("max_model_len", float(ctx // slots))]
    return out


def command_line_facts(msg: str) -> list[tuple[str, float]]:
    """The facts of a server's command line; [] for any other line."""
    if (m := COMMAND.search(msg)) is None:
        return []
    return facts(int(m.group(1)), PARALLEL.search(msg))
