"""Time as the plugin sees it: the input's ``now`` (never the clock), and
RFC 3339 conversions of the WIT ``timestamp``."""

from __future__ import annotations

import datetime as _dt
import re

from ._wit import wit

Timestamp = wit.Timestamp

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)


def from_secs(seconds: int) -> "wit.Timestamp":
    """Whole seconds since the Unix epoch."""
    return Timestamp(seconds, 0)


def key(ts: "wit.Timestamp") -> tuple:
    """A sort key: earlier timestamps sort first."""
    return (ts.seconds, ts.nanoseconds)


def seconds_between(earlier: "wit.Timestamp", later: "wit.Timestamp") -> float:
    """``later - earlier`` in seconds (negative when ``later`` is earlier)."""
    return (later.seconds - earlier.seconds) + (later.nanoseconds - earlier.nanoseconds) / 1e9


def age_seconds(ts: "wit.Timestamp", now: "wit.Timestamp") -> float:
    """How long before ``now`` ``ts`` was (use the input's ``now``)."""
    return seconds_between(ts, now)


def parse_rfc3339(text: str) -> "wit.Timestamp":
    """``2026-01-01T00:00:00Z``, with an optional fraction and offset."""
    m = _RFC3339.match(text.strip())
    if not m:
        raise ValueError(f"not an RFC 3339 time: {text.strip()!r}")
    y, mo, d, h, mi, s, frac, off = m.groups()
    days = (_dt.date(int(y), int(mo), int(d)) - _dt.date(1970, 1, 1)).days
    seconds = days * 86400 + int(h) * 3600 + int(mi) * 60 + int(s)
    if off not in ("Z", "z"):
        sign = -1 if off[0] == "-" else 1
        seconds -= sign * (int(off[1:3]) * 3600 + int(off[4:6]) * 60)
    nanos = int((frac or "").ljust(9, "0")[:9] or 0)
    return Timestamp(seconds, nanos)


def format_rfc3339(ts: "wit.Timestamp") -> str:
    """``ts`` as ``YYYY-MM-DDTHH:MM:SS[.fffffffff]Z``."""
    days, rem = divmod(ts.seconds, 86400)
    date = _dt.date(1970, 1, 1) + _dt.timedelta(days=days)
    h, rem = divmod(rem, 3600)
    mi, s = divmod(rem, 60)
    text = f"{date.isoformat()}T{h:02}:{mi:02}:{s:02}"
    if ts.nanoseconds:
        text += "." + f"{ts.nanoseconds:09}".rstrip("0")
    return text + "Z"
