"""The one HTTP client adapter: async POSTs for the load test, a plain GET for scraping `/metrics`.

The only module that imports the client side of `aiohttp`. Everything above it sees three outcomes:
a `Reply` (any status, the caller decides what a 429 means), `HttpTimeoutError` (no complete answer within
the deadline) or `HttpConnectionError` (refused, reset, closed mid-body). Proxies from the environment
are never used: the targets are engines on this host or its network, never the internet.

Why aiohttp and not httpx: on the 2-core development machine, against a trivially fast loopback
endpoint, httpx's AsyncClient topped out near 300 requests/s while aiohttp's client did about 2,800
(hey: about 3,800). The load test must not be its own bottleneck below ~500 requests/s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp

from agent.errors import AgentError

_USER_AGENT = "deepinfer-agent"
MAX_BODY_BYTES = 16 << 20
MAX_LINE_BYTES = 1 << 20


class HttpTimeoutError(AgentError):
    """No complete answer within the deadline (connect, headers or body)."""


class HttpBodyTooLargeError(AgentError):
    """The answer was longer than the caller allows."""


class HttpConnectionError(AgentError):
    """The connection could not be made, or broke before the answer was complete."""


@dataclass(frozen=True)
class Reply:
    """An answer: status, body (empty when the caller consumed it line by line) and seconds to headers."""

    status: int
    body: bytes
    headers_seconds: float


class AsyncClient:
    """A pooled client for one load-test run: `async with AsyncClient(...) as client: await client.post(...)`.

    `max_connections` bounds the pool (the load level); `timeout_seconds` is each request's whole
    deadline; `headers` go with every request (e.g. an Authorization header the caller built).
    """

    def __init__(self, *, max_connections: int = 100, timeout_seconds: float = 60.0,
                 headers: Mapping[str, str] | None = None) -> None:
        self._limit = max_connections
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._headers = {"User-Agent": _USER_AGENT, **(headers or {})}
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AsyncClient:
        connector = aiohttp.TCPConnector(limit=self._limit, limit_per_host=self._limit, force_close=False)
        self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, headers=self._headers,
                                              trust_env=False)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, url: str, payload: Mapping[str, Any],
                   on_line: Callable[[bytes], None] | None = None) -> Reply:
        """POST `payload` as JSON. With `on_line`, the body is handed over line by line as it arrives
        (server-sent events) and not kept; otherwise it is read whole (up to 16 MiB)."""
        if self._session is None:
            raise RuntimeError("AsyncClient used outside `async with`")
        started = time.perf_counter()
        try:
            async with self._session.post(url, json=payload) as response:
                headers_at = time.perf_counter() - started
                if on_line is None:
                    return Reply(response.status, await _body(response), headers_at)
                await _lines(response, on_line)
                return Reply(response.status, b"", headers_at)
        except (asyncio.TimeoutError, TimeoutError) as exc:  # aiohttp's ServerTimeoutError is one too
            raise HttpTimeoutError(f"{url}: no complete answer within {self._timeout.total:g} s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise HttpConnectionError(f"{url}: {type(exc).__name__}: {exc}") from exc

    async def get(self, url: str, *, max_body_bytes: int = MAX_BODY_BYTES) -> Reply:
        """GET `url`, body read whole (up to `max_body_bytes`; more is an HttpBodyTooLargeError)."""
        if self._session is None:
            raise RuntimeError("AsyncClient used outside `async with`")
        started = time.perf_counter()
        try:
            async with self._session.get(url) as response:
                return Reply(response.status, await _body(response, max_body_bytes), time.perf_counter() - started)
        except (asyncio.TimeoutError, TimeoutError) as exc:
            raise HttpTimeoutError(f"{url}: no complete answer within {self._timeout.total:g} s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise HttpConnectionError(f"{url}: {type(exc).__name__}: {exc}") from exc


async def _body(response: aiohttp.ClientResponse, limit: int = MAX_BODY_BYTES) -> bytes:
    """The whole body, refused past `limit` (a wrong URL serving a file must not fill memory)."""
    # Content-Length counts the bytes on the wire: with a Content-Encoding (prometheus_client gzips
    # /metrics for any client that accepts it, and aiohttp accepts and inflates it) there are more.
    exact = response.content_length is not None and "Content-Encoding" not in response.headers
    if exact and response.content_length is not None and response.content_length > limit:
        raise HttpBodyTooLargeError(f"response larger than {limit} bytes")
    if exact and response.content_length is not None:
        return await response.content.readexactly(response.content_length)
    parts: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise HttpBodyTooLargeError(f"response larger than {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def _lines(response: aiohttp.ClientResponse, on_line: Callable[[bytes], None],
                 limit: int = MAX_LINE_BYTES) -> None:
    """The body handed over line by line as it arrives, none kept; a line over `limit` is refused
    (aiohttp's own line reader raises its own error past 128 KiB, and a stream's lines are a few KiB)."""
    held = b""
    async for chunk in response.content.iter_any():
        lines = (held + chunk).split(b"\n")
        held = lines.pop()
        if len(held) > limit:
            raise HttpBodyTooLargeError(f"a streamed line longer than {limit} bytes")
        for line in lines:
            if len(line) > limit:
                raise HttpBodyTooLargeError(f"a streamed line longer than {limit} bytes")
            on_line(line + b"\n")
    if held:
        on_line(held)


def get(url: str, *, timeout_seconds: float = 2.0, headers: Mapping[str, str] | None = None,
        max_body_bytes: int = MAX_BODY_BYTES) -> Reply:
    """One blocking GET (a scrape of `/metrics`): its own short-lived event loop and connection.

    Call it from a thread that is not running an event loop (the daemon's loop, or `asyncio.to_thread`).
    """

    async def once() -> Reply:
        async with AsyncClient(max_connections=1, timeout_seconds=timeout_seconds, headers=headers) as client:
            return await client.get(url, max_body_bytes=max_body_bytes)

    return asyncio.run(once())
