"""Wordings the fresh3 batch showed the parsers missing: each line as the engine's source prints it, and the
record a reader of that line would write down."""

from __future__ import annotations

from agent.records import CapacityFact, Event, EventKind, ServerStats
from parsers.generic import GenericParser
from parsers.llamacpp import LlamaCppParser
from parsers.sglang import SglangParser
from parsers.vllm import VllmParser


def _feed(parser, lines):  # type: ignore[no-untyped-def]
    out = []
    for line in lines:
        out += parser.feed(line)
    return out + parser.flush()


def test_v0_engine_loop_frame_is_engine_death() -> None:
    lines = [
        'ERROR 06-22 20:16:34 async_llm_engine.py:52]   File "/usr/lib/python3/dist-packages/vllm/engine/'
        'async_llm_engine.py", line 532, in run_engine_loop',
        "ERROR 06-22 20:16:34 async_llm_engine.py:52]     has_requests_in_progress = await asyncio.wait_for(",
    ]
    kinds = [r.kind for r in _feed(VllmParser(), lines) if isinstance(r, Event)]
    assert kinds == [EventKind.ENGINE_DEAD]


def test_a_request_traceback_elsewhere_in_the_engine_is_not_death() -> None:
    lines = ['ERROR 06-22 20:16:34 serving_chat.py:60]   File "/usr/lib/python3/dist-packages/vllm/engine/'
             'async_llm_engine.py", line 640, in generate']
    assert [r for r in _feed(VllmParser(), lines) if isinstance(r, Event)] == []


def test_sglang_01_fill_batch_line_is_a_load_sample() -> None:
    line = ("new fill batch. #seq: 1. #cached_token: 330. #new_token: 2172. #remaining_req: 57. #running_req: 9. "
            "tree_cache_hit_rate: 69.16%")
    stats = [r for r in _feed(SglangParser(), [line]) if isinstance(r, ServerStats)]
    assert [(s.running, s.waiting) for s in stats] == [(9, 57)]


def test_client_failed_with_status_429() -> None:
    line = "2025-11-26 13:52:28,036 - image_client - ERROR - Image generation for eval failed with status: 429"
    events = [r for r in _feed(GenericParser(), [line]) if isinstance(r, Event)]
    assert [(e.kind, e.fields.get("status")) for e in events] == [(EventKind.HTTP_429, 429)]


def test_client_failed_with_status_4290_is_no_429() -> None:
    line = "2025-11-26 13:52:28,036 - image_client - ERROR - Image generation for eval failed with status: 4290"
    assert [r for r in _feed(GenericParser(), [line]) if isinstance(r, Event)] == []


def test_ollama_runner_command_line_facts() -> None:
    # Ollama passes num_ctx × parallel as --ctx-size: 8192 cells shared by 4 slots of 2048
    line = ('time=2024-09-20T14:35:02.053+02:00 level=INFO source=server.go:395 msg="starting llama server" '
            'cmd="/tmp/ollama/runners/cpu_avx2/ollama_llama_server --model /root/m --ctx-size 8192 '
            '--batch-size 512 --embedding --log-disable --n-gpu-layers 999 --no-mmap --parallel 4 --port 36611"')
    facts = {r.name: r.value for r in _feed(LlamaCppParser(), [line]) if isinstance(r, CapacityFact)}
    assert facts["kv_cache_tokens"] == 8192
    assert facts["max_num_seqs"] == 4
    assert facts["max_model_len"] == 2048
