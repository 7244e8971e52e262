"""The metrics port under abuse: idle sockets, slowloris, garbage and slow readers never starve a scraper,
each ends under a whole-request deadline, is counted in deepinfer_exporter_connections_total, and nothing
is logged as a traceback. Real sockets on loopback against the real server."""

from __future__ import annotations

import contextlib
import gzip
import logging
import resource
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent.prom import exposition_samples
from agent.sinks.exporter import MetricsServer, Snapshot

SNAP = Snapshot(version="9.9", started_at=1.0, totals={("events_total", ("vllm", "vllm", "oom")): 3.0})


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)
    return result


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer(lambda: SNAP, "127.0.0.1", 0, slots=64, read_seconds=1.0, request_seconds=2.0)
    srv.start()
    yield srv
    srv.close()


def scrape(port: int, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        return str(response.read().decode())


def outcome(server: MetricsServer, name: str) -> float:
    samples = exposition_samples(scrape(server.port)).get("deepinfer_exporter_connections", [])
    return sum(v for labels, v in samples if labels["outcome"] == name)


def _descriptors(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"needs {needed} file descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


class Slowloris:
    """Sockets that send a request head one byte at a time, a byte every 0.2 s, never finishing it."""

    def __init__(self, port: int, n: int) -> None:
        self.socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]
        self.closed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, daemon=True)
        self._thread.start()

    def _drip(self) -> None:
        head = b"GET /metrics HTTP/1.1\r\nX-a: " + b"a" * 10_000
        i = 0
        while not self._stop.is_set() and self.socks:
            for sock in list(self.socks):
                try:
                    sock.send(head[i:i + 1])
                except OSError:
                    self.socks.remove(sock)
                    sock.close()
                    self.closed += 1
            i += 1
            time.sleep(0.2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in self.socks:
            sock.close()


class Flood:
    """`idle` silent sockets and `slow` slowloris ones held open for as long as the flood lasts: each one
    the server cuts off is replaced at once, so the port is never free of them."""

    def __init__(self, port: int, idle: int, slow: int) -> None:
        self.port, self.cut = port, 0
        self.idle = [self._connect() for _ in range(idle)]
        self.loris = Slowloris(port, slow)
        self._slow = slow
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)
        self._thread.start()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        sock.setblocking(False)
        return sock

    def _hold(self) -> None:
        while not self._stop.wait(0.2):
            for i, sock in enumerate(self.idle):
                try:
                    closed = sock.recv(1) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    sock.close()
                    self.cut += 1
                    with contextlib.suppress(OSError):
                        self.idle[i] = self._connect()
            if not self.loris.socks:
                self.cut += self.loris.closed
                self.loris.close()
                self.loris = Slowloris(self.port, self._slow)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.loris.close()
        for sock in self.idle:
            sock.close()


def test_a_scraper_is_answered_through_1000_idle_sockets_and_slowloris(server: MetricsServer,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    _descriptors(1400)
    caplog.set_level(logging.DEBUG)
    idle: list[socket.socket] = []
    loris = Slowloris(server.port, 40)
    try:
        for _ in range(1000):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        for _ in range(20):  # each scrape connects after the flood: it takes the slot of the oldest waiter
            assert ('deepinfer_events_total{engine="vllm",kind="oom",server="vllm",source="vllm"} 3.0'
                    in scrape(server.port))
        # Slowloris keeps sending, so a per-recv timeout would never fire; the head's deadline does.
        wait_for("every slowloris socket cut off", lambda: loris.closed == 40)
        # Every idle and slow socket ended, by its deadline or by eviction; the port held at most 2 × 64.
        wait_for("all 1,040 counted", lambda: outcome(server, "timed_out") + outcome(server, "evicted") == 1040)
        assert outcome(server, "evicted") >= 1040 - 2 * 64
        assert outcome(server, "served") >= 20
    finally:
        loris.close()
        for sock in idle:
            sock.close()
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


def test_an_unfinished_head_times_out_as_a_whole_and_is_counted(server: MetricsServer) -> None:
    loris = Slowloris(server.port, 3)
    try:
        wait_for("the slow heads cut off", lambda: loris.closed == 3)
        assert outcome(server, "timed_out") == 3
    finally:
        loris.close()


def test_a_client_that_never_reads_its_answer_is_cut_off(server: MetricsServer) -> None:
    """The answer is bigger than the socket buffers; the client never reads it, so the whole-request
    deadline ends it."""
    big = Snapshot(version="9.9", started_at=1.0,
                   totals={("events_total", (f"s{i}", "vllm", "oom")): 1.0 for i in range(20_000)})
    srv = MetricsServer(lambda: big, "127.0.0.1", 0, slots=8, read_seconds=1.0, request_seconds=1.0)
    srv.start()
    try:
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_for("the slow reader counted", lambda: srv.stats.outcomes["timed_out"] == 1)
        sock.close()
    finally:
        srv.close()


@pytest.mark.parametrize("garbage", [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 40 + b"\r\n\r\n",
                                     b"GET\r\n\r\n", b"GET metrics HTTP/1.1\r\n\r\n",
                                     b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"y" * 20_000 + b"\r\n\r\n",
                                     b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n"])
def test_garbage_gets_400_and_is_counted_as_malformed(server: MetricsServer, garbage: bytes) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(garbage)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert outcome(server, "malformed") == 1
    assert "deepinfer_events_total" in scrape(server.port)


def test_gzip_and_openmetrics_are_still_negotiated(server: MetricsServer) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/metrics", headers={
        "Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert gzip.decompress(response.read()).decode().endswith("# EOF\n")


def test_the_port_is_released_on_close() -> None:
    srv = MetricsServer(lambda: SNAP, "127.0.0.1", 0)
    srv.start()
    port = srv.port
    srv.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    again = MetricsServer(lambda: SNAP, "127.0.0.1", port)  # the same port binds again
    again.close()
