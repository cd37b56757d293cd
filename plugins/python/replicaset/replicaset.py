"""The replicaset plugin's logic in Python: exactly what the Rust
``replicaset-logic`` crate does (``plugins/replicaset-logic``).

Keeps ``desired`` live Pods: too few, create the difference from the
template (at most :data:`BURST_REPLICAS` per reconcile); too many, delete
the surplus (not running before running, not ready before ready, newer
before older, then by name); finished and terminating Pods are replaced,
never deleted; the status (count, names, ``"3/3 pods, 2/3 ready"``, state)
is returned only when it changed. It proposes no Event of its own: the host
records one ``SuccessfulCreate`` or ``SuccessfulDelete`` per reconcile
naming the Pods, so a second Event for the same scale would only cost a
write; its "scaling up"/"scaling down" line is at debug (the host's info
line names the Pods).
"""

from __future__ import annotations

from typing import List, Optional

from jinghzhu_plugin_sdk import Input, Jinghzhu, Output, Pod, PodPhase, log, pod, status

PLUGIN_NAME = "replicaset-py"
VERSION = "0.1.0"
#: Most Pods created (or deleted) per reconcile, as the ReplicaSet controller's ``burstReplicas``.
BURST_REPLICAS = 500

_PHASE_RANK = {
    PodPhase.PENDING: 0,
    PodPhase.UNKNOWN: 1,
    PodPhase.RUNNING: 2,
    PodPhase.SUCCEEDED: 3,
    PodPhase.FAILED: 3,
}


def deletion_key(p: Pod):
    """Sort key: the Pod to delete first sorts first."""
    ts = p.metadata.creation_timestamp
    # No creation time first, then newest first.
    created = (0, 0, 0) if ts is None else (1, -ts.seconds, -ts.nanoseconds)
    return (_PHASE_RANK[p.phase], p.ready, created, p.metadata.name.encode("utf-8"))


def pick(candidates: List[Pod], count: int) -> List[Pod]:
    """The ``count`` Pods of ``candidates`` to delete, first to go first."""
    return sorted(candidates, key=deletion_key)[:count]


def live_pods(jz: Jinghzhu, pods: List[Pod]) -> List[Pod]:
    """Controlled by ``jz`` (by uid), not terminating, not finished."""
    return [p for p in pods if pod.is_controlled_by(p, jz) and pod.is_live(p)]


def status_message(current: int, ready: int, desired: int, activity: str, n: int) -> str:
    text = f"{current}/{desired} pods, {ready}/{desired} ready"
    if activity == "creating":
        text += f"; creating {n}"
    elif activity == "deleting":
        text += f"; deleting {n}"
    elif activity == "owner-deleting":
        text += "; Jinghzhu is being deleted"
    return text


def reconcile(input: Input) -> Output:  # noqa: A002 - the contract's name
    jz = input.jinghzhu
    live = live_pods(jz, input.pods)
    desired = jz.desired
    if jz.metadata.deletion_timestamp is not None:
        activity, n = "owner-deleting", 0
    elif desired > len(live):
        activity, n = "creating", min(desired - len(live), BURST_REPLICAS)
    elif len(live) > desired:
        activity, n = "deleting", min(len(live) - desired, BURST_REPLICAS)
    else:
        activity, n = "steady", 0

    out = Output()
    if activity == "creating":
        create = pod.from_template(jz)
        out.create_pods = [create] * n
        log.debug("scaling up", [("jinghzhu", jz.name), ("live", len(live)), ("desired", desired), ("creating", n)])
    elif activity == "deleting":
        out.delete_pods = [p.name for p in pick(live, n)]
        log.debug("scaling down", [("jinghzhu", jz.name), ("live", len(live)), ("desired", desired),
                                   ("deleting", ",".join(out.delete_pods))])

    ready = pod.count_ready(live)
    generation: Optional[int] = jz.metadata.generation or None
    computed = status.build(
        (p.name for p in live),
        status.state(len(live), ready, desired),
        status_message(len(live), ready, desired, activity, n),
        generation,
    )
    out.status = status.patch_for(jz, computed)
    return out
