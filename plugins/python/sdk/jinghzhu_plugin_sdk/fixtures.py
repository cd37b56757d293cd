"""Golden fixtures natively (format: ``plugins/FIXTURES.md``): read a case's
``input.yaml`` as the host does, run the plugin, compare with
``expected.yaml``, then check idempotence as ``wasm-operator reconcile
--fixtures`` does (apply the proposal; the next reconcile proposes no pod
creates or deletes, the one after that nothing). Needs PyYAML (native only).

    from jinghzhu_plugin_sdk import fixtures
    failures = fixtures.run_all("fixtures", reconcile, default_spec_path="wit/default-pod-spec.json")
"""

from __future__ import annotations

import copy
import json
import os
import re
from typing import Callable, Dict, List, Optional

from .input import Input, OwnerReference, PodPhase, PodTemplate, Status, decode
from .output import EventType, Output, decode_output
from .plugin import call
from .testing import API_VERSION, KIND, InputObjects, JinghzhuObject, Meta, PodObject, encode_input
from .time import parse_rfc3339

#: ``now`` when a case has no ``now`` file.
DEFAULT_NOW = "2026-01-01T00:00:00Z"

_PHASES = {
    "": PodPhase.PENDING,
    "Pending": PodPhase.PENDING,
    "Running": PodPhase.RUNNING,
    "Succeeded": PodPhase.SUCCEEDED,
    "Failed": PodPhase.FAILED,
    "Unknown": PodPhase.UNKNOWN,
}


