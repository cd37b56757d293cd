"""Unit tests of reconcile on inputs built with the SDK's builders."""

from jinghzhu_plugin_sdk import PodPhase, status
from jinghzhu_plugin_sdk.testing import input, jinghzhu, pod

import plugin


def test_creates_the_missing_pods():
    out = plugin.reconcile(input(jinghzhu("web", "default", 3)).pod(pod("web-a")).view())
    assert [c.generate_name for c in out.create_pods] == ["web-", "web-"]
    assert out.status.state == status.SCALING
    assert out.status.message == "1/3 pods, 1/3 ready; creating 2"


def test_deletes_pending_pods_first():
    view = input(jinghzhu("web", "default", 1)).pods([pod("web-a"), pod("web-b", PodPhase.PENDING)]).view()
    assert plugin.reconcile(view).delete_pods == ["web-b"]


def test_a_converged_object_needs_nothing():
    jz = jinghzhu("web", "default", 1)
    first = plugin.reconcile(input(jz).pod(pod("web-a")).view())
    assert plugin.reconcile(input(jz.status(first.status)).pod(pod("web-a")).view()).is_empty()
