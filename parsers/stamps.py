"""Time stamps → epoch seconds for one log stream, cheaply: the conversions every server parser shares.

A busy log has a new time stamp on almost every line, and a `datetime` per line was a large part of a
parse. So a stamp string is cached (the last one), and a minute is converted once: its second 0, and a
second within it is that plus the second, when seconds 0 and 59 agree (same offset, same year) — a DST
change or the year boundary inside the minute breaks that, and such a minute is converted per line.
Every `StreamParser` (parsers/base.py) has one, `stamps`.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo

from parsers.prefix import RFC3339, local_at

_UNKNOWN: float = float("nan")  # a minute not converted yet (compared by identity)
_MINUTES_KEPT = 4096  # minutes remembered before the cache starts over


class Stamps:
    """Conversions of a stream's stamps, placed by `ref_time` (epoch seconds: the year of stamps without one)
    in `tz` (the zone of local-time stamps)."""

    UTC: tzinfo = timezone.utc

    def __init__(self, ref_time: float | None, tz: tzinfo) -> None:
        self.ref_time = ref_time
        self.tz = tz
        self.last: tuple[str, float | None] = ("", None)  # the last stamp string converted, and its epoch
        self._minutes: dict[object, float | None] = {}  # minute (its fields, or its text) → epoch of its second 0

    def move(self, ref_time: float) -> None:
        """Place yearless stamps near another time (the conversions cached so far no longer hold)."""
        self.ref_time = ref_time
        self.last = ("", None)
        self._minutes.clear()

    def yearless(self, month: int, day: int, hour: int, minute: int, second: int, key: str) -> float | None:
        """Epoch seconds of a stamp without a year: the year of `ref_time`, or the one before when the
        stamp would otherwise lie more than a day after `ref_time` (a December line read in January).

        Converted once per minute, not per line: the minute's second 0 is converted, and a second within it
        is that plus the second, when seconds 0 and 59 agree (same offset, same year), which a DST change
        or the year boundary inside the minute would break (that minute is then converted per line)."""
        if self.last[0] == key:
            return self.last[1]
        value: float | None
        mkey = (month, day, hour, minute)
        base = self._minutes.get(mkey, _UNKNOWN)
        if base is _UNKNOWN:
            base = self._minute_base(mkey, self._yearless_at(month, day, hour, minute, 0),
                                     self._yearless_at(month, day, hour, minute, 59))
        if base is not None and 0 <= second <= 59:
            value = base + second
        else:
            value = self._yearless_at(month, day, hour, minute, second)
        self.last = (key, value)
        return value

    def yearless_text(self, stamp: str) -> float | None:
        """`yearless` of a stamp as vLLM writes it, `MM-DD HH:MM:SS`: a minute seen before costs a slice, a
        look-up and one `int`, not five (a busy log has a new stamp on almost every line)."""
        minutes = self._minutes
        base = minutes.get(stamp[:11], _UNKNOWN)
        second = int(stamp[12:14])
        if base is not _UNKNOWN and base is not None and 0 <= second <= 59:
            return base + second
        mkey = (int(stamp[0:2]), int(stamp[3:5]), int(stamp[6:8]), int(stamp[9:11]))
        value = self.yearless(*mkey, second, stamp)
        if (known := minutes.get(mkey, _UNKNOWN)) is not _UNKNOWN:
            minutes[stamp[:11]] = known  # None too: a minute that is not second 0 plus the second
        return value

    def minute_base(self, minute: str) -> float | None:
        """The epoch of second 0 of a minute written `MM-DD HH:MM` that `yearless_text` has converted, when
        each of its seconds is that plus the second; None when it has not been converted (or a DST change or
        the year boundary falls inside it): then only `yearless_text` gives its stamps."""
        return self._minutes.get(minute)

    def _yearless_at(self, month: int, day: int, hour: int, minute: int, second: int) -> float | None:
        if self.ref_time is None:
            return None
        ref = datetime.fromtimestamp(self.ref_time, self.tz)
        try:
            moment = datetime(ref.year, month, day, hour, minute, second, tzinfo=self.tz)
            if moment - ref > timedelta(days=1):
                moment = moment.replace(year=ref.year - 1)
            return moment.timestamp()
        except ValueError:
            return None

    def _minute_base(self, mkey: object, first: float | None, last: float | None) -> float | None:
        """Remember a minute's epoch at second 0 when every second of it is that plus the second."""
        if len(self._minutes) >= _MINUTES_KEPT:
            self._minutes.clear()
        base = first if first is not None and last is not None and last - first == 59 else None
        self._minutes[mkey] = base
        return base

    def local(self, year: int, month: int, day: int, hour: int, minute: int, second: float,
              key: str, tz: tzinfo | None = None) -> float | None:
        """Epoch seconds of a full local stamp in `tz` (default: the parser's zone), cached per string and
        converted once per minute (as `yearless`)."""
        if self.last[0] == key:
            return self.last[1]
        zone = tz or self.tz
        whole = int(second)
        value: float | None
        mkey = (year, month, day, hour, minute, zone)
        base = self._minutes.get(mkey, _UNKNOWN)
        if base is _UNKNOWN:
            base = self._minute_base(mkey, local_at(year, month, day, hour, minute, 0, zone),
                                     local_at(year, month, day, hour, minute, 59, zone))
        if base is not None and 0 <= whole <= 59:
            value = base + whole + (second - whole)
        else:
            at = local_at(year, month, day, hour, minute, whole, zone)
            value = None if at is None else at + (second - whole)
        self.last = (key, value)
        return value

    def rfc3339(self, text: str) -> float | None:
        """`2024-08-19T14:09:56.520+08:00` / `…Z` → epoch seconds (None when it is not one)."""
        m = RFC3339.match(text)
        if m is None:
            return None
        zone = m.group(8)
        tz: tzinfo = self.UTC
        if zone and zone != "Z":
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4])))
        fraction = float("0." + m.group(7)) if m.group(7) else 0.0
        return self.local(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)),
                          int(m.group(6)) + fraction, text, tz)
