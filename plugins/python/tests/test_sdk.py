"""The SDK's own parts: the 0.2 string table both ways, views, helpers."""

import pytest
from jinghzhu_plugin_sdk import Event, Output, PodCreate, PodPhase, ReconcileError, Status, kv, plugin, pod, status, time
from jinghzhu_plugin_sdk._wit import Err, wit
from jinghzhu_plugin_sdk.input import StringTable
from jinghzhu_plugin_sdk.output import decode_output, encode
from jinghzhu_plugin_sdk.testing import input, jinghzhu
from jinghzhu_plugin_sdk.testing import pod as a_pod


def test_string_table_decodes_utf8_by_byte_offsets():
    t = StringTable(wit.StringTable("é日x".encode(), [0, 2, 5, 6]))
    assert [t[i] for i in range(4)] == ["", "é", "日", "x"]
    with pytest.raises(IndexError):
        t[4]


def test_output_encoding_interns_and_round_trips():
    out = Output(
        create_pods=[PodCreate(generate_name="a-", labels={"k": "v"}), PodCreate(generate_name="a-", labels={"k": "v"})],
        delete_pods=["a-1", "v"],
        status=Status(1, ["a-1"], "Running", "ok", 3),
        requeue_after_ms=5,
        events=[Event.warning("Bad", "ünïcode")],
    )
    raw = encode(out)
    assert raw.strings.ends[0] == 0, "string 0 is the empty string"
    assert len(raw.strings.ends) == len(set(["", "a-", "k", "v", "a-1", "Running", "ok", "Bad", "ünïcode"]))
    assert len(raw.pairs) == 1, "identical label maps share one span"
    assert decode_output(raw) == out


def test_views_read_what_was_encoded():
    view = input(jinghzhu("web", "ns", 2).label("team", "a").generation(4)).pod(
        a_pod("web-b", PodPhase.UNKNOWN).label("x", "1")).pod(a_pod("web-a")).now(9).view()
    jz = view.jinghzhu
    assert (jz.name, jz.metadata.namespace, jz.metadata.uid, jz.metadata.generation, jz.desired) == ("web", "ns", "uid-web", 4, 2)
    assert jz.metadata.labels == {"team": "a"} and jz.template is None and jz.status is None
    assert [p.name for p in view.pods] == ["web-a", "web-b"]
    assert view.pods[1].metadata.labels == {"x": "1"} and view.pods[1].phase == PodPhase.UNKNOWN
    assert view.pods[0].metadata.owner_references[0].kind == "Jinghzhu"
    assert view.pods[0].metadata.controller_uid() == "uid-web"
    assert all(pod.is_controlled_by(p, jz) for p in view.pods)
    assert view.now.seconds == 9


def test_pod_and_status_helpers_follow_the_rust_sdk():
    view = input(jinghzhu("w", "d", 3)).pods([a_pod("w-a"), a_pod("w-b").terminating(), a_pod("w-c", PodPhase.FAILED),
                                             a_pod("w-d", PodPhase.RUNNING).ready(False)]).view()
    assert [p.name for p in pod.live_pods(view.pods)] == ["w-a", "w-d"]
    assert pod.count_ready(view.pods) == 1
    assert pod.sorted_names(reversed(view.pods)) == ["w-a", "w-b", "w-c", "w-d"]
    assert status.state(0, 0, 3) == "Scaling"
    assert status.state(3, 2, 3) == "Pending"
    assert status.state(3, 3, 3) == "Running"
    assert status.state(0, 0, 0) == "Running"
    a = status.build(["b", "a"], "Running", "m", 1)
    assert (a.current, a.pod_list) == (2, ["a", "b"])
    assert status.status_equal(a, Status(2, ["b", "a"], "Running", "m", 1))
    assert status.status_patch(a, a) is None
    assert status.status_patch(None, a) == a
    assert kv.merge({"a": "1", "b": "2"}, {"b": "x"}) == {"a": "1", "b": "x"}
    assert pod.generate_name(view.jinghzhu) == "w-"
    assert pod.from_template(view.jinghzhu) == PodCreate(generate_name="w-")


def test_time_conversions():
    assert time.parse_rfc3339("2026-01-01T00:00:00Z").seconds == 1_767_225_600
    ts = time.parse_rfc3339("2023-11-14T22:13:20.5Z")
    assert (ts.seconds, ts.nanoseconds) == (1_700_000_000, 500_000_000)
    assert time.parse_rfc3339("2023-11-15T00:13:20+02:00").seconds == 1_700_000_000
    assert time.format_rfc3339(ts) == "2023-11-14T22:13:20.5Z"
    assert time.age_seconds(time.from_secs(10), time.from_secs(70)) == 60
    with pytest.raises(ValueError):
        time.parse_rfc3339("yesterday")


def test_errors_become_err_results():
    raw = input(jinghzhu("w")).build()

    def fatal(_):
        raise ReconcileError.fatal("no")

    def bug(_):
        return {}["missing"]

    with pytest.raises(Err) as e:
        plugin.call(fatal, raw)
    assert e.value.value == wit.ReconcileError("no", False)
    with pytest.raises(Err) as e:
        plugin.call(bug, raw)
    assert e.value.value.retryable and "KeyError" in e.value.value.message
    info = plugin.reconciler("n", "1", fatal)().info()
    assert (info.name, info.version) == ("n", "1")
