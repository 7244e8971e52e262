"""One refusal, one count, within a stream: the refusing component's message and the HTTP answer to it.

One refused request can leave two records in one stream: the engine's own refusal message (`queue_full`:
SGLang's "The request queue is full", vLLM's "Request queue full - rejecting", a client relaying Ollama's
"server busy, please try again") and the answer's status (`http_503` / `http_429`: uvicorn's access line
that follows it, or the status on the same client line). Summed, every refusal counted twice.

The rule: **the refusal message wins**. It names the limit that refused (`reason`: `max_queued_requests`,
`max_num_queued_reqs`, …), which is the knob the judge recommends; the status only says what the client
got. The access line is kept (nothing is lost: `scan` and the report still show it) with `count: 0` and
`counted_as: queue_full`, so every total — the judge's, the report's, `events_total` — sums it as none
(they all add `fields.count`). The two are paired when they are on the same line, or when the status line
comes after an unpaired message of the same status (or of none) within `PAIR_SECONDS` and `PAIR_LINES` of
the stream: uvicorn logs the response after the engine refused. Without a request id a refusal for another
reason in that span could be paired instead; the count stays right, only which line stands for it may not.

Across streams (a proxy's log in front, a client's log, the engine's `/metrics`) see agent/daemon/witnesses.py
and docs/rules.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.records import Event, EventKind, Record, event_with

PAIR_SECONDS = 2.0
PAIR_LINES = 20
_ANSWERS = (EventKind.HTTP_503, EventKind.HTTP_429)


@dataclass
class OneRefusal:
    """The refusal messages of one stream still waiting for their status line (a parser's state: two parsers
    that read the same lines compare equal)."""

    _unpaired: deque[tuple[float | None, object, int]] = field(  # (ts, status, line)
        default_factory=lambda: deque(maxlen=64))

    def once(self, records: Sequence[Record], line: int) -> list[Record]:
        """`records` (one line's or one block's, `line` the stream's line count) with each status line that
        answers a refusal message counted as none."""
        out = list(records)
        for r in out:
            if isinstance(r, Event) and r.kind is EventKind.QUEUE_FULL:
                self._unpaired.append((r.ts, r.fields.get("status"), line))
        if not self._unpaired:
            return out
        for i, r in enumerate(out):
            if isinstance(r, Event) and r.kind in _ANSWERS and self._take(r, line):
                out[i] = event_with(r, fields={**r.fields, "count": 0, "counted_as": "queue_full"})
        return out

    def _take(self, answer: Event, line: int) -> bool:
        """Pair `answer` with the oldest unpaired message it can answer (dropping those too old to)."""
        while self._unpaired and line - self._unpaired[0][2] > PAIR_LINES:
            self._unpaired.popleft()
        for j, (ts, status, _) in enumerate(self._unpaired):
            if answer.ts is not None and ts is not None and not 0 <= answer.ts - ts <= PAIR_SECONDS:
                continue
            if status is None or status == answer.fields.get("status"):
                del self._unpaired[j]
                return True
        return False
