"""Classification of logs nobody tuned on: the real-excerpt corpus holds both splits to their floors, and the
shapes real logs take (fields reordered, glued after progress bars, quoted, CR-redrawn, other wordings) are
pinned one by one, with the hard negatives beside them."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import regex
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from agent.records import CapacityFact, Event, EventKind, Knob, Server, ServerStats, as_dict
from parsers import families, make_parser

from .conftest import REF_TIME, run
from .test_properties import ADVERSARIAL

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generality", ROOT / "bench" / "generality.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["generality"] = module
    spec.loader.exec_module(module)
    return module


G = _bench()
EXCERPTS = G.load()

# The floors each split is held to. Both splits meet the targets today (recall ≥ 0.90, precision ≥ 0.95
# per class, no false alarm); if a change lowers one, the test says which class and excerpt.
RECALL_FLOOR = 0.90
PRECISION_FLOOR = 0.95


# ---- the corpus ----------------------------------------------------------------------------------
def test_corpus_is_large_sourced_and_new() -> None:
    assert len(EXCERPTS) >= 80
    ids = [ex.id for ex in EXCERPTS]
    assert len(ids) == len(set(ids))
    cited = (ROOT / "tests/data/logs/README.md").read_text() + (ROOT / "tests/data/startup/README.md").read_text()
    for ex in EXCERPTS:
        # public threads on GitHub, and (fresh12 on) two blog posts that quote a real engine's output
        assert ex.url.startswith("https://github.com/") or ex.id.startswith("fresh12-"), ex.id
        assert ex.url.startswith("https://"), ex.id
        assert ex.url not in cited.split(), f"{ex.id}: already cited in the repo"
        assert ex.lines and any(line.strip() for line in ex.lines), ex.id
        assert ex.expect <= {"oom", "preemption", "queue", "timeout", "http_429", "http_503", "engine_dead",
                             "cuda_error", "nccl_timeout", "xid", "stats", "facts"}, ex.id
    assert sum(ex.benign for ex in EXCERPTS) >= 13


def test_validation_split_is_a_third_spread_over_engines_and_classes() -> None:
    held = G.validation_ids()
    later = set().union(*(G.held_ids(path) for path in G.FRESH_SPLITS.values()))
    ids = {ex.id for ex in EXCERPTS} - later
    assert held <= ids
    assert 0.30 <= len(held) / len(ids) <= 0.40
    validation = G.split(EXCERPTS, "validation")
    assert {ex.engine for ex in validation} >= {"vllm", "sglang", "llamacpp"}
    classes = set().union(*(ex.expect for ex in validation))
    assert classes >= {"oom", "timeout", "engine_dead", "stats", "facts", "queue", "http_503"}
    assert any(ex.benign for ex in validation)


# `fresh` was scored once as collected (macro-F1 0.583: client/proxy wordings of queue and 503 refusals,
# vLLM 0.6.1's "preempted in") and then tuned on, like `tune`; so was `fresh2` (first score 0.778, below);
# `validation` never was.
@pytest.mark.parametrize("which", ["tune", "validation", "fresh", "fresh2"])
def test_split_meets_the_targets(which: str) -> None:
    report = G.score(G.split(EXCERPTS, which))
    low = {cls: (round(s.precision, 2), round(s.recall, 2)) for cls, s in report.per_class.items()
           if s.recall < RECALL_FLOOR or s.precision < PRECISION_FLOOR}
    assert not low, (low, report.misses)
    assert report.false_alarms == []
    assert report.field_misses == []


# Each fresh split was collected and labelled after a round of parser changes, committed with its labels before
# any parser ran on it, and scored once as it came (tests/data/real/README.md); each is held to the floors below,
# and none shares an excerpt with the splits before it or with validation. Their histories:
#
# `fresh2` was collected and labelled after the second round of parser changes and scored once as it came
# (macro-F1 0.778; misses listed in tests/data/real/README.md), then tuned on; it also meets the per-class
# targets above. This floor records the first score, the honest held-out figure.
#
# `fresh3` was collected and labelled after the third round of parser changes, committed with its labels, and
# scored once as it came (macro-F1 0.798, no false alarm, one field mismatch; misses in tests/data/real/README.md).
# Its five misses were then fixed from the engines' source (macro-F1 1.000, no field mismatch): these floors are
# that score, so a later parser change may not lower it. The first score stays recorded as it was.
#
# `fresh4` was collected and labelled after the fourth round (the catalogue widened from source), committed with its
# labels, and scored once as it came: macro-F1 0.877, no false alarm, one field mismatch (misses in
# tests/data/real/README.md). Its misses were then fixed from the engines' and clients' source (macro-F1 0.996, no
# field mismatch; the one miss left is an unexpected fact, a labelling question): these floors are that score.
#
# `fresh5` was collected and labelled after the fifth round (fresh4's misses fixed), committed with its labels, and
# scored once as it came: macro-F1 0.761, one false alarm, one field mismatch (tests/data/real/README.md). Its
# misses were then fixed from the engines' and clients' source (TensorRT-LLM, vllm.rs, llama-box, fetch and httpx
# timeouts, Continue's and KServe's refusals, a statement quoted in prose): macro-F1 1.000, no false alarm, no
# field mismatch. These floors are that score.
#
# `fresh6` was collected and labelled after the sixth round (fresh5's misses fixed), committed with its labels, and
# scored once as it came: macro-F1 0.872, no false alarm, no field mismatch (tests/data/real/README.md). Its
# misses were then fixed from the engines' source (vLLM's V0 and V1 main-loop frames and the records that log
# them, SGLang's TpModelWorkerClient, LMCache's patched scheduler's preemption): macro-F1 0.908, no false alarm,
# no field mismatch; what is left is the `gpu_lost`/`xid` call on one excerpt, scored as labelled. The floor is
# that after-fix score.
#
# `fresh7` was collected and labelled after the seventh round (fresh6's misses fixed, 36 more catalogued
# statements), committed with its labels, and scored once as it came: macro-F1 0.784, one false alarm (a
# maintainer's advice quoting a cudaMalloc failure), no field mismatch (tests/data/real/README.md). Its misses were
# then fixed from the engines' and clients' source (a quoted call in a sentence to the reader is prose; torch_npu's
# OOM; vLLM V0's engine-dead body relayed and its engine_step frame; SGLang's run_scheduler_process frame and its
# memory-pool line; TGI's bare Args dump; Triton's failed model load; gpud's Xid line; llamafile's slot refusal;
# openai-node, revChatGPT, MemGPT, huggingface_hub and JSON error_code statuses): macro-F1 0.923, no false alarm,
# no field mismatch; what is left is the `gpu_lost` beside the `xid` of gpud's Xid 79 line, scored as labelled.
# The floor is that after-fix score.
#
# `fresh8` was collected and labelled after the eighth round (fresh7's misses fixed), committed with its labels, and
# scored once as it came: macro-F1 0.881, two false alarms, no field mismatch (tests/data/real/README.md). Its
# misses were then fixed from the engines' and clients' source (a proposal of what a server would return is prose;
# requests' printed `<Response [503]>`; Envoy's untyped JSON `"response_code":"503"`): macro-F1 0.917, one false
# alarm (llama-server's `should_stop` line, labelled as a timeout in fresh2). That label was then settled from
# llama.cpp's source (a request cut by a time limit: `timeout`), and the rest fixed from source (Ollama's abandoned
# load, NCCL's non-CUDA errors, SGLang's disaggregation timeouts, TensorRT-LLM's iteration stats, LMDeploy's
# config): macro-F1 0.988, no false alarm; the floor is that score.
#
# `fresh9` was collected and labelled after the ninth round (fresh8's misses fixed), committed with its labels, and
# scored once as it came: macro-F1 0.810, no false alarm, no field mismatch (tests/data/real/README.md). Its misses
# were then fixed in part from source (ggml's CUDA_CHECK, TGI's shard init error, Ollama's CLI and Ray Serve's
# health-check timeouts, TensorRT-LLM's model limits, openai-node's relayed status, Faraday, Triton's queue
# timeout): macro-F1 0.892, no false alarm. Six more were then fixed from source: a browser console's 504, Gemini's
# bare overloaded message, IPython's `ReadTimeout` header, DashScope's `Request: … failed, status: 429`,
# tritonclient's verbose `<HTTPSocketPoolResponse status=504 …>` and vllm-rbln's `Not enough memory for 24 blocks of
# KV cache`; the floor is the score after them.
#
# `fresh10` (17 excerpts, short of the 60 asked) was collected and labelled after the tenth round, committed with its
# labels, and scored once as it came: macro-F1 0.889, no false alarm, one field mismatch. One miss was then fixed
# from source (the chatgpt npm client's p-timeout): macro-F1 0.908, no false alarm; then llm's bare `Error: Request
# timed out.` (its CLI printing the OpenAI client's timeout): 0.924; then LiteLLM's timeout decorator, which names
# its limit (the field mismatch): 0.938; then OpenAI's documented `Error Code 429 - Rate limit reached for requests`:
# 0.979, no false alarm, no field mismatch; the floor is that score.
# `fresh11` (85 excerpts) was collected and labelled blind by two collectors who read neither the parsers nor their
# output, committed with its labels, and scored once as it came: macro-F1 0.839, no false alarm, one field mismatch.
# Its misses were then fixed from source (Open MPI, V1's busy-loop step, V0's MQLLMEngine, NCCL's CUDA OOM, Kong,
# one-api, Anthropic's TypeScript client, Vercel, Envoy's details, llama-box, LoRAX's warmup span): macro-F1 0.947,
# no false alarm; the floor is that after-fix score.
# `fresh12` (146 excerpts) was collected and labelled blind by three collectors (the engines twice over, everything in
# front of them once), committed with its labels, and scored once as it came: macro-F1 0.750, one false alarm, six
# field mismatches. Its misses were then fixed from source (V0's run_mp_engine record, HIP and HSA errors, a negative
# KV budget, LMDeploy's sizing lines and loop's end, TensorRT-LLM's raised memory error, vLLM wrappers' failed start,
# pasted /metrics gauges, reqwest, Envoy, Ray Serve, LiteLLM, Cloudflare's 524, SGLang's retraction and watchdog
# wordings, terminate's what(), a request's slot line, MLC, Ollama's scheduler, Triton's full queue, FastChat) and
# four labels corrected on reading the source: macro-F1 0.932, no false alarm; the floor is that after-fix score.
# `fresh13` (111 excerpts) was collected and labelled blind the same way right after fresh12's fixes, committed, and
# scored once: macro-F1 0.741, one false alarm, seven field mismatches. Its misses were then fixed from source (Spring,
# Vert.x, Gemini's printed 429, LiteLLM's limiter, aiohttp's any-message form, HAProxy's refused 503, Anthropic's 529,
# Ray's dead actor and stopped replica, KServe, TensorRT-LLM's KV check, V0's CPU swap space, ggml's pinned memory,
# llama.cpp's JSON slot sizes, trtllm-serve's gauges, a binding's failed decode, Habana's device memory, llama-swap's
# health check): macro-F1 0.932, no false alarm, three field mismatches (timeouts still missed); the floor is that
# after-fix score.
# `fresh14` (134 excerpts) was collected and labelled blind by three collectors (vLLM and SGLang; llama.cpp, Ollama, TGI
# and the other engines; everything in front of and beside them), committed, and scored once: macro-F1 0.665, three
# false alarms, six field mismatches. Its misses were then fixed from source (AWS's SDKs, Azure's peak load, openai-
# node's string body, Olla, Cloudflare's 524 page, SageMaker, SGLang's scheduler death and KV handshake, tt-metal,
# ggml's Vulkan and Metal, TVM's Vulkan, glibc's heap abort, TensorRT-LLM's engine and context sizes, ONNX Runtime,
# LMDeploy's failed rank, Ray's worker and dead actor, kubelet's liveness kill, KServe, mistral.rs, PyTorch's wrapped
# heartbeat lines, V0's worker method and swap-space abort), three prose false alarms were silenced, a GPU fallen off
# the bus was scored as the labels' `xid`, and two labels corrected on reading the source: macro-F1 0.978, no false
# alarm, no field mismatch; the floor is that after-fix score. The `xid` scoring raised fresh6, fresh7 and fresh8.
# `fresh15` (111 excerpts) was collected and labelled blind the same way right after fresh14's fixes, committed, and
# scored once: macro-F1 0.729, no false alarm, eleven field mismatches (timeouts in .NET's, Apple's and Node's words).
# Its misses were then fixed from source (.NET's HttpClient, Azure.Core and Polly timeouts, Apple's NSURLError -1001,
# node-fetch's ETIMEDOUT and a JSON record's cause, Mistral's SDK and tier capacity, Dio's status, DCGM's Xid, an older
# driver's fallen-off-the-bus, HAProxy's JSON `sC`, Cloudflare's 524 as a status code, BentoML's busy runner and failed
# runner, Ray Serve's replica at capacity and a compiled graph's channel timeout, tritonserver's bad option, SGLang's PD
# waiting timeout and its graph capture's free memory, ggml's Vulkan device lost and CANN's error, V0's worker method
# failures and MQ engine traceback, Ollama 0.1's runner exit, llama-server's router start, LMDeploy's metrics line,
# TensorRT-LLM's older iteration line, vLLM Gaudi's weights, TGI's client target, an application's asyncio deadline):
# macro-F1 0.952, no false alarm, one field mismatch; the floor is that after-fix score.
# `fresh16` (90 excerpts) was collected and labelled blind the same way right after fresh15's fixes, committed, and
# scored once: macro-F1 0.705, no false alarm, five field mismatches. Its misses were then fixed from source (Gemini's
# exhausted capacity, LiteLLM's router with no deployment, Azure.Core's and .NET's 429 status lines, Envoy's upstream
# reset 503, Spring's bare `timeout`, Modal's runner start timeout, PyTorch's CUDA unknown error, nvidia-smi's unknown
# device, Ray Serve's crashed replica, vLLM's NIXL KV expiry and sleep-mode allocator, ggml's Level Zero OOM, TensorRT-
# LLM's CUDA runtime errors, Triton's UNAVAILABLE model row, llama-swap's upstream exit, GPUStack's RPC server, Tabby's
# llama-server exit, mistral.rs's interval line, TGI's default total tokens, Zed's queue status): macro-F1 0.972, no
# false alarm, two field mismatches; the floor is that after-fix score.
# `fresh17` (56 excerpts) was collected and labelled blind by two collectors (the engines; everything in front of and
# beside them) right after fresh16's fixes, committed, and scored once: macro-F1 0.630, no false alarm, five field
# mismatches. Its misses, all catalogued from their source or their own threads (OmniRoute's timeouts, queue budget and
# cooling credentials, RamaLama's health check and failed serve, LocalAI's backend that could not load, OpenRouter's
# relayed 429, Envoy's router upstream timeout, LiteLLM's limiter 429, OpenLLM's `Service Busy`, SkyServe's no ready
# replicas, GPUStack's heartbeat timeout): macro-F1 0.953, no false alarm, no field mismatch; the floor is that after-
# fix score.
# `fresh18` (100 excerpts; 104 collected, four dropped as cited by the fixtures' READMEs) was collected and labelled
# blind by three collectors (vLLM and SGLang with committed log files; llama.cpp, Ollama and their kin; everything in
# front of them) right after fresh17's fixes and one commit on Ollama's GIN deadlines, committed, and scored once:
# macro-F1 0.910 (0.908 on the 100 kept), one false alarm, five field mismatches. Its misses, fixed from their source
# (SGLang's abort message in its request log, wrk's socket timeouts, Envoy's `stream timeout` body, a 504 before a
# proxy's error page, CUDA driver error names, NVRM's NV_ERR_NO_MEMORY, vLLM's WorkerProc initialization failure,
# vLLM-Omni's stage that died before READY, an indented bare TimeoutError, ggml's SYCL exception exit and RPC crash,
# llama.cpp's buffers under a decimal-comma locale and on RPC devices, LM Studio's load guardrail, a proposal's "will
# be rejected with an HTTP 503"), with seven labels corrected on reading the source (tests/data/real/README.md):
# macro-F1 0.985, no false alarm, no field mismatch; the floor is that after-fix score.
# `fresh19` (78 excerpts) was collected and labelled blind by two collectors (the engines, mostly from committed log
# files; everything in front of and around them) right after fresh18's fixes and one commit of client timeouts (a 408,
# Ruby's net/http, Node's connect ETIMEDOUT, Cloudflare's plain 524), committed, and scored once: macro-F1 0.838, no
# false alarm, six field mismatches. Its misses, fixed from their source (undici's timeout as a JSON record and as the
# AI SDK wraps it, BentoML's runner readiness timeout and its access line's 503, Cloud Run's start-up timeout,
# SkyServe's failed replica, Ray's dead actor, agent-lightning's requeued rollout, GPT4All's Vulkan out of device
# memory, koboldcpp's request summary as a load sample, text-generation-webui's speed line, a 429 in lower case), with
# one label corrected (a llama.cpp batch retry that succeeded is no OOM) and the version line no longer counted as a
# capacity fact: macro-F1 0.950, no false alarm, one field mismatch. PyTorch's store rendezvous timing out, read from
# its source as the engine's own start-up wait rather than a collective's: 0.988, none; the floor is that score.
# `fresh20` (74 excerpts) was collected and labelled blind by three collectors (the engines' 2025-2026 releases and
# ports; llama.cpp's kin, Ollama and TabbyAPI; what sits in front of them) after fresh19's fixes, committed, and scored
# once: macro-F1 0.832, no false alarm, two field mismatches. Its misses, fixed from their source (ROCm's HSA runtime
# faults and ggml's ROCm/MUSA error lines, DeepEP's CUDA_CHECK, llama-run's context check, requests' ReadTimeout frame,
# Ray's raylet worker death, vLLM V0's failed task callback, exllamav3's CPU reduce timeout, TabbyAPI's context, cache
# and metrics, late-2023 llama.cpp's sizes, libllama's device line with its PCI id, and a failed load after an
# out-of-memory read as that out-of-memory), with four labels corrected by the corpus's rules: macro-F1 0.993, no
# false alarm, no field mismatch; the floor is that after-fix score.
#
FreshFloor = tuple[str, int, float, int, int]  # split, least size, macro-F1 floor, false alarms, field misses
FRESH_FLOORS: list[FreshFloor] = [
    ("fresh2", 30, 0.77, 0, 0),  # the first score (0.778), the honest held-out figure
    ("fresh3", 40, 1.0, 0, 0),
    ("fresh4", 60, 0.995, 0, 0),  # 0.9957 printed to three places
    ("fresh5", 60, 0.999, 0, 0),
    ("fresh6", 60, 0.999, 0, 0),
    ("fresh7", 60, 0.999, 0, 0),
    ("fresh8", 60, 0.993, 0, 0),
    ("fresh9", 60, 0.969, 0, 0),  # first score 0.810
    ("fresh10", 17, 0.989, 0, 0),  # first score 0.889, one field mismatch
    ("fresh11", 85, 0.953, 0, 0),  # first score 0.839, one field mismatch
    ("fresh12", 140, 0.940, 0, 0),  # first score 0.750, one false alarm, six field mismatches
    ("fresh13", 110, 0.959, 0, 1),  # first score 0.741, one false alarm, seven field mismatches
    ("fresh14", 134, 0.984, 0, 0),  # first score 0.665, three false alarms, six field mismatches
    ("fresh15", 111, 0.951, 0, 1),  # first score 0.729, no false alarm, eleven field mismatches
    ("fresh16", 90, 0.983, 0, 2),  # first score 0.705, no false alarm, five field mismatches
    ("fresh17", 56, 0.989, 0, 0),  # first score 0.630, no false alarm, five field mismatches
    ("fresh18", 100, 0.985, 0, 0),  # first score 0.908 (0.910 on 104), one false alarm, five field mismatches
    ("fresh19", 78, 0.987, 0, 0),  # first score 0.838, no false alarm, six field mismatches
    ("fresh20", 74, 0.992, 0, 0),  # first score 0.832, no false alarm, two field mismatches
]


@pytest.mark.parametrize(("which", "least", "floor", "false_alarms", "field_misses"), FRESH_FLOORS,
                         ids=[f[0] for f in FRESH_FLOORS])
def test_fresh_split_holds_its_score(which: str, least: int, floor: float, false_alarms: int,
                                     field_misses: int) -> None:
    held = G.held_ids(G.FRESH_SPLITS[which])
    fresh = G.split(EXCERPTS, which)
    assert len(fresh) == len(held) >= least
    names = list(G.FRESH_SPLITS)
    earlier = set().union(*(G.held_ids(G.FRESH_SPLITS[name]) for name in names[:names.index(which)]))
    assert not {ex.id for ex in fresh} & (earlier | G.validation_ids())
    assert not {ex.id for ex in G.split(EXCERPTS, "tune")} & held
    report = G.score(fresh)
    assert report.macro_f1 >= floor, (round(report.macro_f1, 3), report.misses)
    assert len(report.false_alarms) <= false_alarms, report.false_alarms
    assert len(report.field_misses) <= field_misses, report.field_misses


# ---- stats lines in the shapes real logs take ------------------------------------------------------
V1_STATS = ("Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg generation throughput: 80.1 tokens/s, "
            "Running: 7 reqs, Waiting: 3 reqs, GPU KV cache usage: 41.5%, Prefix cache hit rate: 12.0%")


def _records(server: Server, lines: list[str]) -> list[object]:
    return list(run(make_parser(server, "t", REF_TIME), lines))


def _stats(records: list[object]) -> list[ServerStats]:
    return [r for r in records if isinstance(r, ServerStats)]


def _events(records: list[object], kind: EventKind | None = None) -> list[Event]:
    return [r for r in records if isinstance(r, Event) and (kind is None or r.kind is kind)]


@pytest.mark.parametrize("line", [
    # glued after a progress bar on the same physical line
    "Processed prompts:  40%|████      | 4/10 [00:03<00:04,  1.2it/s](APIServer pid=1) INFO 05-19 10:13:11 "
    f"[loggers.py:271] {V1_STATS}",
    # wrapped in backticks, as pasted into an issue
    f"`(APIServer pid=1) INFO 05-19 10:13:11 [loggers.py:271] {V1_STATS}`",
    # Kubernetes RFC 3339 prefix, ANSI colour on the tag, CRLF
    "2026-05-12T07:54:39.312201059Z \x1b[36m(APIServer pid=1)\x1b[0m INFO 05-19 10:13:11 [loggers.py:271] "
    f"{V1_STATS}\r",
    # fields in another order, one more field
    "(APIServer pid=1) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 12.5 tokens/s, "
    "Avg generation throughput: 80.1 tokens/s, Waiting: 3 reqs, Running: 7 reqs, Drafted: 4 reqs, "
    "GPU KV cache usage: 41.5%, Prefix cache hit rate: 12.0%",
    # a progress bar redrawn with CR before the record
    f"Adding requests: 10%\rAdding requests: 90%\r(APIServer pid=1) INFO 05-19 10:13:11 [loggers.py:271] {V1_STATS}",
])
def test_vllm_stats_in_other_shapes(line: str) -> None:
    stats = _stats(_records(Server.VLLM, [line]))
    assert len(stats) == 1
    s = stats[0]
    assert (s.running, s.waiting, s.kv_usage_ratio, s.gen_tps) == (7, 3, 0.415, 80.1)


def test_vllm_old_era_stats_with_timing_fields() -> None:
    line = ("INFO 02-01 06:36:05 llm_engine.py:921] Avg prompt throughput: 382.6 tokens/s, Avg generation "
            "throughput: 118.5 tokens/s, Max iteration time: 386.7 ms, Avg time/tok:149.4 ms, Running: 35 reqs, "
            "Swapped: 0 reqs, Pending: 115 reqs, GPU KV cache usage: 99.0%, CPU KV cache usage: 0.0%")
    records = _records(Server.VLLM, [line])
    (s,) = _stats(records)
    assert (s.running, s.waiting, s.swapped, s.kv_usage_ratio) == (35, 115, 0, 0.99)
    assert [e.kind for e in _events(records)] == [EventKind.PENDING]


def test_stats_quoted_in_an_exception_or_request_are_not_samples() -> None:
    lines = [f"ERROR 05-19 10:13:11 [x.py:1] ValueError: cannot parse '{V1_STATS}'",
             f"INFO 05-19 10:13:11 [logger.py:39] Received request x: prompt: '{V1_STATS}', params: None"]
    assert _stats(_records(Server.VLLM, lines)) == []


def test_sglang_batch_lines_of_pd_servers_and_after_a_progress_bar() -> None:
    lines = ["[2025-06-18 18:11:03] Prefill batch. #new-seq: 14, #new-token: 8192, #cached-token: 0, token usage: "
             "0.92, #unbootstrapped-req: 0, #queue-req: 105, #transferring-req: 990, input throughput (token/s): 1.0",
             "  0%|          | [2026-05-28 02:59:50 TP0] Prefill batch, #new-seq: 1, #new-token: 896, #running-req: 2, "
             "#queue-req: 28, #pending-token: 0"]
    stats = _stats(_records(Server.SGLANG, lines))
    assert [(s.running, s.waiting) for s in stats] == [(None, 105), (2, 28)]
    assert stats[1].ts is not None


def test_llamacpp_timings_of_other_builds_are_throughput_samples() -> None:
    lines = ["2.02.846.974 I slot print_timing: id  3 | task 0 | n_decoded =   1081, tg =  12.93 t/s, "
             "tg_3s =  12.57 t/s",
             "[42027] prompt eval time =     751.87 ms /    25 tokens (   30.07 ms per token,    33.25 tokens "
             "per second)",
             "print_timings:        eval time =   11813.43 ms /   242 runs   (   48.82 ms per token,    20.49 tokens "
             "per second)"]
    stats = _stats(_records(Server.LLAMACPP, lines))
    assert [(s.prompt_tps, s.gen_tps) for s in stats] == [(None, 12.57), (33.25, None), (None, 20.49)]


# ---- start-up capacity facts beyond vLLM -----------------------------------------------------------
def test_llamacpp_and_ollama_capacity_facts() -> None:
    lines = ['time=2025-07-18T14:50:44.599Z level=INFO source=ggml.go:365 msg="model weights" buffer=CUDA1 '
             'size="11.0 GiB"',
             'time=2025-07-18T14:50:44.599Z level=INFO source=ggml.go:365 msg="model weights" buffer=CPU '
             'size="2.1 GiB"',
             "load_tensors:        CUDA0 model buffer size = 16306.25 MiB",
             "load_tensors:    CUDA_Host model buffer size =   788.91 MiB",
             "llama_new_context_with_model: KV self size  = 4320.00 MiB, K (f16): 2592.00 MiB, V (f16): 1728.00 MiB",
             "llama_kv_cache_unified_iswa: creating non-SWA KV cache, size = 2048 cells"]
    facts = [(r.name, r.value) for r in _records(Server.LLAMACPP, lines) if isinstance(r, CapacityFact)]
    assert ("weights_bytes", 11 * 1024**3) in facts
    assert ("weights_bytes", round(16306.25 * 1024**2)) in facts
    assert ("kv_cache_bytes", 4320 * 1024**2) in facts
    assert ("kv_cache_tokens", 2048.0) in facts
    assert ("weights_bytes", round(2.1 * 1024**3)) not in facts  # RAM, not the GPU's
    assert ("weights_bytes", round(788.91 * 1024**2)) not in facts


# ---- timeouts: scope and knob ----------------------------------------------------------------------
@pytest.mark.parametrize(("server", "line", "scope", "knob"), [
    (Server.VLLM, "ERROR 10-30 11:47:32 async_llm_engine.py:656] Engine iteration timed out. This should never happen!",
     "engine", Knob.VLLM_ENGINE_ITERATION_TIMEOUT_S),
    (Server.VLLM, "ERROR 09-06 04:14:11 [core.py:640] TimeoutError: RPC call to execute_model timed out.", "engine",
     Knob.VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS),
    (Server.VLLM, "ERROR 10-10 01:53:56 client.py:412] TimeoutError: Server didn't reply within 5000 ms", "engine",
     Knob.VLLM_RPC_TIMEOUT),
    (Server.SGLANG, "[2025-08-02 19:24:30 TP3] Watchdog timeout (self.watchdog_timeout=300)", "engine",
     Knob.WATCHDOG_TIMEOUT),
    (Server.LLAMACPP, "Error: timed out waiting for llama runner to start - progress 0.00 -", "engine",
     Knob.OLLAMA_LOAD_TIMEOUT),
    (Server.AUTO, "openai.error.APIError: HTTP code 504 from API (<html><head><title>504 Gateway Time-out</title>",
     "request", None),
    (Server.LLAMACPP, "Dec 11 09:58:58 quorra ollama[1543654]: [GIN] 2024/12/11 - 09:58:58 | 500 |        29m59s |"
     "      10.0.0.123 | POST     \"/api/chat\"", "request", None),
])
def test_timeouts_carry_scope_and_knob(server: Server, line: str, scope: str, knob: Knob | None) -> None:
    (event,) = _events(_records(server, [line]), EventKind.DEADLINE_EXCEEDED)
    assert event.fields["scope"] == scope
    assert event.fields.get("knob") == (knob.value if knob else None)


# A bare TimeoutError names no waiter; the frames do. aiohttp's total `ClientTimeout` leaves its TimerContext
# (`TimerContext.__exit__`) with `raise asyncio.TimeoutError`, the builtin since Python 3.11: the client gave
# up. vLLM's shared-memory queue (shm_broadcast.py, MessageQueue.acquire_read) raises the same bare exception: the
# engine waited on itself, and so does an engine that waited through aiohttp (a frame of vllm/ on the way).
SITE = "/usr/local/lib/python3.12/site-packages"
AIOHTTP_TOTAL = [f'  File "{SITE}/aiohttp/client.py", line 1359, in __aenter__', "    self._resp = await self._coro",
                 f'  File "{SITE}/aiohttp/client.py", line 579, in _request', "    with timer:",
                 "    raise asyncio.TimeoutError from exc_val", "TimeoutError"]


@pytest.mark.parametrize(("lines", "timeout_by"), [
    (["Traceback (most recent call last):", '  File "/app/bench.py", line 41, in fetch',
      "    async with session.post(url, json=body) as resp:", *AIOHTTP_TOTAL], "client"),
    (["Traceback (most recent call last):", f'  File "{SITE}/vllm/multimodal/utils.py", line 88, in fetch_image',
      "    async with session.get(url) as resp:", *AIOHTTP_TOTAL], "engine"),
    (["Traceback (most recent call last):",
      f'  File "{SITE}/vllm/distributed/device_communicators/shm_broadcast.py", line 466, in acquire_read',
      "    raise TimeoutError", "TimeoutError"], "engine"),
])
def test_a_bare_timeout_is_scoped_by_its_frames(lines: list[str], timeout_by: str) -> None:
    (event,) = _events(_records(Server.AUTO, lines), EventKind.DEADLINE_EXCEEDED)
    assert (event.fields["timeout_by"], event.fields["scope"]) == (timeout_by,
                                                                   "request" if timeout_by == "client" else "engine")


def test_an_engine_that_dies_of_its_timeout_is_also_engine_dead() -> None:
    lines = ["ERROR 10-30 11:47:32 async_llm_engine.py:656] Engine iteration timed out. This should never happen!",
             "ERROR 10-30 11:47:32 async_llm_engine.py:56] Engine background task failed"]
    kinds = {e.kind for e in _events(_records(Server.VLLM, lines))}
    assert kinds == {EventKind.DEADLINE_EXCEEDED, EventKind.ENGINE_DEAD}


# ---- hard negatives --------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "(VllmWorkerProcess pid=1) INFO 04-24 08:27:56 [model_runner.py:1456] Capturing cudagraphs for decoding. If "
    "out-of-memory error occurs during cudagraph capture, consider decreasing `gpu_memory_utilization`.",
    "INFO 08-19 07:51:12 model_runner.py:1028] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are "
    "running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.",
    'time=2026-07-30T10:05:15.022-04:00 level=INFO source=routes.go:1947 msg="server config" '
    'env="map[OLLAMA_KEEP_ALIVE:5m0s OLLAMA_LOAD_TIMEOUT:5m0s OLLAMA_MAX_QUEUE:512]"',
    "(APIServer pid=3945527) INFO 05-26 19:19:56 [launcher.py:116] [shutdown] API server: stopping engine client "
    "mode=drain timeout=15s",
    "warning: failed to mlock 827228160-byte buffer (after previously locking 0 bytes): Cannot allocate memory",
    "ValueError: The decoder prompt (length 5951) is longer than the maximum model length of 4096.",
    "Mar 25 17:17:55 h ollama[247]: [GIN] 2025/03/25 - 17:17:55 | 500 |      4h15m37s |  127.0.0.1 | POST     "
    '"/api/generate"',
    "TimeoutError: [Errno 110] Connection timed out",
])
@pytest.mark.parametrize("server", [Server.AUTO, Server.VLLM, Server.LLAMACPP, Server.SGLANG])
def test_hard_negatives_stay_benign(line: str, server: Server) -> None:
    # A request answered with an error status is recorded (`request_failed`, a count for the operator), but it
    # is none of the incident kinds these lines only look like.
    assert [e for e in _events(_records(server, [line])) if e.kind is not EventKind.REQUEST_FAILED] == []


# ---- properties of the new parsing code ------------------------------------------------------------
SHAPES = [
    "Processed prompts: 1%|{t}(APIServer pid=1) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt "
    "throughput: {t} tokens/s, Avg generation throughput: {t} tokens/s, Running: {t} reqs, Waiting: {t} reqs, "
    "GPU KV cache usage: {t}%",
    "`INFO 02-01 06:36:05 llm_engine.py:921] Avg prompt throughput: {t}, Max iteration time: {t} ms, "
    "Running: {t} reqs, Pending: {t} reqs, GPU KV cache usage: {t}%`",
    "{t}[2025-06-18 18:11:03 TP0] Prefill batch. #new-seq: {t}, #queue-req: {t}, #transferring-req: {t}",
    "slot print_timing: id  3 | task 0 | n_decoded = {t}, tg = {t} t/s, tg_3s = {t} t/s",
    "prompt eval time = {t} ms / {t} tokens ({t} ms per token, {t} tokens per second)",
    'time=2025-07-18T14:50:44.599Z level=INFO source=ggml.go:365 msg="model weights" buffer={t} size="{t} GiB"',
    "load_tensors: {t} model buffer size = {t} MiB",
    "ValueError: Free memory on device cuda:0 ({t}/{t} GiB) on startup is less than desired GPU memory utilization "
    "({t}, {t} GiB).",
    "[2025-08-02 19:24:30 TP3] Watchdog timeout (self.watchdog_timeout={t})",
    "TimeoutError: Server didn't reply within {t} ms",
    '{{"error":{{"code":503,"message":"{t}","type":"unavailable_error"}}}}',
    "update_slots : failed to decode the batch, n_batch = 1, ret = {t}",
    "Avg prompt throughput: {t}\r{t}\r",
]
PARSERS = [Server.AUTO, Server.VLLM, Server.SGLANG, Server.LLAMACPP, Server.TGI]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=120), server=st.sampled_from(PARSERS))
def test_new_shapes_with_arbitrary_values_never_raise(text: str, server: Server) -> None:
    run(make_parser(server, "t", REF_TIME), [shape.format(t=text) for shape in SHAPES])


PROMPT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=12, max_size=120)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=PROMPT, server=st.sampled_from(PARSERS))
@example(prompt="prefix_hit_r", server=Server.AUTO)  # a field name of the records, not the prompt
def test_a_prompt_planted_in_stats_shaped_lines_reaches_no_record(prompt: str, server: Server) -> None:
    """A request log or an exception quoting a stats, timeout or 503 line with a prompt in it: the prompt
    never reaches a record, whatever the new field-anywhere parsers make of the rest."""
    assume(sum(c.isalpha() for c in prompt) >= 3)  # digits alone are in every time stamp

    def planted(p: str) -> list[str]:
        return [
            f"INFO 05-19 10:13:11 [logger.py:39] Received request x: prompt: {p!r}, {V1_STATS}",
            f"ERROR 05-19 10:13:11 [x.py:1] ValueError: {V1_STATS} {p!r}",
            f"`INFO 05-19 10:13:11 [loggers.py:271] {p!r} {V1_STATS}`",
            f"[2025-06-18 18:11:03 TP0] {p!r} Prefill batch. #new-seq: 1, #queue-req: 3",
            f"slot print_timing: id 0 | task 1 | {json.dumps({'prompt': p})} tg = 1.0 t/s",
            f'{{"error":{{"code":503,"message":{json.dumps(p)},"type":"unavailable_error"}}}}',
            f"TimeoutError: RPC call to execute_model timed out. {p!r}",
            f"RuntimeError: Decode out of memory. Try to lower your batch size. {p!r}",
        ]

    lines = planted(prompt)
    fixed = "\n".join(planted(""))  # a prompt that is a word of the lines themselves ("TimeoutError") proves nothing
    def text_of(lines: list[str]) -> str:
        records = run(make_parser(server, "t", REF_TIME), lines)
        return json.dumps([as_dict(r) for r in records], default=str, ensure_ascii=False)

    text = text_of(lines)
    # nor does one that the records hold without any prompt (a field's name: "prefix_hit_r")
    own = text_of(planted(""))
    for form in {prompt, json.dumps(prompt)[1:-1], repr(prompt)[1:-1]}:
        if form.strip() and form not in fixed + own and form not in "\n".join(
                line.replace(form, "") for line in lines):
            assert form not in text


def test_family_patterns_never_backtrack_catastrophically() -> None:
    patterns: list[re.Pattern[str]] = []
    for sig in families.FAMILY_SIGNATURES:
        patterns.append(sig.pattern)
        if sig.unless is not None:
            patterns.append(sig.unless)
    assert len(patterns) >= 10
    for pattern in patterns:
        guarded = regex.compile(pattern.pattern, pattern.flags & ~re.UNICODE)
        for line in [*ADVERSARIAL, "Error " + "out of " * 20000, "Free memory on device (" + "1." * 30000,
                     "failed to decode the batch, n_batch = " + "1" * 60000, "a." * 30000 + "TimeoutError"]:
            try:
                guarded.search(line[:65536], timeout=5.0)
            except TimeoutError:
                raise AssertionError(f"{pattern.pattern[:60]} backtracks on {line[:40]!r}…") from None
