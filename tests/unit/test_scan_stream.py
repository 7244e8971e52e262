"""`scan` streams: the summary built record by record, one buffered JSON encoder, minute-cached time stamps,
and `--jobs N` giving byte for byte what one job gives, with events straddling the chunk edges."""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.inert import inert
from agent.offline.parallel import chunks, scan_path
from agent.offline.saved import FileScan, scan_stream
from agent.records import Event, Record, RequestSample, Server, ServerStats, occurrences
from agent.views.scan_text import JsonlWriter, record_json, render_text
from agent.views.summary import NOTABLE_LIMIT, SummaryBuilder, summarize
from parsers.vllm import VllmParser

from .conftest import LOGS, REF_TIME

FIXTURES = sorted(p for p in LOGS.rglob("*.log"))


def _scan(path: Path) -> FileScan:
    with path.open("rb") as handle:
        return scan_stream(handle, path.name, ref_time=REF_TIME)


def test_the_jsonl_writer_writes_one_line_per_record_whatever_its_batch() -> None:
    for path in FIXTURES:
        scan = _scan(path)
        out = io.StringIO()
        writer = JsonlWriter(out, batch=7)
        for record in scan.records:
            writer([record], scan.server)
        writer.flush()
        lines = out.getvalue().splitlines()
        assert len(lines) == len(scan.records), path
        assert [json.loads(line)["type"] for line in lines] == [
            "event" if isinstance(r, Event) else "stats" if isinstance(r, ServerStats)
            else "request" if isinstance(r, RequestSample) else "fact"
            for r in scan.records], path


def test_a_sample_is_written_in_field_order_with_its_line_before_its_file_key() -> None:
    out = io.StringIO()
    writer = JsonlWriter(out)
    writer([ServerStats(1.5, "s\"q", Server.VLLM, running=1, waiting=2, kv_usage_ratio=0.25, prompt_tps=10.0,
                        gen_tps=float("nan"), prefix_hit_ratio=-0.0, path="p\x1b", offset=6, line=7)], Server.VLLM)
    writer.flush()
    assert out.getvalue() == (
        '{"type": "stats", "ts": 1.5, "source": "s\\"q", "server": "vllm", "running": 1, "waiting": 2, '
        '"swapped": null, "kv_usage_ratio": 0.25, "prompt_tps": 10.0, "gen_tps": NaN, "prefix_hit_ratio": -0.0, '
        '"preemptions": null, "kv_used_tokens": null, "path": "p\\\\x1b", "offset": 6, "line": 7, '
        '"file_key": null}\n')


def _reference_notable(records: list[Record]) -> list[Event]:
    order = {Server: 0}  # noqa: F841 - keeps the reference self-contained
    rank = {"critical": 0, "error": 1, "warning": 2, "info": 3}
    events = [r for r in records if isinstance(r, Event)]
    top = sorted(events, key=lambda e: (rank[e.severity.value], e.ts or 0.0))[:NOTABLE_LIMIT]
    top.sort(key=lambda e: e.ts or 0.0)
    return top


