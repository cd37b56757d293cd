"""Structured logging into the host's ``tracing`` output.

Inside a component every call goes to the imported ``jinghzhu:operator/log``
function (the host tags the line with the plugin and the object). Natively
(pytest) the import does not exist: a call is written to stderr and kept in a
buffer that tests read with :func:`take_captured` (the newest
:data:`CAPTURE_LIMIT` records).
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass
from typing import Deque, List, Sequence, Tuple

from ._wit import wit_log

Level = wit_log.Level

#: How many records the native capture buffer keeps.
CAPTURE_LIMIT = 10_000

IN_COMPONENT = sys.platform == "wasi"


@dataclass
class Record:
    """One log call, as captured natively."""

    level: "wit_log.Level"
    message: str
    fields: List[Tuple[str, str]]

    def field(self, key: str):
        for k, v in self.fields:
            if k == key:
                return v
        return None


_captured: Deque[Record] = deque(maxlen=CAPTURE_LIMIT)

Fields = Sequence[Tuple[str, str]]


def log(level: "wit_log.Level", message: str, fields: Fields = ()) -> None:
    """Writes one log line at ``level`` with structured ``fields``
    (``[("key", "value"), ...]``; values are turned into strings)."""
    pairs = [(str(k), str(v)) for k, v in fields]
    if IN_COMPONENT:
        wit_log.log(level, message, [wit_log.Field(k, v) for k, v in pairs])
        return
    line = f"[plugin {level.name.lower()}] {message}" + "".join(f" {k}={v!r}" for k, v in pairs)
    print(line, file=sys.stderr)
    _captured.append(Record(level, message, pairs))


def trace(message: str, fields: Fields = ()) -> None:
    log(Level.TRACE, message, fields)


def debug(message: str, fields: Fields = ()) -> None:
    log(Level.DEBUG, message, fields)


def info(message: str, fields: Fields = ()) -> None:
    log(Level.INFO, message, fields)


def warn(message: str, fields: Fields = ()) -> None:
    log(Level.WARN, message, fields)


def error(message: str, fields: Fields = ()) -> None:
    log(Level.ERROR, message, fields)


def take_captured() -> List[Record]:
    """Returns and clears the records logged so far (native runs only)."""
    out = list(_captured)
    _captured.clear()
    return out
