"""What the parsers make of a few lines with the server unknown (`scan`'s default `--server auto`): the one reading
every batch's wording tests (tests/unit/test_fresh*_wordings.py) hold a rendered line to."""

from __future__ import annotations

from agent.records import Event, Record, Server
from parsers import make_parser


def records(lines: list[str]) -> list[Record]:
    parser = make_parser(Server.AUTO)
    out: list[Record] = []
    for line in lines:
        out += parser.feed(line)
    return out + parser.flush()


def kinds(lines: list[str]) -> list[str]:
    """The event kinds the lines give, each once, sorted."""
    return sorted({r.kind.value for r in records(lines) if isinstance(r, Event)})