def test_streamed_summary_equals_sorting_everything() -> None:
    records = [r for path in FIXTURES for r in _scan(path).records]
    rng = random.Random(7)
    rng.shuffle(records)
    summary = summarize(records)
    assert summary.notable == _reference_notable(records)
    events = [r for r in records if isinstance(r, Event)]
    kinds = {e.kind.value for e in events}
    assert summary.counts == {k: sum(occurrences(e) for e in events if e.kind.value == k) for k in kinds}
    by_phase: dict[str, Counter[str]] = {}
    for e in events:
        by_phase.setdefault(e.kind.value, Counter())[e.phase.value] += occurrences(e)
    assert summary.phases == by_phase
    # built in two halves and merged (as `--jobs` does) it is the same again
    first, second = SummaryBuilder(), SummaryBuilder()
    first.add(records[: len(records) // 2])
    second.add(records[len(records) // 2:])
    first.merge(second)
    assert first.result() == summarize(records)


@pytest.mark.parametrize("zone", ["America/New_York", "Europe/London", "Australia/Lord_Howe", "+05:30", "UTC"])
def test_minute_cached_stamps_equal_datetime_across_dst(zone: str) -> None:
    from agent.offline.saved import parse_tz

    tz = parse_tz(zone)
    ref = datetime(2026, 11, 29, tzinfo=timezone.utc).timestamp()
    parser = VllmParser("x", ref, tz)
    rng = random.Random(zone)
    # every second around the 2026 transitions, plus random stamps through the year
    moments = []
    for start in (datetime(2026, 3, 8, 6, 58), datetime(2026, 11, 1, 5, 58), datetime(2026, 3, 29, 0, 58),
                  datetime(2026, 10, 25, 0, 58), datetime(2026, 4, 5, 1, 28), datetime(2026, 10, 4, 1, 58)):
        moments += [start + timedelta(seconds=s) for s in range(0, 3 * 3600, 7)]
    moments += [datetime(2026, 1, 1) + timedelta(seconds=rng.randrange(366 * 86400)) for _ in range(3000)]
    for naive in moments:
        for m in (naive, naive.replace(hour=(naive.hour + 1) % 24)):
            stamp = m.strftime("%m-%d %H:%M:%S")
            expected = parser.stamps._yearless_at(m.month, m.day, m.hour, m.minute, m.second)
            got = parser.stamps.yearless(m.month, m.day, m.hour, m.minute, m.second, stamp)
            assert got == expected, (zone, stamp)
            full = m.strftime("%Y-%m-%d %H:%M:%S") + ".25"
            want = datetime(m.year, m.month, m.day, m.hour, m.minute, m.second, tzinfo=tz).timestamp() + 0.25
            assert parser.stamps.local(m.year, m.month, m.day, m.hour, m.minute, m.second + 0.25, full) == want


# ---- --jobs --------------------------------------------------------------------------------------

def _straddling_log(lines: int, rng: random.Random) -> str:
    """A vLLM log whose multi-line and stateful occurrences land anywhere: tracebacks (raw and re-prefixed),
    queues turning non-empty, OOM storms inside the de-duplication window, a restart, V0 preemption totals."""
    out: list[str] = []
    t = datetime(2026, 11, 28, 23, 59, 0)
    total = 0
    while len(out) < lines:
        t += timedelta(seconds=rng.choice((0, 0, 1, 1, 2, 7, 40)))
        stamp = t.strftime("%m-%d %H:%M:%S")
        r = rng.random()
        engine = rng.choice((0, 0, 1))
        if r < 0.45:
            out.append(f"(APIServer pid=10) INFO {stamp} [loggers.py:116] Engine 00{engine}: Avg prompt throughput: "
                       f"{rng.uniform(0, 900):.1f} tokens/s, Avg generation throughput: {rng.uniform(0, 90):.1f} "
                       f"tokens/s, Running: {rng.randint(0, 9)} reqs, Waiting: {rng.choice((0, 0, 2, 5))} reqs, "
                       f"GPU KV cache usage: {rng.uniform(0, 100):.1f}%, Prefix cache hit rate: 1.0%")
        elif r < 0.75:
            status = rng.choice(("200 OK",) * 8 + ("429 Too Many Requests", "503 Service Unavailable"))
            out.append(f'(APIServer pid=10) INFO:     10.0.0.1:5000 - "POST /v1/completions HTTP/1.1" {status}')
        elif r < 0.80:
            out.append(f"(EngineCore_DP0 pid=20) ERROR {stamp} [core.py:710] EngineCore encountered a fatal error.")
            out.append("(EngineCore_DP0 pid=20) Traceback (most recent call last):")
            out += [f'(EngineCore_DP0 pid=20)   File "/x/core.py", line {i}, in run' for i in range(rng.randint(1, 6))]
            out.append("(EngineCore_DP0 pid=20) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                       "2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free.")
        elif r < 0.84:
            out.append("Traceback (most recent call last):")
            out += ['  File "/x/worker.py", line 9, in step' for _ in range(rng.randint(1, 4))]
            out.append("RuntimeError: NCCL error: unhandled system error, Timeout(ms)=600000")
        elif r < 0.87:
            total += rng.randint(1, 60)
            out.append(f"WARNING {stamp} scheduler.py:1141] Sequence group 9 is preempted by PreemptionMode.RECOMPUTE "
                       f"mode because there is not enough KV cache space. total_num_cumulative_preemption={total}")
        elif r < 0.88:
            out.append(f"(APIServer pid=10) INFO {stamp} [api_server.py:1] vLLM API server version 0.10.1")
            out.append(f"(EngineCore_DP0 pid=20) INFO {stamp} [gpu_worker.py:1] Available KV cache memory: 20.5 GiB")
            out.append(f"(EngineCore_DP0 pid=20) INFO {stamp} [kv_cache_utils.py:1] GPU KV cache size: 154,256 tokens")
        elif r < 0.9:
            out.append("")
        else:
            out.append(f"(APIServer pid=10) INFO {stamp} [launcher.py:46] Route: /v1/models, Methods: GET")
    return "\n".join(out) + "\n"


def _both(path: Path, jobs: int, server: Server = Server.AUTO) -> tuple[str, str]:
    """(JSON lines, text summary) of one file scanned with `jobs` processes and tiny chunks."""
    out = io.StringIO()
    writer = JsonlWriter(out)
    scan = scan_path(path, writer, server, timezone.utc, jobs, writer, None, min_bytes=1, probe=3)
    writer.flush()
    summary = SummaryBuilder()
    text_scan = scan_path(path, lambda records, _: summary.add(records), server, timezone.utc, jobs, None, summary,
                          min_bytes=1, probe=3)
    assert (scan.lines, scan.server, scan.parse_errors) == (text_scan.lines, text_scan.server, text_scan.parse_errors)
    return out.getvalue(), render_text([text_scan], summary.result())


@pytest.mark.parametrize("size", [400, 3000])
def test_jobs_output_is_identical_to_one_job(tmp_path: Path, size: int) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(_straddling_log(size, random.Random(size)), encoding="utf-8")
    one = _both(log, 1)
    assert one[0].count("\n") > size // 3  # the log has records to compare
    for jobs in (2, 5, 16):
        assert len(chunks(str(log), log.stat().st_size, jobs, 1)) == jobs
        assert _both(log, jobs) == one, jobs


@pytest.mark.parametrize("path", [p for p in FIXTURES if "cri" not in p.name and "docker" not in p.name],
                         ids=lambda p: str(p.relative_to(LOGS)))
def test_jobs_on_every_fixture(tmp_path: Path, path: Path) -> None:
    log = tmp_path / path.name
    log.write_bytes(path.read_bytes() * 3)  # repeated: restarts, and the same incidents again past the edges
    assert _both(log, 7) == _both(log, 1)


def test_a_samples_json_has_every_field_of_the_record() -> None:
    """A field added to `ServerStats` reaches `scan --format jsonl` (its line just before its file key)."""
    out = io.StringIO()
    writer = JsonlWriter(out)
    writer([ServerStats(1.0, "s", Server.VLLM)], Server.VLLM)
    writer.flush()
    names = [n for n in ServerStats._fields if n != "line"]
    names.insert(names.index("file_key"), "line")
    assert list(json.loads(out.getvalue())) == ["type", *names]


_NUMBERS = st.one_of(st.none(), st.integers(-10**30, 10**30), st.floats(), st.booleans())
_TEXTS = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)


@given(numbers=st.lists(_NUMBERS, min_size=12, max_size=12), source=_TEXTS,
       texts=st.lists(st.one_of(st.none(), _TEXTS), min_size=2, max_size=2), server=st.sampled_from(list(Server)))
def test_a_sample_is_written_as_the_json_encoder_writes_it(numbers: list[object], source: str,
                                                             texts: list[str | None], server: Server) -> None:
    """A sample's JSON line (written from a template) is `json.dumps` of its fields in their documented order:
    numbers of every kind (NaN, infinities, bools, big ints), texts with terminal controls made inert."""
    ts, running, waiting, swapped, kv, pt, gt, hit, preempted, kv_tokens, offset, line = numbers
    path, key = texts
    sample = ServerStats(ts, source, server, running, waiting, swapped, kv, pt, gt, hit,  # type: ignore[arg-type]
                         preempted, kv_tokens, path, offset, key, line)  # type: ignore[arg-type]
    expected = {"type": "stats", "ts": ts, "source": inert(source), "server": server.value, "running": running,
                "waiting": waiting, "swapped": swapped, "kv_usage_ratio": kv, "prompt_tps": pt, "gen_tps": gt,
                "prefix_hit_ratio": hit, "preemptions": preempted, "kv_used_tokens": kv_tokens,
                "path": inert(path), "offset": offset, "line": line, "file_key": inert(key)}
    assert record_json(sample, Server.VLLM) == json.dumps(expected, ensure_ascii=False)
    assert record_json(sample, Server.VLLM) == json.dumps(expected, ensure_ascii=False)  # the texts kept
