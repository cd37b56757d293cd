"""Builders for reconcile inputs, for native unit tests of plugin logic
(as the Rust SDK's ``testing`` module), and :func:`encode_input`, which
lays plain objects out as a 0.2 ``reconcile-input`` the way the host does.

    from jinghzhu_plugin_sdk.testing import input, jinghzhu, pod
    view = input(jinghzhu("demo", "default", 3)).pod(pod("demo-a", PodPhase.PENDING)).view()

Defaults: uids ``uid-<name>``, generation 1, created an hour before
:data:`DEFAULT_NOW`, Pods in the Jinghzhu's namespace with a controller
owner reference to it, Pods sorted by name.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ._wit import wit
from .input import Input, OwnerReference, PodPhase, PodTemplate, Status, decode
from .output import _Strings

API_VERSION = "jinghzhu.io/v1"
KIND = "Jinghzhu"
#: ``now`` of built inputs (2023-11-14T22:13:20Z).
DEFAULT_NOW = 1_700_000_000
#: Default creation time: an hour before :data:`DEFAULT_NOW`.
DEFAULT_CREATED = DEFAULT_NOW - 3_600


@dataclass
class Meta:
    """Plain object metadata (what :func:`encode_input` lays out)."""

    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    labels: Dict[str, str] = field(default_factory=dict)
    annotations: Dict[str, str] = field(default_factory=dict)
    creation_timestamp: Optional["wit.Timestamp"] = None
    deletion_timestamp: Optional["wit.Timestamp"] = None
    owner_references: List[OwnerReference] = field(default_factory=list)


@dataclass
class JinghzhuObject:
    metadata: Meta
    desired: int
    template: Optional[PodTemplate] = None
    status: Optional[Status] = None


@dataclass
class PodObject:
    metadata: Meta
    phase: "wit.PodPhase" = PodPhase.PENDING
    ready: bool = False


@dataclass
class InputObjects:
    """A whole input as plain objects."""

    jinghzhu: JinghzhuObject
    pods: List[PodObject]
    now: "wit.Timestamp"


def encode_input(objects: InputObjects) -> "wit.ReconcileInput":
    """The 0.2 ``reconcile-input`` for plain objects: one string table
    (string 0 is ``""``), labels/annotations sorted by key in one flat
    ``pairs`` list, owner references in ``owners``."""
    t = _Strings()
    add = t.add
    pairs: List[wit.KeyValue] = []
    owners: List[wit.OwnerReference] = []

    def span_map(m: Dict[str, str]) -> "wit.Span":
        start = len(pairs)
        for k in sorted(m):
            pairs.append(wit.KeyValue(add(k), add(m[k])))
        return wit.Span(start, len(m))

    def meta(m: Meta) -> "wit.ObjectMeta":
        name, ns, uid, rv = add(m.name), add(m.namespace), add(m.uid), add(m.resource_version)
        labels, annotations = span_map(m.labels), span_map(m.annotations)
        start = len(owners)
        for r in m.owner_references:
            owners.append(wit.OwnerReference(add(r.api_version), add(r.kind), add(r.name), add(r.uid), r.controller))
        return wit.ObjectMeta(name, ns, uid, rv, m.generation, labels, annotations,
                              m.creation_timestamp, m.deletion_timestamp,
                              wit.Span(start, len(m.owner_references)))

    jz = objects.jinghzhu
    jmeta = meta(jz.metadata)
    template = None
    if jz.template is not None:
        template = wit.PodTemplate(span_map(jz.template.labels), span_map(jz.template.annotations),
                                   add(jz.template.spec_json))
    status = None
    if jz.status is not None:
        s = jz.status
        status = wit.JinghzhuStatus(s.current, [add(n) for n in s.pod_list], add(s.state),
                                    add(s.message), s.observed_generation)
    raw_jz = wit.Jinghzhu(jmeta, wit.JinghzhuSpec(jz.desired, template), status)
    pods = [wit.Pod(meta(p.metadata), p.phase, p.ready)
            for p in sorted(objects.pods, key=lambda p: p.metadata.name)]
    return wit.ReconcileInput(t.table(), pairs, owners,
                              raw_jz, pods, objects.now)


def _meta(name: str, namespace: str) -> Meta:
    return Meta(name, namespace, f"uid-{name}", "1", 1,
                creation_timestamp=wit.Timestamp(DEFAULT_CREATED, 0))


def controller_reference(owner: JinghzhuObject) -> OwnerReference:
    """The controller owner reference a Pod of ``owner`` carries."""
    return OwnerReference(API_VERSION, KIND, owner.metadata.name, owner.metadata.uid, True)


class JinghzhuBuilder:
    def __init__(self, name: str, namespace: str, desired: int):
        self.inner = JinghzhuObject(_meta(name, namespace), desired)

    def uid(self, uid: str) -> "JinghzhuBuilder":
        self.inner.metadata.uid = uid
        return self

    def generation(self, generation: int) -> "JinghzhuBuilder":
        self.inner.metadata.generation = generation
        return self

    def label(self, key: str, value: str) -> "JinghzhuBuilder":
        self.inner.metadata.labels[key] = value
        return self

    def created_at(self, seconds: int) -> "JinghzhuBuilder":
        self.inner.metadata.creation_timestamp = wit.Timestamp(seconds, 0)
        return self

    def deleting_at(self, seconds: int) -> "JinghzhuBuilder":
        self.inner.metadata.deletion_timestamp = wit.Timestamp(seconds, 0)
        return self

    def desired(self, desired: int) -> "JinghzhuBuilder":
        self.inner.desired = desired
        return self

    def template(self, template: PodTemplate) -> "JinghzhuBuilder":
        self.inner.template = template
        return self

    def status(self, status: Status) -> "JinghzhuBuilder":
        self.inner.status = status
        return self

    def build(self) -> JinghzhuObject:
        return copy.deepcopy(self.inner)

    def input(self) -> "InputBuilder":
        return InputBuilder(self)


def jinghzhu(name: str, namespace: str = "default", desired: int = 1) -> JinghzhuBuilder:
    """A Jinghzhu asking for ``desired`` Pods, no template, no status."""
    return JinghzhuBuilder(name, namespace, desired)


class PodBuilder:
    def __init__(self, name: str, phase: "wit.PodPhase"):
        self.inner = PodObject(_meta(name, ""), phase, phase == PodPhase.RUNNING)
        self.auto_owner = True

    def ready(self, ready: bool) -> "PodBuilder":
        self.inner.ready = ready
        return self

    def created_at(self, seconds: int) -> "PodBuilder":
        self.inner.metadata.creation_timestamp = wit.Timestamp(seconds, 0)
        return self

    def no_creation_timestamp(self) -> "PodBuilder":
        self.inner.metadata.creation_timestamp = None
        return self

    def terminating(self) -> "PodBuilder":
        return self.deleting_at(DEFAULT_NOW)

    def deleting_at(self, seconds: int) -> "PodBuilder":
        self.inner.metadata.deletion_timestamp = wit.Timestamp(seconds, 0)
        return self

    def label(self, key: str, value: str) -> "PodBuilder":
        self.inner.metadata.labels[key] = value
        return self

    def owned_by(self, owner: JinghzhuObject) -> "PodBuilder":
        self.inner.metadata.owner_references.append(controller_reference(owner))
        return self

    def unowned(self) -> "PodBuilder":
        self.inner.metadata.owner_references = []
        self.auto_owner = False
        return self


def pod(name: str, phase: "wit.PodPhase" = PodPhase.RUNNING) -> PodBuilder:
    """A Pod in ``phase`` (ready when running), owned by the input's Jinghzhu."""
    return PodBuilder(name, phase)


