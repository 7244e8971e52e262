"""A log writer for the crash test: numbered lines, rotated every N lines the way logrotate does it.

Every rotation shifts the numbered rotations first (`x.log.2` → `x.log.3`, `x.log.1` → `x.log.2`), then
rotates the live file to `x.log.1`, alternating rename + create (the writer reopens its handle, as a
server does on SIGHUP) and copytruncate. So a file the agent was still reading as `x.log.1` when it was
killed is `x.log.2` when it comes back. Lines are uvicorn access lines answering 503 (no time stamp),
and every tenth a vLLM warning stamped to the second (`deadline exceeded, generated_tokens=N`), so
two files started in the same second share stamps. Some lines arrive in two writes. Writes come in
bursts so kills land anywhere: mid-line, mid-burst, mid-rotation. After each rotation the count is
written to PROGRESS (the test waits on it to rotate while the agent is down).
Usage: python -m tests.integration.rotating_writer PATH LINES EVERY PROGRESS
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

BURST = 1000
PAUSE_SECONDS = 0.1  # between bursts: 100,000 lines take about 10 s, so kills land all through them


def text(n: int) -> str:
    if n % 10 == 3:
        stamp = time.strftime("%m-%d %H:%M:%S")
        return (f"(APIServer pid=851) WARNING {stamp} [serving.py:88] request cmpl-{n}: deadline exceeded, "
                f"generated_tokens={n}\n")
    return (f'(APIServer pid=851) INFO:     127.0.0.1:40000 - "POST /v1/n{n:06d} HTTP/1.1" 503 Service '
            f"Unavailable{' ' + 'x' * (n % 37) if n % 37 else ''}\n")


def shift(path: Path) -> None:
    top = 1
    while path.with_name(f"{path.name}.{top}").exists():
        top += 1
    for i in range(top - 1, 0, -1):
        path.with_name(f"{path.name}.{i}").rename(path.with_name(f"{path.name}.{i + 1}"))


def main(path: Path, lines: int, every: int, progress: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    rotations = 0
    for n in range(lines):
        if n and n % every == 0:
            rotations += 1
            shift(path)
            rotated = path.with_name(f"{path.name}.1")
            if rotations % 2:
                path.rename(rotated)
                os.close(fd)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            else:
                shutil.copyfile(path, rotated)
                os.truncate(path, 0)
            temp = progress.with_suffix(".tmp")
            temp.write_text(str(rotations))
            temp.replace(progress)
        line = text(n).encode()
        half = len(line) // 2 if n % 7 == 0 else len(line)  # some lines arrive in two writes
        os.write(fd, line[:half])
        if half < len(line):
            os.write(fd, line[half:])
        if n % BURST == BURST - 1:
            time.sleep(PAUSE_SECONDS)
    os.close(fd)
    print(rotations)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
