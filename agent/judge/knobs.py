"""The knobs by the names each engine's user types: a finding says `--max-running-requests` to an SGLang
operator and `-np` to a llama.cpp one, where the rule speaks of `max_num_seqs`.

The rule vocabulary (agent.records.Knob) is engine-neutral so that one rule serves every engine; this
table is the translation at the edge, into the message (`{flag}`) and the recommendation lines. A knob an
engine does not have keeps the neutral name. Ollama runs llama.cpp's server and its logs parse as
llama.cpp's, so its environment variables are named beside llama.cpp's flags.
"""

from __future__ import annotations

from agent.records import Knob, Server

NATIVE: dict[Server, dict[Knob, str]] = {
    Server.VLLM: {Knob.MAX_NUM_SEQS: "--max-num-seqs", Knob.MAX_MODEL_LEN: "--max-model-len",
                  Knob.GPU_MEMORY_UTILIZATION: "--gpu-memory-utilization", Knob.KV_CACHE_DTYPE: "--kv-cache-dtype"},
    Server.SGLANG: {Knob.MAX_NUM_SEQS: "--max-running-requests", Knob.MAX_MODEL_LEN: "--context-length",
                    Knob.GPU_MEMORY_UTILIZATION: "--mem-fraction-static", Knob.KV_CACHE_DTYPE: "--kv-cache-dtype",
                    Knob.MAX_QUEUE_SIZE: "--max-queued-requests", Knob.WATCHDOG_TIMEOUT: "--watchdog-timeout"},
    Server.TGI: {Knob.MAX_NUM_SEQS: "--max-concurrent-requests", Knob.MAX_MODEL_LEN: "--max-total-tokens",
                 Knob.GPU_MEMORY_UTILIZATION: "--cuda-memory-fraction",
                 Knob.MAX_BATCH_PREFILL_TOKENS: "--max-batch-prefill-tokens",
                 Knob.MAX_BATCH_TOTAL_TOKENS: "--max-batch-total-tokens",
                 Knob.MAX_WAITING_TOKENS: "--max-waiting-tokens"},
    Server.LLAMACPP: {Knob.MAX_NUM_SEQS: "-np (Ollama: OLLAMA_NUM_PARALLEL)",
                      Knob.MAX_MODEL_LEN: "-c (Ollama: OLLAMA_CONTEXT_LENGTH)",
                      Knob.KV_CACHE_DTYPE: "-ctk/-ctv (Ollama: OLLAMA_KV_CACHE_TYPE)",
                      Knob.MAX_QUEUE_SIZE: "OLLAMA_MAX_QUEUE"},
}


def native(server: Server | None, knob: Knob) -> str:
    """The name the engine's user types for `knob` (the neutral name where the engine has none)."""
    if server is None:
        return knob.value
    return NATIVE.get(server, {}).get(knob, knob.value)
