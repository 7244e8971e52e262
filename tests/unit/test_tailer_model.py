"""Model-based test: random writes, partial writes, rotations, truncations, deletions and tailer crashes.

The model is the multiset of lines an ideal tailer must deliver. A partial line is completed by the next
write, or delivered as it is once its file has been rotated away and drained. Deleting a file loses what
the tailer has not read yet (no tool can read a deleted file it does not hold), and a crash before the
deleted file's last unfinished line is flushed loses that line, so deletion is only drawn once the
tailer has caught up and no line is unfinished; every other operation may happen with unread bytes outstanding.
A crash drops the tailer without committing anything it still held; the next one resumes from the store.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agent.sinks.store import Store
from agent.sources.tailer import TailOptions
from tests.conftest import Follow


class TailerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tailmodel-"))
        self.path = self.dir / "app.log"
        self.store = Store.open(":memory:")
        options = TailOptions(start_at="beginning", rotate_wait_seconds=2.0, partial_flush_seconds=1e9)
        self.follow = Follow(self.store, str(self.path), options)
        self.now = 0.0
        self.counter = 0
        self.generation = 0
        self.expected: Counter[str] = Counter()
        self.fragment = ""  # written without its newline yet, in the live file
        self.synced = True
        self.follow.step(self.now)  # the agent is running before the workload writes its first line

    def _append(self, data: str) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(data)
        self.synced = False

    def _rotated_name(self) -> Path:
        self.generation += 1
        return self.path.with_name(f"app.log.{self.generation}")

    def _orphan_fragment(self) -> None:
        """The live file's unfinished line will never be finished: it is delivered as it is."""
        if self.fragment:
            self.expected[self.fragment] += 1
            self.fragment = ""

    @rule(count=st.integers(1, 5), crlf=st.booleans())
    def write(self, count: int, crlf: bool) -> None:
        written = []
        for _ in range(count):
            self.counter += 1
            written.append(f"n{self.counter:06d}")
        self._append("".join(line + ("\r\n" if crlf else "\n") for line in written))
        written[0] = self.fragment + written[0]
        self.fragment = ""
        self.expected.update(written)

    @rule()
    def partial_write(self) -> None:
        self.counter += 1
        piece = f"p{self.counter:06d}-"
        self._append(piece)
        self.fragment += piece

    @rule()
    def rotate_rename(self) -> None:
        if self.path.exists():
            self.path.rename(self._rotated_name())
            self._orphan_fragment()
        self.path.touch()

    @rule()
    def copytruncate(self) -> None:
        if self.path.exists():
            shutil.copyfile(self.path, self._rotated_name())
            os.truncate(self.path, 0)
            self._orphan_fragment()

    @precondition(lambda self: self.synced and not self.fragment)
    @rule()
    def delete(self) -> None:
        if self.path.exists():
            self.path.unlink()
            self._orphan_fragment()

    @rule()
    def poll(self) -> None:
        self.now += 1.0
        self.follow.step(self.now)
        self.synced = True

    @rule()
    def crash_and_restart(self) -> None:
        self.follow.tailer.close(self.now)  # closes handles; its batch is never committed, as in a crash
        self.follow.restart()
        self.synced = False

    @invariant()
    def never_twice_never_invented(self) -> None:
        delivered = Counter(self.follow.texts())
        assert all(n == 1 for n in delivered.values()), delivered.most_common(3)
        extra = delivered - self.expected
        assert not extra, extra

    def teardown(self) -> None:
        try:
            for _ in range(4):  # let rotate_wait pass: drained files are closed, their last lines delivered
                self.now += 1.0
                self.follow.step(self.now)
            delivered = Counter(self.follow.texts())
            assert delivered == self.expected, (self.expected - delivered, delivered - self.expected)
            by_file: dict[str, list[tuple[int, str]]] = defaultdict(list)
            for line in self.follow.delivered:
                by_file[line.file_key].append((line.offset, line.text))
            for lines in by_file.values():  # in order per file: each line's first number grows with its offset
                texts = [text for _, text in sorted(lines)]
                numbers = [int(text[1:7]) for text in texts]
                assert numbers == sorted(numbers), texts
            self.follow.tailer.close(self.now)
        finally:
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)


EXAMPLES = int(os.environ.get("TAILER_MODEL_EXAMPLES", "150"))  # raise by hand for a deeper search
TailerMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=40, deadline=None)
test_tailer_model = TailerMachine.TestCase
