"""The metrics port's HTTP/1 server: one event loop on one thread, bounded in time, slots and bytes.

Why not `wsgiref` with a thread per connection: its timeout applies to each `recv`, so a client that sends
one byte every few seconds (slowloris) holds a thread for ever, and a fixed pool of threads is exhausted by
as many idle sockets. Here every connection lives under two deadlines — the request head must arrive whole
within `read_seconds`, and the whole exchange (head, answer, the client reading it) ends within
`request_seconds` — and when every slot is taken a new connection evicts the oldest one still waiting for
its head. A scraper sends its request the moment it connects, so it is never the oldest waiter and idle or
slow clients cannot starve it. Each connection is answered once (`Connection: close`).

What went wrong is counted in `ServingStats` (exported by the exporter as self-metrics) and logged as one
line at most once a minute, never as a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("agent.metrics")

MAX_HEAD_BYTES = 8192  # a scraper's request line and headers are a few hundred bytes
READ_SECONDS = 5.0  # the whole request head, not each recv
REQUEST_SECONDS = 10.0  # head + answer + the client reading it (Prometheus's default scrape_timeout)
MAX_SLOTS = 4096
GRACE_SECONDS = 0.25  # a connection this young is not evicted while there is room to spare
LOG_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # names lower-cased


@dataclass(frozen=True)
class Response:
    status: str  # "200 OK"
    headers: list[tuple[str, str]]
    body: bytes


Responder = Callable[[Request], Response]


OUTCOMES = ("served", "timed_out", "evicted", "refused", "malformed", "reset")


@dataclass
class ServingStats:
    """Connections by how they ended, and failed accepts (out of descriptors): plain ints, one writer."""

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    accept_errors: int = 0


def default_slots() -> int:
    """A quarter of the open-file limit (the tailer needs the rest), between 8 and MAX_SLOTS."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return MAX_SLOTS
    return max(8, min(MAX_SLOTS, int(soft) // 4))


def _bind(host: str, port: int) -> socket.socket:
    """Bind now, so a taken port fails the caller at once (OSError), before anything starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class _Conn:
    __slots__ = ("evicted", "opened", "waiting", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.opened = time.monotonic()
        self.waiting = True  # still reading its request head: the only state that may be evicted
        self.writer = writer
        self.evicted = False


class BoundedServer:
    """Serve `respond` on host:port from a background thread; port 0 picks a free port."""

    def __init__(self, respond: Responder, host: str, port: int, *, slots: int | None = None,
                 read_seconds: float = READ_SECONDS, request_seconds: float = REQUEST_SECONDS) -> None:
        self._respond = respond
        self._sock = _bind(host, port)
        self.host, self.port = host, int(self._sock.getsockname()[1])
        self.slots = slots if slots is not None else default_slots()
        self.read_seconds, self.request_seconds = read_seconds, request_seconds
        self.stats = ServingStats()
        self._conns: dict[_Conn, None] = {}  # insertion order is age: the first waiting one is the oldest
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="metrics", daemon=True)
        self._last_logged = -LOG_EVERY_SECONDS

    def start(self) -> None:
        ready = threading.Event()
        self._ready = ready
        self._thread.start()
        ready.wait(10)

    def close(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(stopping.set)
            self._thread.join(10)
        self._sock.close()

    # --- the loop thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(self._loop_error)
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._serve, sock=self._sock, limit=MAX_HEAD_BYTES, backlog=1024)
        self._ready.set()
        await self._stopping.wait()
        server.close()
        for conn in list(self._conns):
            conn.writer.transport.abort()
        await asyncio.sleep(0)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio reports a failed accept (EMFILE) here; say it in one line, not a traceback."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and "accept" in str(context.get("message", "")):
            self.stats.accept_errors += 1
        self._say(f"{context.get('message', 'error')}: {exc}" if exc else str(context.get("message")))

    def _say(self, what: str) -> None:
        now = time.monotonic()
        if now - self._last_logged >= LOG_EVERY_SECONDS:
            self._last_logged = now
            log.warning("metrics server: %s (deepinfer_exporter_* counts these; said once a minute)", what)

    def _admit(self, conn: _Conn) -> bool:
        """Take a slot, evicting the oldest connection still waiting for its head when all are taken.

        A connection younger than GRACE_SECONDS is spared while there is room for twice the slots: its head
        may already be in the socket, not yet read (a batch of accepts runs before any read), and a scraper
        must not lose its slot to a flood that arrived in the same batch.
        """
        if len(self._conns) >= self.slots:
            full = len(self._conns) >= 2 * self.slots
            oldest = next((c for c in self._conns if c.waiting), None)  # dict order is age
            if oldest is None:
                if full:  # every slot is answering: this one is turned away
                    return False
            elif full or conn.opened - oldest.opened >= GRACE_SECONDS:
                oldest.evicted = True
                del self._conns[oldest]
                oldest.writer.transport.abort()
        self._conns[conn] = None
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer)
        if not self._admit(conn):
            self._end(conn, "refused")
            return
        writer.transport.set_write_buffer_limits(high=0)  # drain() returns once the kernel holds every byte
        outcome = "served"
        try:
            outcome = await asyncio.wait_for(self._exchange(conn, reader), self.request_seconds)
        except asyncio.TimeoutError:
            outcome = "timed_out"
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            outcome = "reset"
        except Exception as exc:  # a bug in rendering must not end the server, nor print a traceback
            self._say(f"answering a request failed: {exc!r}")
            outcome = "reset"
        finally:
            self._conns.pop(conn, None)
            self._end(conn, "evicted" if conn.evicted else outcome)

    async def _exchange(self, conn: _Conn, reader: asyncio.StreamReader) -> str:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.read_seconds)
        except (asyncio.LimitOverrunError, ValueError):
            head = b""  # a head over MAX_HEAD_BYTES
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                return "reset"  # connected and left: a port check, not a fault
            head = b""
        conn.waiting = False
        request = parse_head(head)
        response = self._respond(request) if request else Response("400 Bad Request", [], b"bad request\n")
        conn.writer.write(_encode(response))
        await conn.writer.drain()
        return "served" if request else "malformed"

    def _end(self, conn: _Conn, outcome: str) -> None:
        self.stats.outcomes[outcome] += 1
        if outcome == "served":
            conn.writer.close()  # the answer is already in the kernel's buffer (no write buffer here)
        else:
            conn.writer.transport.abort()


def parse_head(head: bytes) -> Request | None:
    """The request line and headers of an HTTP/1 request; None when it is not one."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        return None
    method, target, _version = parts
    if not target.startswith("/"):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    url = urllib.parse.urlsplit(target)
    return Request(method, urllib.parse.unquote(url.path), url.query, headers)


def _encode(response: Response) -> bytes:
    names = {name.lower() for name, _ in response.headers}
    lines = [f"HTTP/1.1 {response.status}"]
    lines += [f"{name}: {value}" for name, value in response.headers if name.lower() != "content-length"]
    lines.append(f"Content-Length: {len(response.body)}")
    if "connection" not in names:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body
