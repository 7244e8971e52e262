"""What an engine's log cannot show, and which witness can: the blind spots `scan`, `report` and `advise` name.

Each one was measured on a real engine (tests/engines/): vLLM V1 (0.11 on, the only engine from then) never prints a
preemption in its log — its stats line has no such field, so 208 preemptions left no line; a client that gives up on
vLLM or SGLang is logged `200 OK` (uvicorn logs when the answer starts, and the engine finishes the request);
llama-server's lines carry no wall-clock time, and it logs a request waiting for a slot only at debug verbosity. A
count of zero in those places means "not visible", not "none", and every surface has to say so rather than print the
zero as a finding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    "preemptions", "vLLM V1 never logs a preemption (its stats line has no such field): 0 here means unknown",
    "scrape its /metrics (vllm:num_preemptions_total) with a `scrape:` target named like this source")
CLIENT_TIMEOUTS = BlindSpot(
    "client_timeouts", "a client that gave up is logged 200 OK (the line is written when the answer starts)",
    "the client's or proxy's log (499/504), or the engine's e2e latency histogram (scrape), shows them")
NO_CLOCK = BlindSpot(
    "time", "llama-server's lines carry no wall-clock time",
    "times come from the file, or from Docker/journald around it (`docker logs --timestamps`)")
SLOT_QUEUE = BlindSpot(
    "queueing", "llama-server logs a request waiting for a slot only at debug verbosity (-lv 4)",
    "scrape its /metrics (llamacpp:requests_deferred; start it with --metrics)")
RUNTIME = frozenset({"preemptions", "client_timeouts", "queueing"})  # only say so of a log that served


def log_blind_spots(server: Server, facts: Mapping[str, float | str], *, scraped: bool = False,
                    served: bool = True) -> list[BlindSpot]:
    """What a log of `server` with these start-up `facts` cannot show (with a scrape of the same engine, less;
    of a log that never served — a failed start — only what start-up lines miss)."""
    spots: list[BlindSpot] = []
    if server is Server.VLLM and is_vllm_v1(facts) and not scraped:
        spots.append(PREEMPTIONS)
    if server in (Server.VLLM, Server.SGLANG):
        spots.append(CLIENT_TIMEOUTS)
    if server is Server.LLAMACPP:
        spots.append(NO_CLOCK)
        if not scraped:
            spots.append(SLOT_QUEUE)
    return spots if served else [s for s in spots if s.what not in RUNTIME]


def engines_blind_spots(servers: Mapping[str, Server], facts: Mapping[str, Mapping[str, float | str]],
                        scraped: Callable[[str], bool], served: Callable[[str], bool]) -> dict[str, list[BlindSpot]]:
    """Each engine's blind spots, from what a store holds: which engine each source is, its start-up facts,
    whether a scrape of it fed the store, and whether it ever served."""
    return {engine: spots for engine, server in sorted(servers.items())
            if (spots := log_blind_spots(server, facts.get(engine, {}), scraped=scraped(engine),
                                         served=served(engine)))}
