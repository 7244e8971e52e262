"""Shapes the fresh4 batch showed the parsers missing that are not one log statement (a paste's lost spaces, a
command line cut mid-path, rsyslog's RFC 3339 prefix, llama.cpp's device list), each beside its near miss;
the statements themselves are catalogued and rendered by test_catalogue."""

from __future__ import annotations

from agent.records import CapacityFact, Event, EventKind
from parsers.llamacpp import LlamaCppParser

_CMD = ('time=2025-02-16T06:10:14.783Z level=INFO source=server.go:376 msg="starting llama server" '
        'cmd="/usr/local/lib/ollama/runners/cuda_v12_avx/ollama_llama_server runner --model /data/olla')
_REST = ('ma/models/blobs/sha256-a677b4a4 --ctx-size 8192 --batch-size 512 --n-gpu-layers 81 --threads 6 '
         '--parallel 4 --port 36267"')
_RSYSLOG = "2025-02-16T06:10:14.783407+00:00 ollama-prod ollama[3829]: "


def _feed(lines: list[str]) -> list[object]:
    parser = LlamaCppParser()
    out: list[object] = []
    for line in lines:
        out += parser.feed(line)
    return out + parser.flush()


def _facts(lines: list[str]) -> dict[str, object]:
    return {r.name: r.value for r in _feed(lines) if isinstance(r, CapacityFact)}


def test_slog_pairs_pasted_without_spaces_still_give_the_command_line() -> None:
    line = ("time=2024-11-13T17:36:49.865Zlevel=INFOsource=server.go:383msg=starting llama servercmd=/usr/lib/"
            "ollama/runners/cuda_v12/ollama_llama_server --model /root/m --ctx-size 8192 --batch-size 512 "
            "--parallel 4 --port 38267")
    assert _facts([line]) == {"kv_cache_tokens": 8192.0, "max_num_seqs": 4.0, "max_model_len": 2048.0}


def test_other_slog_lines_without_spaces_carry_no_fact() -> None:
    assert _facts(["time=2024-11-13T17:36:49.865Zlevel=INFOsource=sched.go:449msg=loaded runnerscount=1"]) == {}


def test_a_command_line_cut_mid_path_is_joined_to_its_rest() -> None:
    for prefix in ("", _RSYSLOG):
        facts = _facts([prefix + _CMD, _REST])
        assert (facts["kv_cache_tokens"], facts["max_num_seqs"], facts["max_model_len"]) == (8192.0, 4.0, 2048.0)


def test_a_cut_command_line_takes_no_size_from_a_later_line() -> None:
    later = 'time=2025-02-16T06:10:14.783Z level=INFO source=sched.go:449 msg="loaded runners" count=2'
    assert _facts([_CMD, later, _REST]) == {}
    assert _facts([_CMD, "time=2025-02-16T06:10:15.000Z level=INFO source=x.go:1 msg=\"x --ctx-size 4096\""]) == {}


def test_rsyslog_rfc3339_prefix_is_read_through() -> None:
    line = _RSYSLOG + ('time=2025-02-16T06:10:20.000Z level=ERROR source=sched.go:455 msg="error loading llama '
                       'server" error="llama runner process has terminated: exit status 2"')
    assert EventKind.ENGINE_DEAD in {r.kind for r in _feed([line]) if isinstance(r, Event)}


def test_device_list_gives_a_gpus_free_memory_not_the_cpus() -> None:
    lines = ["0.00.129.367 I device_info:",
             "0.00.228.419 I   - CUDA0   : NVIDIA GeForce RTX 3090 (24123 MiB, 23755 MiB free)",
             "0.00.228.426 I   - CPU     : CPU (31169 MiB, 31169 MiB free)"]
    assert _facts(lines) == {"device_free_bytes": 23755 * 2**20}
    assert _facts(["  CPU: AMD Ryzen 9 7950X (63412 MiB, 60001 MiB free)"]) == {}
    assert _facts(["  Vulkan0: AMD Radeon RX 7900 XTX (24560 MiB, 24000 MiB free)"]) == {
        "device_free_bytes": 24000 * 2**20}


def test_n_ctx_seq_warning_is_each_sequences_context() -> None:
    warn = "0.13.127.894 W llama_context: n_ctx_seq (131072) < n_ctx_train (262144) -- the full capacity"
    assert _facts([warn]) == {"max_model_len": 131072.0}
    assert _facts(["llama_context: n_ctx_seq (65536) > n_ctx_train (32768) -- possible training context "
                   "overflow"]) == {"max_model_len": 65536.0}
    # the per-request line names a slot's context, no start-up size
    assert _facts(["slot update_slots: id  0 | task 0 | new prompt, n_ctx_slot = 4096, n_keep = 0"]) == {}
