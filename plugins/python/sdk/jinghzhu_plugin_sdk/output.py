"""What a reconcile returns: :class:`Output` (pod creates, deletes, status,
requeue, events), its parts, errors, and the encoding into a 0.2
``reconcile-output`` (one string table, labels in one flat list)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ._wit import Err, wit
from .input import Status

EventType = wit.EventType


@dataclass
class PodCreate:
    """A Pod to create. Exactly one of ``name`` and ``generate_name``;
    ``spec_json`` ``""`` means the template's spec (or the host's default)."""

    name: Optional[str] = None
    generate_name: Optional[str] = None
    labels: Dict[str, str] = field(default_factory=dict)
    annotations: Dict[str, str] = field(default_factory=dict)
    spec_json: str = ""

    @staticmethod
    def with_generate_name(prefix: str) -> "PodCreate":
        """A Pod named ``<prefix><random suffix>`` by the API server."""
        return PodCreate(generate_name=prefix)

    @staticmethod
    def named(name: str) -> "PodCreate":
        """A Pod with an exact name."""
        return PodCreate(name=name)


@dataclass
class Event:
    """A Kubernetes Event to record on the Jinghzhu."""

    event_type: "wit.EventType"
    reason: str
    message: str

    @staticmethod
    def normal(reason: str, message: str) -> "Event":
        """A ``Normal`` Event; ``reason`` is short UpperCamelCase, e.g. ``ScalingUp``."""
        return Event(EventType.NORMAL, reason, message)

    @staticmethod
    def warning(reason: str, message: str) -> "Event":
        """A ``Warning`` Event."""
        return Event(EventType.WARNING, reason, message)


@dataclass
class Output:
    """What the plugin proposes; the host applies it all or nothing."""

    create_pods: List[PodCreate] = field(default_factory=list)
    delete_pods: List[str] = field(default_factory=list)
    status: Optional[Status] = None
    requeue_after_ms: Optional[int] = None
    events: List[Event] = field(default_factory=list)

    def is_empty(self) -> bool:
        """True when the output asks for nothing at all."""
        return not (
            self.create_pods
            or self.delete_pods
            or self.status is not None
            or self.requeue_after_ms is not None
            or self.events
        )


def empty_output() -> Output:
    """An output that asks for nothing."""
    return Output()


class ReconcileError(Exception):
    """Raise from ``reconcile`` to fail the call; ``retryable`` tells the host
    whether to retry with backoff (True) or wait for a change (False)."""

    def __init__(self, message: str, retryable: bool = True):
        super().__init__(message)
        self.message = message
        self.retryable = retryable

    @staticmethod
    def retryable_error(message: str) -> "ReconcileError":
        return ReconcileError(message, True)

    @staticmethod
    def fatal(message: str) -> "ReconcileError":
        return ReconcileError(message, False)

    def to_err(self) -> Err:
        """The ``Err`` componentize-py turns into ``result::err``."""
        return Err(wit.ReconcileError(self.message, self.retryable))


class _Strings:
    """Interns strings into one table: ``add(s)`` returns the id."""

    __slots__ = ("ids", "parts", "ends", "size")

    def __init__(self) -> None:
        self.ids: Dict[str, int] = {"": 0}
        self.parts: List[bytes] = []
        self.ends: List[int] = [0]
        self.size = 0

    def add(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            b = s.encode("utf-8")
            self.parts.append(b)
            self.size += len(b)
            i = len(self.ends)
            self.ends.append(self.size)
            self.ids[s] = i
        return i

    def table(self) -> "wit.StringTable":
        return wit.StringTable(b"".join(self.parts), self.ends)


def encode_status(status: Status, add) -> "wit.JinghzhuStatus":
    return wit.JinghzhuStatus(
        status.current,
        [add(n) for n in status.pod_list],
        add(status.state),
        add(status.message),
        status.observed_generation,
    )


def encode(output: Output) -> "wit.ReconcileOutput":
    """The 0.2 ``reconcile-output`` for ``output``."""
    strings = _Strings()
    add = strings.add
    pairs: List[wit.KeyValue] = []
    creates: List[wit.PodCreate] = []
    span_cache: Dict[tuple, wit.Span] = {}

    def span(m: Dict[str, str]) -> "wit.Span":
        key = tuple(m.items())
        s = span_cache.get(key)
        if s is None:
            s = wit.Span(len(pairs), len(m))
            for k, v in m.items():
                pairs.append(wit.KeyValue(add(k), add(v)))
            span_cache[key] = s
        return s

    for c in output.create_pods:
        creates.append(
            wit.PodCreate(
                None if c.name is None else add(c.name),
                None if c.generate_name is None else add(c.generate_name),
                span(c.labels),
                span(c.annotations),
                add(c.spec_json),
            )
        )
    deletes = [add(n) for n in output.delete_pods]
    status = None if output.status is None else encode_status(output.status, add)
    events = [wit.Event(e.event_type, add(e.reason), add(e.message)) for e in output.events]
    return wit.ReconcileOutput(
        strings.table(), pairs, creates, deletes, status, output.requeue_after_ms, events
    )


def decode_output(raw: "wit.ReconcileOutput") -> Output:
    """The :class:`Output` a raw 0.2 ``reconcile-output`` describes (for tests
    and tools: the inverse of :func:`encode`)."""
    from .input import StringTable

    s = StringTable(raw.strings)

    def span_map(span: "wit.Span") -> Dict[str, str]:
        out: Dict[str, str] = {}
        for kv in raw.pairs[span.start:span.start + span.len]:
            out[s[kv.key]] = s[kv.value]
        return out

    creates = [
        PodCreate(
            None if c.name is None else s[c.name],
            None if c.generate_name is None else s[c.generate_name],
            span_map(c.labels),
            span_map(c.annotations),
            s[c.spec_json],
        )
        for c in raw.create_pods
    ]
    status = None
    if raw.status is not None:
        st = raw.status
        status = Status(st.current, [s[i] for i in st.pod_list], s[st.state], s[st.message],
                        st.observed_generation)
    return Output(
        creates,
        [s[i] for i in raw.delete_pods],
        status,
        raw.requeue_after_ms,
        [Event(e.event_type, s[e.reason], s[e.message]) for e in raw.events],
    )
