"""Golden fixtures: every saved log under tests/data/logs classifies exactly as its `.expected.json` says.

The fixtures are real lines from the reference and from public issues (see tests/data/logs/README.md),
one file per server and version era, plus the same vLLM log in a Docker json-file envelope (long lines
split by the runtime) and the same SGLang log in CRI framing. Set DEEPINFER_REGEN=1 to rewrite the
expected files after a deliberate change, then review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent.offline.saved import FileScan, scan_stream
from agent.records import CapacityFact, Event, ServerStats

from .conftest import LOGS, REF_TIME

FIXTURES = sorted(p for p in LOGS.rglob("*.log"))


def _compact(scan: FileScan) -> dict[str, Any]:
    records: list[dict[str, Any]] = []
    for r in scan.records:
        if isinstance(r, Event):
            records.append({"event": r.kind.value, "phase": r.phase.value, "severity": r.severity.value,
                            "fields": dict(r.fields), "ts": r.ts, "offset": r.offset})
        elif isinstance(r, ServerStats):
            records.append({"stats": {k: v for k, v in (("running", r.running), ("waiting", r.waiting),
                                                        ("swapped", r.swapped), ("kv", r.kv_usage_ratio),
                                                        ("preemptions", r.preemptions)) if v is not None},
                            "ts": r.ts})
        elif isinstance(r, CapacityFact):
            records.append({"fact": r.name, "value": r.value})
    return {"format": scan.fmt, "server": scan.server.value, "records": records}


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(LOGS)))
def test_fixture_classifies_as_expected(path: Path) -> None:
    with path.open("rb") as handle:
        got = _compact(scan_stream(handle, path.name, ref_time=REF_TIME))
    expected_path = path.with_suffix(".expected.json")
    if os.environ.get("DEEPINFER_REGEN"):
        expected_path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    expected = json.loads(expected_path.read_text(encoding="utf-8"))
    assert got == expected


def test_every_event_kind_is_covered_by_some_fixture() -> None:
    kinds: set[str] = set()
    for path in LOGS.rglob("*.expected.json"):
        kinds |= {r["event"] for r in json.loads(path.read_text())["records"] if "event" in r}
    from agent.records import EventKind
    assert kinds == {k.value for k in EventKind}
