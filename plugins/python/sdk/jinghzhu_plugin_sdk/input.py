"""Friendly read-only views of a ``reconcile-input`` (contract 0.2).

Contract 0.2 sends every string once, in a string table, and labels,
annotations and owner references in shared flat lists that objects refer to
by spans. :class:`Input` hides that: ``input.jinghzhu.name``,
``input.pods[0].phase``, ``pod.labels["app"]``. Strings are decoded when first
read and then cached, so a plugin pays only for the text it looks at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from ._wit import wit

PodPhase = wit.PodPhase
Timestamp = wit.Timestamp


class StringTable:
    """The strings of one input: ``table[i]`` is string ``i`` (decoded once)."""

    __slots__ = ("_bytes", "_ends", "_cache")

    def __init__(self, table: "wit.StringTable"):
        self._bytes = table.bytes
        self._ends = table.ends
        self._cache: Dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i: int) -> str:
        s = self._cache.get(i)
        if s is None:
            if i < 0 or i >= len(self._ends):
                raise IndexError(f"string id {i} is outside the table ({len(self._ends)} strings)")
            start = self._ends[i - 1] if i > 0 else 0
            s = bytes(self._bytes[start:self._ends[i]]).decode("utf-8")
            self._cache[i] = s
        return s


@dataclass(frozen=True)
class OwnerReference:
    """A reference from an object to its owner."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool


@dataclass
class Status:
    """A Jinghzhu's status: what it holds, and the shape of a status patch."""

    current: int
    pod_list: List[str]
    state: str
    message: str
    observed_generation: Optional[int] = None


class _Context:
    __slots__ = ("s", "pairs", "owners")

    def __init__(self, raw: "wit.ReconcileInput"):
        self.s = StringTable(raw.strings)
        self.pairs = raw.pairs
        self.owners = raw.owners

    def string_map(self, span: "wit.Span") -> Dict[str, str]:
        s = self.s
        out: Dict[str, str] = {}
        for kv in self.pairs[span.start:span.start + span.len]:
            out[s[kv.key]] = s[kv.value]
        return out

    def owner_refs(self, span: "wit.Span") -> List[OwnerReference]:
        s = self.s
        return [
            OwnerReference(s[o.api_version], s[o.kind], s[o.name], s[o.uid], o.controller)
            for o in self.owners[span.start:span.start + span.len]
        ]


class ObjectMeta:
    """Metadata of the Jinghzhu or of a Pod; text fields decode on first use."""

    __slots__ = ("_c", "_m", "_name", "_labels", "_annotations", "_owners")

    def __init__(self, context: _Context, meta: "wit.ObjectMeta"):
        self._c = context
        self._m = meta
        self._name: Optional[str] = None
        self._labels: Optional[Dict[str, str]] = None
        self._annotations: Optional[Dict[str, str]] = None
        self._owners: Optional[List[OwnerReference]] = None

    @property
    def name(self) -> str:
        if self._name is None:
            self._name = self._c.s[self._m.name]
        return self._name

    @property
    def namespace(self) -> str:
        return self._c.s[self._m.namespace]

    @property
    def uid(self) -> str:
        return self._c.s[self._m.uid]

    @property
    def resource_version(self) -> str:
        return self._c.s[self._m.resource_version]

    @property
    def generation(self) -> int:
        return self._m.generation

    @property
    def creation_timestamp(self) -> Optional[Timestamp]:
        return self._m.creation_timestamp

    @property
    def deletion_timestamp(self) -> Optional[Timestamp]:
        return self._m.deletion_timestamp

    @property
    def labels(self) -> Dict[str, str]:
        """Labels, in key order (a fresh dict may be changed freely)."""
        if self._labels is None:
            self._labels = self._c.string_map(self._m.labels)
        return dict(self._labels)

    @property
    def annotations(self) -> Dict[str, str]:
        """Annotations, in key order."""
        if self._annotations is None:
            self._annotations = self._c.string_map(self._m.annotations)
        return dict(self._annotations)

    @property
    def owner_references(self) -> List[OwnerReference]:
        if self._owners is None:
            self._owners = self._c.owner_refs(self._m.owner_references)
        return list(self._owners)

    def controller_uid(self) -> Optional[str]:
        """The uid of the owner reference marked ``controller``, if any."""
        s = self._c.s
        span = self._m.owner_references
        for o in self._c.owners[span.start:span.start + span.len]:
            if o.controller:
                return s[o.uid]
        return None


class Pod:
    """A Pod the Jinghzhu controls."""

    __slots__ = ("metadata", "phase", "ready")

    def __init__(self, context: _Context, raw: "wit.Pod"):
        self.metadata = ObjectMeta(context, raw.metadata)
        self.phase: PodPhase = raw.phase
        self.ready: bool = raw.ready

    @property
    def name(self) -> str:
        return self.metadata.name

    def __repr__(self) -> str:
        return f"Pod({self.name!r}, {self.phase.name}, ready={self.ready})"


@dataclass
class PodTemplate:
    """The Jinghzhu's pod template: labels, annotations, and the spec as JSON
    text (``""`` when the template has no spec)."""

    labels: Dict[str, str]
    annotations: Dict[str, str]
    spec_json: str


class Jinghzhu:
    """The object being reconciled."""

    __slots__ = ("metadata", "desired", "_c", "_raw", "_template", "_status", "_decoded")

    def __init__(self, context: _Context, raw: "wit.Jinghzhu"):
        self._c = context
        self._raw = raw
        self.metadata = ObjectMeta(context, raw.metadata)
        self.desired: int = raw.spec.desired
        self._decoded = False
        self._template: Optional[PodTemplate] = None
        self._status: Optional[Status] = None

    def _decode(self) -> None:
        if self._decoded:
            return
        c, raw = self._c, self._raw
        t = raw.spec.template
        if t is not None:
            self._template = PodTemplate(
                c.string_map(t.labels), c.string_map(t.annotations), c.s[t.spec_json]
            )
        st = raw.status
        if st is not None:
            self._status = Status(
                st.current,
                [c.s[i] for i in st.pod_list],
                c.s[st.state],
                c.s[st.message],
                st.observed_generation,
            )
        self._decoded = True

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def template(self) -> Optional[PodTemplate]:
        """The pod template, or ``None`` (the host's default template applies)."""
        self._decode()
        return self._template

    @property
    def status(self) -> Optional[Status]:
        """The current status, or ``None`` before the operator first wrote one."""
        self._decode()
        return self._status


class Input:
    """Everything a reconcile may know: ``jinghzhu``, ``pods`` (sorted by
    name, terminating ones included) and ``now``."""

    __slots__ = ("raw", "strings", "jinghzhu", "pods", "now")

    def __init__(self, raw: "wit.ReconcileInput"):
        context = _Context(raw)
        self.raw = raw
        self.strings = context.s
        self.jinghzhu = Jinghzhu(context, raw.jinghzhu)
        self.pods: List[Pod] = [Pod(context, p) for p in raw.pods]
        self.now: Timestamp = raw.now


def decode(raw: "wit.ReconcileInput") -> Input:
    """The friendly view of a raw 0.2 ``reconcile-input``."""
    return Input(raw)
