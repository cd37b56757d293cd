"""Helpers for the Pods a Jinghzhu controls: which ones count, and the
:class:`PodCreate` for a new one from the Jinghzhu's template (as the Rust
SDK's ``pod`` module)."""

from __future__ import annotations

from typing import Iterable, List

from .input import Jinghzhu, Pod, PodPhase
from .output import PodCreate


def is_terminating(pod: Pod) -> bool:
    """Deletion was requested: the Pod is going away."""
    return pod.metadata.deletion_timestamp is not None


def is_finished(pod: Pod) -> bool:
    """Phase ``succeeded`` or ``failed``: it will never run again."""
    return pod.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)


def is_live(pod: Pod) -> bool:
    """Counts towards ``desired``: neither terminating nor finished."""
    return not is_terminating(pod) and not is_finished(pod)


def is_running_and_ready(pod: Pod) -> bool:
    """Phase ``running`` and its ``Ready`` condition ``True``."""
    return pod.phase == PodPhase.RUNNING and pod.ready


def count_ready(pods: Iterable[Pod]) -> int:
    """How many of ``pods`` are live and running and ready."""
    return sum(1 for p in pods if is_live(p) and is_running_and_ready(p))


def live_pods(pods: Iterable[Pod]) -> List[Pod]:
    """The live Pods among ``pods``, in their order."""
    return [p for p in pods if is_live(p)]


def is_controlled_by(pod: Pod, owner: Jinghzhu) -> bool:
    """The Pod's controller owner reference points at ``owner`` (by uid)."""
    uid = owner.metadata.uid
    return any(r.controller and r.uid == uid for r in pod.metadata.owner_references)


def sorted_names(pods: Iterable[Pod]) -> List[str]:
    """The names of ``pods``, sorted."""
    return sorted(p.metadata.name for p in pods)


def generate_name(jinghzhu: Jinghzhu) -> str:
    """``<jinghzhu-name>-``, the prefix of the Pods' generated names."""
    return f"{jinghzhu.metadata.name}-"


def from_template(jinghzhu: Jinghzhu) -> PodCreate:
    """A create for one new Pod: ``generate-name`` ``<name>-``, the template's
    labels, annotations and spec (``spec_json`` ``""`` without a template or
    with an empty spec: the host's default pod template)."""
    t = jinghzhu.template
    if t is None:
        return PodCreate(generate_name=generate_name(jinghzhu))
    spec = t.spec_json if t.spec_json.strip() else ""
    return PodCreate(
        generate_name=generate_name(jinghzhu),
        labels=dict(t.labels),
        annotations=dict(t.annotations),
        spec_json=spec,
    )
