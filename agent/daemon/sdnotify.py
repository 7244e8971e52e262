"""systemd's notify protocol: one datagram per state change to $NOTIFY_SOCKET. No dependency needed.

`Type=notify` units wait for READY=1 before counting the service as started; WATCHDOG=1 pings keep a
`WatchdogSec=` unit alive; STOPPING=1 tells systemd the shutdown is deliberate. Without NOTIFY_SOCKET
(not under systemd) every call is a no-op, so the daemon never needs to know how it was started.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


class Notifier:
    """Sends `KEY=value` lines to the socket systemd named; silent when there is none."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        # A leading '@' names a socket in the abstract namespace (a leading NUL byte on the wire).
        self._address = "\0" + address[1:] if address.startswith("@") else address
        watchdog_usec = env.get("WATCHDOG_USEC", "")
        self.watchdog_interval_seconds = int(watchdog_usec) / 2e6 if watchdog_usec.isdigit() else None

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def send(self, **fields: str | int) -> bool:
        """Send one datagram; False (never an exception) when it cannot be delivered."""
        if not self._address:
            return False
        payload = "\n".join(f"{key.upper()}={value}" for key, value in fields.items()).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(payload, self._address)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send(ready=1, status=status)

    def watchdog(self) -> bool:
        return self.send(watchdog=1)

    def stopping(self) -> bool:
        return self.send(stopping=1, status="stopping")
