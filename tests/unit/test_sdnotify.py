"""The notify protocol against a real AF_UNIX datagram socket, as systemd listens."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.daemon.sdnotify import Notifier


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def test_ready_watchdog_stopping(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "20000000"})
    assert notifier.enabled and notifier.watchdog_interval_seconds == 10
    assert notifier.ready("watching 2 sources")
    assert sock.recv(4096) == b"READY=1\nSTATUS=watching 2 sources"
    assert notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notifier.stopping()
    assert sock.recv(4096) == b"STOPPING=1\nSTATUS=stopping"


def test_abstract_namespace_socket() -> None:
    name = f"deepinfer-test-{id(object())}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).ready("up")
        assert sock.recv(4096).startswith(b"READY=1")
    finally:
        sock.close()


def test_without_systemd_everything_is_a_no_op(tmp_path: Path) -> None:
    quiet = Notifier({})
    assert not quiet.enabled and quiet.watchdog_interval_seconds is None
    assert quiet.ready("x") is False
    # A socket that went away is reported, never raised.
    assert Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")}).watchdog() is False
