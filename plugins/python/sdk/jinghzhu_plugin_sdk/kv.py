"""Labels and annotations. The SDK hands them to plugins as ``dict``s in key
order; these helpers keep that order when they build or change one."""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple


def sorted_map(pairs: Iterable[Tuple[str, str]]) -> Dict[str, str]:
    """A dict sorted by key; for a key given twice the last value wins."""
    m: Dict[str, str] = {}
    for k, v in pairs:
        m[k] = v
    return {k: m[k] for k in sorted(m)}


def merge(base: Dict[str, str], overlay: Dict[str, str]) -> Dict[str, str]:
    """``base`` with ``overlay`` on top (overlay wins), sorted by key."""
    return sorted_map(list(base.items()) + list(overlay.items()))


def label(labels: Dict[str, str], key: str) -> Optional[str]:
    """The value of label ``key``, if present."""
    return labels.get(key)


def annotation(annotations: Dict[str, str], key: str) -> Optional[str]:
    """The value of annotation ``key``, if present."""
    return annotations.get(key)
