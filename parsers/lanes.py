"""The batch lanes of a stream parser: many lines of one plain file in one call, as `feed` would read them.

`scan` hands a plain file's raw lines over in batches (`feed_lines`, records located by line number), the
daemon a run of one file's decoded lines (`feed_texts`). Both go through `_run`, which settles the commonest
line of a busy log — an access line that is not a refusal — without leaving the loop; a server's parser
may settle more there (parsers/vllm_stats.py: the stats line). The same records and state as feeding the
lines one by one (tests/unit/test_feed_lines.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from agent.records import Record

Locate = Callable[[list[Record], int, int], list[Record]]  # (records, offset of their line, newlines before it)


def unlocated(records: list[Record], offset: int, before: int) -> list[Record]:
    """The `Locate` of a stream without line numbers (the daemon's): records as they are."""
    return records


def decoded(raws: Sequence[bytes]) -> list[str]:
    """The text of each raw line, without its line ending (invalid UTF-8 replaced, as a file's reader does)."""
    return [raw.decode("utf-8", "replace").rstrip("\r\n") for raw in raws]


class Lanes:
    """`feed_lines` and `feed_texts` in terms of the parser's `feed` and `_settles_access` (parsers/base.py)."""

    def feed(self, text: str, ts: float | None = None, path: str | None = None,
             offset: int | None = None) -> list[Record]:
        raise NotImplementedError

    def _settles_access(self, text: str) -> bool:
        raise NotImplementedError

    def feed_lines(self, raws: Sequence[bytes], path: str | None, offset: int, before: int,
                   locate: Locate) -> list[Record]:
        """`feed` for a batch of a plain file's raw lines (newlines included), the first at byte `offset` after
        `before` newlines: all their records, located by `locate` (`scan`'s path)."""
        offsets = list(itertools.accumulate(map(len, raws), initial=offset))
        offsets.pop()  # the offset after the batch
        return self._run(decoded(raws), offsets, path, before, locate)

    def feed_texts(self, texts: Sequence[str], offsets: Sequence[int], path: str | None) -> list[Record]:
        """`feed` for a run of one plain file's lines (decoded, without their newlines), each at its offset: the
        daemon's path. Records come out as `feed` gives them (no line numbers)."""
        return self._run(texts, offsets, path, None, None)

    def _run(self, texts: Sequence[str], offsets: Sequence[int], path: str | None, before: int | None,
             locate: Locate | None) -> list[Record]:
        """The batch lane: the same records and state as feeding the lines one by one
        (tests/unit/test_feed_lines.py); what it saves is the calls on the commonest line of a busy log, an
        access line that is not a refusal, which is settled without leaving the loop. With `before` (the
        newlines before the first line), records are located by line number with `locate`."""
        out: list[Record] = []
        feed = self.feed
        place = locate or unlocated
        n = before or 0
        for text, offset in zip(texts, offsets, strict=True):
            if not self._settles_access(text) and (records := feed(text, None, path, offset)):
                out += place(records, offset, n)
            n += 1
        return out
