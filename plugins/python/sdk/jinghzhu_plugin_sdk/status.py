"""Helpers for the Jinghzhu's status: building one, comparing two, and
returning it only when it changed (as the Rust SDK's ``status`` module)."""

from __future__ import annotations

from typing import Iterable, Optional

from .input import Jinghzhu, Status

#: All ``desired`` Pods live, running and ready.
RUNNING = "Running"
#: The count is right but some Pods are not running and ready yet.
PENDING = "Pending"
#: The live count differs from ``desired``.
SCALING = "Scaling"


def state(live: int, ready: int, desired: int) -> str:
    """``Scaling`` while ``live != desired``, else ``Pending`` while
    ``ready < live``, else ``Running`` (so 0 wanted and none there is
    ``Running``)."""
    if live != desired:
        return SCALING
    if ready < live:
        return PENDING
    return RUNNING


def build(pod_names: Iterable[str], state: str, message: str,
          observed_generation: Optional[int]) -> Status:
    """A status: ``current`` is the number of names, ``pod_list`` the names sorted."""
    names = sorted(pod_names)
    return Status(len(names), names, state, message, observed_generation)


def status_equal(a: Status, b: Status) -> bool:
    """Two statuses say the same thing (the order of ``pod_list`` aside)."""
    return (
        a.current == b.current
        and a.state == b.state
        and a.message == b.message
        and a.observed_generation == b.observed_generation
        and sorted(a.pod_list) == sorted(b.pod_list)
    )


def status_patch(observed: Optional[Status], computed: Status) -> Optional[Status]:
    """``computed`` when it differs from ``observed`` (or there is none),
    ``None`` when nothing changed: no write."""
    if observed is not None and status_equal(observed, computed):
        return None
    return computed


def patch_for(jinghzhu: Jinghzhu, computed: Status) -> Optional[Status]:
    """:func:`status_patch` against the status ``jinghzhu`` has."""
    return status_patch(jinghzhu.status, computed)