def _loader():
    """A safe loader that reads scalars as YAML 1.2 (as the host's serde_yaml
    does): ``yes``/``no``/``on``/``off`` and unquoted times stay strings."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in (
            "tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    return Loader


def load_all(text: str) -> List:
    """Every YAML document of ``text``."""
    import yaml

    return list(yaml.load_all(text, Loader=_loader()))


def objects(text: str) -> List[dict]:
    """Every object of a YAML text (several documents, ``kind: List`` flattened)."""
    out: List[dict] = []
    for doc in load_all(text):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        else:
            out.append(doc)
    return out


def _str(v) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    return json.dumps(v)


def _string_map(v) -> Dict[str, str]:
    if not isinstance(v, dict):
        return {}
    return {str(k): (val if isinstance(val, str) else json.dumps(val)) for k, val in sorted(v.items())}


def _ts(v):
    if v is None:
        return None
    return parse_rfc3339(str(v))


def _meta(obj: dict, default_namespace: str) -> Meta:
    m = obj.get("metadata") or {}
    refs = [
        OwnerReference(_str(r.get("apiVersion")), _str(r.get("kind")), _str(r.get("name")),
                       _str(r.get("uid")), bool(r.get("controller", False)))
        for r in (m.get("ownerReferences") or [])
    ]
    return Meta(
        name=_str(m.get("name")),
        namespace=_str(m.get("namespace")) or default_namespace,
        uid=_str(m.get("uid")),
        resource_version=_str(m.get("resourceVersion")),
        generation=int(m.get("generation") or 0),
        labels=_string_map(m.get("labels")),
        annotations=_string_map(m.get("annotations")),
        creation_timestamp=_ts(m.get("creationTimestamp")),
        deletion_timestamp=_ts(m.get("deletionTimestamp")),
        owner_references=refs,
    )


def _jinghzhu(obj: dict) -> JinghzhuObject:
    spec = obj.get("spec") or {}
    t = spec.get("template")
    template = None
    if isinstance(t, dict):
        tm = t.get("metadata") or {}
        spec_json = json.dumps(t["spec"], separators=(",", ":"), sort_keys=True) if "spec" in t else ""
        template = PodTemplate(_string_map(tm.get("labels")), _string_map(tm.get("annotations")), spec_json)
    s = obj.get("status")
    status = None
    if isinstance(s, dict):
        status = Status(int(s.get("current") or 0), [str(n) for n in (s.get("podList") or [])],
                        _str(s.get("state")), _str(s.get("message")),
                        None if s.get("observedGeneration") is None else int(s["observedGeneration"]))
    desired = int(spec.get("desired") or 0)
    if not 0 <= desired < 2**32:
        raise ValueError(f"spec.desired {desired} is not a u32")
    return JinghzhuObject(_meta(obj, "default"), desired, template, status)


def _pod(obj: dict, default_namespace: str) -> PodObject:
    st = obj.get("status") or {}
    phase_name = _str(st.get("phase"))
    if phase_name not in _PHASES:
        raise ValueError(f"unknown pod phase {phase_name!r}")
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in (st.get("conditions") or []))
    return PodObject(_meta(obj, default_namespace), _PHASES[phase_name], ready)


def load_case(case_dir: str, controlled_only: bool = True) -> InputObjects:
    """The input a case directory describes: only the Pods the host would
    pass (controller reference to the Jinghzhu's uid, same namespace), or
    every Pod with ``controlled_only=False``."""
    with open(os.path.join(case_dir, "input.yaml"), encoding="utf-8") as f:
        objs = objects(f.read())
    for o in objs:
        if not isinstance(o, dict) or not o.get("kind"):
            raise ValueError("an object without kind")
    jzs = [o for o in objs if o.get("kind") == "Jinghzhu"]
    if len(jzs) != 1:
        raise ValueError(f"expected exactly one Jinghzhu, found {len(jzs)}")
    jz = _jinghzhu(jzs[0])
    pods = []
    for o in objs:
        if o.get("kind") != "Pod":
            continue
        p = _pod(o, jz.metadata.namespace)
        controlled = p.metadata.namespace == jz.metadata.namespace and any(
            r.controller and r.uid == jz.metadata.uid for r in p.metadata.owner_references)
        if controlled or not controlled_only:
            pods.append(p)
    pods.sort(key=lambda p: p.metadata.name)
    now_path = os.path.join(case_dir, "now")
    now = DEFAULT_NOW
    if os.path.exists(now_path):
        with open(now_path, encoding="utf-8") as f:
            now = f.read()
    return InputObjects(jz, pods, parse_rfc3339(now))


def load_default_spec(path: str) -> dict:
    """The host's default pod spec (``wit/default-pod-spec.json``)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def to_actions(case: InputObjects, output: Output, default_spec: dict) -> dict:
    """``output`` in the shape ``wasm-operator reconcile`` prints (and
    ``expected.yaml`` holds): an empty ``spec_json`` becomes the template's
    spec or the host's default; empty parts are left out."""
    t = case.jinghzhu.template
    template_spec = json.loads(t.spec_json) if t is not None and t.spec_json.strip() else default_spec
    actions: dict = {}
    if output.create_pods:
        creates = []
        for c in output.create_pods:
            d: dict = {}
            if c.name is not None:
                d["name"] = c.name
            if c.generate_name is not None:
                d["generateName"] = c.generate_name
            if c.labels:
                d["labels"] = dict(c.labels)
            if c.annotations:
                d["annotations"] = dict(c.annotations)
            d["spec"] = json.loads(c.spec_json) if c.spec_json.strip() else template_spec
            creates.append(d)
        actions["createPods"] = creates
    if output.delete_pods:
        actions["deletePods"] = list(output.delete_pods)
    if output.status is not None:
        s = output.status
        st = {"current": s.current, "podList": list(s.pod_list), "state": s.state, "message": s.message}
        if s.observed_generation is not None:
            st["observedGeneration"] = s.observed_generation
        actions["status"] = st
    if output.requeue_after_ms is not None:
        actions["requeueAfterMs"] = output.requeue_after_ms
    if output.events:
        actions["events"] = [
            {"type": "Normal" if e.event_type == EventType.NORMAL else "Warning",
             "reason": e.reason, "message": e.message}
            for e in output.events
        ]
    return actions


_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _suffix(n: int) -> str:
    out = []
    for _ in range(5):
        out.append(_ALPHABET[n % len(_ALPHABET)])
        n //= len(_ALPHABET)
    return "".join(out)


def apply(case: InputObjects, output: Output, serial: List[int]) -> InputObjects:
    """``case`` after the API server carried out ``output`` (created Pods
    Pending and not ready, deleted ones gone, the status replaced);
    ``serial[0]`` numbers generated names across calls."""
    nxt = copy.deepcopy(case)
    jz = nxt.jinghzhu
    deleted = set(output.delete_pods)
    nxt.pods = [p for p in nxt.pods if p.metadata.name not in deleted]
    for c in output.create_pods:
        serial[0] += 1
        n = serial[0]
        if c.name is not None:
            name = c.name
        elif c.generate_name is not None:
            name = c.generate_name + _suffix(n)
        else:
            name = "unnamed-" + _suffix(n)
        labels = dict(c.labels)
        labels["app.kubernetes.io/managed-by"] = "wasm-operator"
        labels["jinghzhu.io/owner"] = jz.metadata.name
        meta = Meta(name, jz.metadata.namespace, f"offline-uid-{n}", "", 0, labels, dict(c.annotations),
                    case.now, None,
                    [OwnerReference(API_VERSION, KIND, jz.metadata.name, jz.metadata.uid, True)])
        nxt.pods.append(PodObject(meta, PodPhase.PENDING, False))
    nxt.pods.sort(key=lambda p: p.metadata.name)
    if output.status is not None:
        jz.status = copy.deepcopy(output.status)
    return nxt


Reconcile = Callable[[Input], Output]


def run(reconcile: Reconcile, case: InputObjects) -> Output:
    """Runs ``reconcile`` as the component does: the case encoded as a 0.2
    input, decoded by the SDK, the output encoded and decoded back."""
    return decode_output(call(reconcile, encode_input(case)))


def check_case(case_dir: str, reconcile: Reconcile, default_spec: dict) -> Optional[str]:
    """``None`` when the case passes, else what differs."""
    import yaml

    case = load_case(case_dir, controlled_only=True)
    output = run(reconcile, case)
    unfiltered = load_case(case_dir, controlled_only=False)
    if run(reconcile, unfiltered) != output:
        return "the output changes when uncontrolled pods are passed in"
    actual = to_actions(case, output, default_spec)
    with open(os.path.join(case_dir, "expected.yaml"), encoding="utf-8") as f:
        docs = load_all(f.read())
    docs = [d for d in docs if d is not None] or [{}]
    if len(docs) != 1:
        return f"expected.yaml holds {len(docs)} documents, not 1"
    expected = docs[0]
    if actual != expected:
        return ("output differs from expected.yaml\n--- expected\n" + yaml.safe_dump(expected, sort_keys=True)
                + "--- actual\n" + yaml.safe_dump(actual, sort_keys=True))
    serial = [0]
    second_case = apply(case, output, serial)
    second = run(reconcile, second_case)
    if second.create_pods or second.delete_pods:
        return f"second reconcile still creates or deletes: {to_actions(second_case, second, default_spec)}"
    third_case = apply(second_case, second, serial)
    third = run(reconcile, third_case)
    if not third.is_empty():
        return f"third reconcile is not empty: {to_actions(third_case, third, default_spec)}"
    return None


def case_dirs(fixtures_dir: str) -> List[str]:
    """The case directories (those with an ``input.yaml``), by name."""
    return sorted(
        os.path.join(fixtures_dir, d) for d in os.listdir(fixtures_dir)
        if os.path.isfile(os.path.join(fixtures_dir, d, "input.yaml"))
    )


def run_all(fixtures_dir: str, reconcile: Reconcile, default_spec_path: str) -> Dict[str, str]:
    """Every case of ``fixtures_dir``; returns ``{case: what failed}``."""
    default_spec = load_default_spec(default_spec_path)
    failures = {}
    for d in case_dirs(fixtures_dir):
        try:
            err = check_case(d, reconcile, default_spec)
        except Exception as e:  # noqa: BLE001 - report, do not stop at the first case
            err = f"{type(e).__name__}: {e}"
        if err is not None:
            failures[os.path.basename(d)] = err
    return failures
