"""What an engine's log cannot show, and which witness can: the blind spots `scan`, `report` and `advise` name.

Each one was measured on a real engine (tests/engines/): vLLM V1 (0.11 on, the only engine from then) never prints
a preemption in its log — its stats line has no such field, so 208 preemptions left no line; a client that gives
up on vLLM or SGLang is logged `200 OK` (uvicorn logs when the answer starts, and the engine finishes the request);
llama-server's lines carry no wall-clock time. A count of zero in those places means "not visible", not "none",
and every surface has to say so rather than print the zero as a finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.records import Server


@dataclass(frozen=True)
class BlindSpot:
    """One thing a log cannot show: `what` a short key, `detail` why, `remedy` the witness that can see it."""

    what: str
    detail: str
    remedy: str

    def sentence(self) -> str:
        return f"{self.detail}; {self.remedy}"


def _version(text: str) -> tuple[int, int] | None:
    parts = text.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return None


def is_vllm_v1(facts: Mapping[str, float | str]) -> bool:
    """The log came from vLLM's V1 engine: it said so at start-up, or its version has no other engine (0.11+)."""
    if facts.get("engine_core") == "v1":
        return True
    version = facts.get("engine_version")
    parsed = _version(version) if isinstance(version, str) else None
    return parsed is not None and parsed >= (0, 11)


PREEMPTIONS = BlindSpot(
    "preemptions", "vLLM V1 does not log preemptions (its stats line has no preemption field), so a count of 0 "
    "from this log means unknown",
    "the engine's /metrics counts them (vllm:num_preemptions_total): add a `scrape:` target named like this source")
CLIENT_TIMEOUTS = BlindSpot(
    "client_timeouts", "a client that gave up is logged as 200 OK (the access line is written when the answer "
    "starts, and the engine finishes the request anyway)",
    "the client's or proxy's log (its timeouts, 499/504 lines) or the engine's end-to-end latency histogram "
    "(scrape) against the client's timeout shows them")
NO_CLOCK = BlindSpot(
    "time", "llama-server's lines carry no wall-clock time (only time since start, or none)",
    "times come from the file or the container runtime (run it under Docker/journald, or use "
    "`docker logs --timestamps`)")


def log_blind_spots(server: Server, facts: Mapping[str, float | str], *, scraped: bool = False) -> list[BlindSpot]:
    """What a log of `server` with these start-up `facts` cannot show (with a scrape of the same engine, less)."""
    spots: list[BlindSpot] = []
    if server is Server.VLLM and is_vllm_v1(facts) and not scraped:
        spots.append(PREEMPTIONS)
    if server in (Server.VLLM, Server.SGLANG):
        spots.append(CLIENT_TIMEOUTS)
    if server is Server.LLAMACPP:
        spots.append(NO_CLOCK)
    return spots
