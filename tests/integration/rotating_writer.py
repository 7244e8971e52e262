"""A log writer for the crash test: numbered lines, rotated every N lines, alternating logrotate styles.

Rotation styles alternate between rename + create and copytruncate (the writer reopens its handle after
a rename, as a server does on SIGHUP). Delete + recreate is not used: a file deleted while the agent is
down is gone for every tool. Writes come in bursts so the run lasts a few seconds and kills land
anywhere: mid-line, mid-burst, mid-rotation.
Usage: python -m tests.integration.rotating_writer PATH LINES EVERY
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

BURST = 1000


def main(path: Path, lines: int, every: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    rotations = 0
    for n in range(lines):
        if n and n % every == 0:
            rotations += 1
            rotated = path.with_name(f"{path.name}.{rotations}")
            if rotations % 2:
                path.rename(rotated)
                os.close(fd)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            else:
                shutil.copyfile(path, rotated)
                os.truncate(path, 0)
        line = f"n{n:06d} {'x' * (n % 50)}\n".encode()
        half = len(line) // 2 if n % 7 == 0 else len(line)  # some lines arrive in two writes
        os.write(fd, line[:half])
        if half < len(line):
            os.write(fd, line[half:])
        if n % BURST == BURST - 1:
            time.sleep(0.04)
    os.close(fd)
    print(rotations)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
