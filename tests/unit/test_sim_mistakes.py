"""`simulate` and ordinary mistakes: a taken port (vLLM's own 8000), a port out of range, an unwritable
--log, a host that does not resolve — one `error:` line each; malformed requests — a 400 each, never a 500
and never a traceback. The real CLI in a subprocess; the real server over loopback HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def simulate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent", "simulate", "--duration", "3", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


def one_error_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert all(w in done.stderr for w in words), done.stderr


def test_a_taken_port_is_one_line() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        one_error_line(simulate("--port", str(port)), f"127.0.0.1:{port}", "in use", "--port 0")


@pytest.mark.parametrize("port", ["65536", "70000", "-1"])
def test_a_port_out_of_range_is_one_line(port: str) -> None:
    one_error_line(simulate("--port", port), f"--port {port}", "65535")


def test_an_unwritable_log_is_one_line(tmp_path: Path) -> None:
    one_error_line(simulate("--port", "0", "--log", str(tmp_path / "missing" / "sim.log")), "--log", "cannot write")


def test_a_host_that_does_not_resolve_is_one_line() -> None:
    one_error_line(simulate("--port", "0", "--host", "no-such-host.invalid"), "no-such-host.invalid")


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agent", "simulate", "--port", str(port), "--duration", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "the simulator did not start"
            time.sleep(0.1)
    yield url, proc
    proc.terminate()
    proc.wait(10)


MALFORMED = [b'{"prompt": "hi", "max_tokens": 1e999}', b"[" * 100_000 + b"]" * 100_000,
             b'{"messages": [{"role": "user", "content": ' + b"[" * 50_000 + b"]" * 50_000 + b'}], "max_tokens": 4}',
             b"\xff\xfe not utf-8", b'["prompt", "max_tokens"]', b'{"prompt": "hi", "max_tokens": "many"}',
             b'{"prompt": "hi", "max_tokens": -5}', b'{"prompt": "hi", "max_tokens": NaN}', b""]


@pytest.mark.parametrize("body", MALFORMED, ids=range(len(MALFORMED)))
def test_a_malformed_request_is_a_400(served: tuple[str, subprocess.Popen[str]], body: bytes) -> None:
    url, _ = served
    request = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=10)
    assert answer.value.code == 400


def test_nothing_the_requests_sent_printed_a_traceback(served: tuple[str, subprocess.Popen[str]]) -> None:
    url, proc = served
    for body in MALFORMED:  # the same requests again, for a run of this test alone
        request = urllib.request.Request(url + "/v1/completions", data=body)
        try:
            urllib.request.urlopen(request, timeout=10).close()
        except urllib.error.HTTPError as error:
            assert error.code == 400
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err, err
