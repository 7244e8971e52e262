"""Numbers for people: sizes in binary units, times in UTC, counts with separators. No I/O."""

from __future__ import annotations

from datetime import datetime, timezone

from agent.capacity.budget import GIB, KIB, MIB


def size(value: float) -> str:
    """Bytes in the largest unit that keeps the number readable."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def when(ts: float | None) -> str:
    """An epoch time as `YYYY-MM-DD HH:MM:SSZ`, or `?` when the line carried none."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if ts is not None else "?"


def fact(name: str, value: float | str) -> str:
    """A capacity fact for people: bytes in binary units, ratios as percentages, counts with separators."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if name.endswith("_bytes"):
            return f"{size(value)} ({value:,.0f} B)"
        if name.endswith(("_ratio", "_utilization")):
            return f"{value:.0%}"
    return number(value)


def number(value: float | str) -> str:
    """A fact's value: whole numbers with separators, others with two decimals, strings as they are."""
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"
    return str(value)
