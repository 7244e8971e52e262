"""Shared helpers: the fixture directory and a fixed reference time so yearless stamps are stable."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from agent.records import Record
from parsers import Parser

LOGS = Path(__file__).resolve().parent.parent / "data" / "logs"
REF_TIME = datetime(2026, 11, 29, tzinfo=timezone.utc).timestamp()


def run(parser: Parser, lines: list[str]) -> list[Record]:
    """Feed every line, then flush: what a stream of these lines yields."""
    out: list[Record] = []
    for i, line in enumerate(lines):
        out.extend(parser.feed(line, None, "test.log", i))
    return out + parser.flush()


@pytest.fixture
def logs() -> Path:
    return LOGS
