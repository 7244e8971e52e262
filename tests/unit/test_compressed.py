"""Finishing a rotation from its archive is bounded: a .gz/.xz/.bz2 that expands a thousandfold (a file
of zeros after the log's first lines) is decompressed at most MAX_RATIO × its size, and at most
MAX_TAIL_BYTES are kept after the cursor; an ordinary archive is finished whole, from the cursor on."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.bookkeeping import Cursor
from agent.sources import compressed
from agent.sources.compressed import decompress
from agent.sources.identity import FINGERPRINT_BYTES, fingerprint, near_fingerprint

LINES = b"".join(b"INFO 11-29 09:00:%02d [api.py:1] line %04d of the log before the rotation\n" % (i % 60, i)
                 for i in range(2000))
WRITERS: dict[str, Callable[[str], object]] = {
    ".gz": lambda p: gzip.open(p, "wb", compresslevel=6),  # noqa: SIM115 - entered by the caller
    ".xz": lambda p: lzma.open(p, "wb", preset=1),  # noqa: SIM115
    ".bz2": lambda p: bz2.open(p, "wb")}  # noqa: SIM115


def _cursor(plain: Path, offset: int) -> Cursor:
    fd = os.open(plain, os.O_RDONLY)
    try:
        return Cursor("vllm", str(plain), 1, 2, fingerprint(fd, FINGERPRINT_BYTES), offset, "1:2:k", 0.0,
                      near_fingerprint(fd, offset))
    finally:
        os.close(fd)


def _archive(tmp_path: Path, suffix: str, body: bytes, zeros: int) -> Path:
    plain = tmp_path / "plain.log"
    plain.write_bytes(body)
    path = tmp_path / f"vllm.log.1{suffix}"
    with WRITERS[suffix](str(path)) as out:  # type: ignore[attr-defined]
        out.write(body)
        chunk = b"\0" * (1 << 20)
        for _ in range(zeros >> 20):
            out.write(chunk)
    return plain


@pytest.mark.parametrize("suffix", [".gz", ".xz", ".bz2"])
def test_an_ordinary_archive_is_finished_from_the_cursor(tmp_path: Path, suffix: str) -> None:
    plain = _archive(tmp_path, suffix, LINES, 0)
    cursor = _cursor(plain, 1000 * len(LINES) // 2000)
    fd = decompress(str(tmp_path / f"vllm.log.1{suffix}"), suffix, cursor)
    assert fd is not None
    try:
        assert os.fstat(fd).st_size == len(LINES)
        assert os.pread(fd, len(LINES), cursor.offset) == LINES[cursor.offset:]
    finally:
        os.close(fd)


@pytest.mark.parametrize("suffix", [".gz", ".bz2"])
def test_a_bomb_is_cut_at_the_ratio(tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compressed, "MAX_TAIL_BYTES", 8 << 20)
    plain = _archive(tmp_path, suffix, LINES, 96 << 20)  # 96 MiB of zeros: hundreds of KiB compressed
    archive = tmp_path / f"vllm.log.1{suffix}"
    cursor = _cursor(plain, len(LINES) // 2)
    fd = decompress(str(archive), suffix, cursor)
    assert fd is not None  # the log's own bytes are still finished
    try:
        size = os.fstat(fd).st_size
        assert os.pread(fd, len(LINES) - cursor.offset, cursor.offset) == LINES[cursor.offset:]
        assert size <= min(compressed.MAX_RATIO * max(archive.stat().st_size, 1 << 16), cursor.offset + (8 << 20))
    finally:
        os.close(fd)


def test_a_cursor_beyond_the_budget_is_not_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compressed, "MAX_DECOMPRESSED_BYTES", len(LINES) // 4)
    plain = _archive(tmp_path, ".gz", LINES, 0)
    assert decompress(str(tmp_path / "vllm.log.1.gz"), ".gz", _cursor(plain, len(LINES) // 2)) is None
