"""Scenario tests of the replicaset logic, on inputs built with the SDK's
testing builders (the same scenarios as plugins/replicaset/tests)."""

from jinghzhu_plugin_sdk import PodPhase, PodTemplate, log, status
from jinghzhu_plugin_sdk.testing import input, jinghzhu, pod

import replicaset


def test_scales_up_from_the_template_without_an_event_of_its_own():
    jz = jinghzhu("web", "shop", 3).template(PodTemplate({"app": "web"}, {"n": "x"}, '{"containers":[]}'))
    log.take_captured()
    out = replicaset.reconcile(input(jz).pod(pod("web-a", PodPhase.RUNNING)).view())
    assert len(out.create_pods) == 2
    c = out.create_pods[0]
    assert (c.generate_name, c.labels, c.annotations, c.spec_json) == ("web-", {"app": "web"}, {"n": "x"}, '{"containers":[]}')
    # The host's SuccessfulCreate names the pods: the plugin adds no Event.
    assert out.events == []
    assert out.status.message == "1/3 pods, 1/3 ready; creating 2"
    assert out.status.state == status.SCALING
    logged = log.take_captured()
    assert len(logged) == 1 and logged[0].message == "scaling up" and logged[0].field("creating") == "2"
    assert logged[0].level == log.Level.DEBUG


def test_scales_down_in_active_pods_order():
    jz = jinghzhu("web", "default", 1)
    view = input(jz).pods([
        pod("old-ready").created_at(100),
        pod("new-ready").created_at(200),
        pod("not-ready").ready(False).created_at(50),
        pod("pending-no-time", PodPhase.PENDING).no_creation_timestamp(),
    ]).view()
    log.take_captured()
    out = replicaset.reconcile(view)
    assert out.delete_pods == ["pending-no-time", "not-ready", "new-ready"]
    # The host's SuccessfulDelete names the pods: the plugin adds no Event.
    assert out.events == []
    logged = log.take_captured()
    assert len(logged) == 1 and logged[0].message == "scaling down" and logged[0].level == log.Level.DEBUG
    assert logged[0].field("deleting") == "pending-no-time,not-ready,new-ready"


def test_terminating_and_finished_pods_are_replaced_not_deleted():
    view = input(jinghzhu("web", "default", 2)).pods([
        pod("web-a"), pod("web-b").terminating(), pod("web-c", PodPhase.FAILED)]).view()
    out = replicaset.reconcile(view)
    assert out.delete_pods == [] and len(out.create_pods) == 1
    assert out.status.pod_list == ["web-a"]


def test_uncontrolled_pods_are_ignored_and_owner_deletion_stops_scaling():
    view = input(jinghzhu("web", "default", 1).deleting_at(5)).pods([pod("x").unowned()]).view()
    out = replicaset.reconcile(view)
    assert out.create_pods == [] and out.events == []
    assert out.status.message == "0/1 pods, 0/1 ready; Jinghzhu is being deleted"


def test_an_unchanged_status_is_not_written():
    jz = jinghzhu("web", "default", 1)
    first = replicaset.reconcile(input(jz).pod(pod("web-a")).view())
    assert first.status is not None and first.status.state == status.RUNNING
    again = replicaset.reconcile(input(jz.status(first.status)).pod(pod("web-a")).view())
    assert again.is_empty()
