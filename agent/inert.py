"""The one escaping choke point: every terminal and document output passes its text through here.

Log lines are written by anyone who can reach an engine's API, and file names by anyone who can write a
log directory, so their text may hold terminal controls: ESC starts CSI, OSC (0: window title, 8: a link
that shows one address and opens another, 52: writes the clipboard) and DCS sequences; 0x80–0x9f are the
one-byte C1 forms of the same (0x9b is CSI, 0x9d OSC, 0x90 DCS); DEL; and the bidirectional overrides,
isolates and marks that make a terminal or browser show characters in another order than they are.
Every one of them is shown as `\\xNN` / `\\uNNNN` text, so what was logged is still readable and nothing
is obeyed. Text views call `printable` on what they return; data outputs (JSON, JSON lines, the report in
every format, /metrics label values) call `inert` or `printable` on the values before they are encoded,
so a value read back by `jq -r` is as harmless as the bytes on the screen.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar

_CONTROLS = "\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_CONTROLS}]")
_CONTROL_OR_NEWLINE = re.compile(f"[\n{_CONTROLS}]")

T = TypeVar("T")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, keep_newlines: bool = True) -> str:
    """Text safe for a terminal: every control character shown as `\\xNN` / `\\uNNNN`. Newlines are the
    view's own unless `keep_newlines` is False (one field of one line)."""
    return (_CONTROL if keep_newlines else _CONTROL_OR_NEWLINE).sub(_escape, text)


def inert(value: T) -> T:
    """`value` with `printable` applied to every string in it, dict keys included: JSON-able data (dicts,
    lists, tuples), frozen dataclasses (rebuilt with `replace`) and anything else as it is."""
    return _inert(value)  # type: ignore[no-any-return]


def _inert(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value) if _CONTROL.search(value) else value
    if isinstance(value, dict):
        return {_inert(k): _inert(v) for k, v in value.items()}
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(_inert(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _inert(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value