class InputBuilder:
    def __init__(self, jz: JinghzhuBuilder):
        self.jz = jz.build()
        self.pod_builders: List[PodBuilder] = []
        self._now = wit.Timestamp(DEFAULT_NOW, 0)

    def pod(self, p: PodBuilder) -> "InputBuilder":
        self.pod_builders.append(p)
        return self

    def pods(self, ps) -> "InputBuilder":
        self.pod_builders.extend(ps)
        return self

    def now(self, seconds: int) -> "InputBuilder":
        self._now = wit.Timestamp(seconds, 0)
        return self

    def objects(self) -> InputObjects:
        pods = []
        for b in self.pod_builders:
            p = copy.deepcopy(b.inner)
            if not p.metadata.namespace:
                p.metadata.namespace = self.jz.metadata.namespace
            if b.auto_owner and not p.metadata.owner_references:
                p.metadata.owner_references.append(controller_reference(self.jz))
            pods.append(p)
        return InputObjects(copy.deepcopy(self.jz), pods, self._now)

    def build(self) -> "wit.ReconcileInput":
        """The raw 0.2 record, as the host would send it."""
        return encode_input(self.objects())

    def view(self) -> Input:
        """The friendly view a plugin's ``reconcile`` receives."""
        return decode(self.build())


def input(jz: JinghzhuBuilder) -> InputBuilder:  # noqa: A001 - mirrors the Rust SDK
    return InputBuilder(jz)
