"""One engine, two witnesses: its log and its `/metrics`, counted once.

A scrape target named like a log source's engine (`scrape[].name` = `sources[].name`, or
`<name>/<identity>` for one file of a glob) feeds the same engine: its load samples interleave with the
log's (both sample the same running, waiting and KV usage), its capacity facts join the log's. Counts
must not add up twice, so for each event kind the scrape counts exactly from the engine's own counters
(`Scraper.counted()`: preemptions, admission rejections, the queue becoming non-empty), the scrape is
the one witness: the log's events of that kind, and the preemption count its stats lines carry, are
dropped for that engine. A refusal is one occurrence whichever witness saw it: where the scrape counts the
engine's admission rejections (`queue_full`, with the count), the log's access lines for the same refusals
(`http_503`, TGI's `http_429`) are dropped too — a real vLLM's 94 refusals were once 94 `http_503` plus
`queue_full` events carrying 94. The log still gives everything the scrape cannot (OOMs, timeouts, engine
deaths, HTTP statuses, start-up facts), and while a target has never answered nothing is dropped.
docs/sources.md ("One engine, two witnesses") says the same for operators. Inside one log, a refusal's
message and its status line are one refusal too (parsers/refusals.py); docs/rules.md has the table of
which witness counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agent.records import Event, EventKind, Record, ServerStats

# The log's kinds that stand for the occurrences a scraped kind counts (a refusal's access line).
SAME_OCCURRENCES: dict[EventKind, frozenset[EventKind]] = {
    EventKind.QUEUE_FULL: frozenset({EventKind.QUEUE_FULL, EventKind.HTTP_503, EventKind.HTTP_429})}


def counted_once(records: Iterable[Record], scraped: Mapping[str, frozenset[EventKind]]) -> list[Record]:
    """The log's `records` without what a scrape target of the same engine already counts."""
    out: list[Record] = []
    for record in records:
        kinds = scraped.get(record.source)
        if kinds:
            if isinstance(record, Event) and any(
                    record.kind is k or record.kind in SAME_OCCURRENCES.get(k, ()) for k in kinds):
                continue
            if isinstance(record, ServerStats) and record.preemptions is not None and EventKind.PREEMPTION in kinds:
                record = record._replace(preemptions=None)
        out.append(record)
    return out
