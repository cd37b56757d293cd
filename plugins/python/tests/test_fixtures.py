"""The shared golden fixtures (plugins/replicaset/fixtures), natively: each
case's proposal equals expected.yaml and the plugin converges (the checks
`wasm-operator reconcile --fixtures` runs on the component)."""

import os

import pytest
from conftest import DEFAULT_SPEC, FIXTURES
from jinghzhu_plugin_sdk import fixtures
from jinghzhu_plugin_sdk.output import Event

import replicaset

REQUIRED_CASES = [
    "scale-0-to-1", "scale-0-to-3", "scale-3-to-1", "terminating-pods", "desired-0",
    "converged-no-change", "stale-status-only", "foreign-pod-ignored", "failed-pod-replaced",
    "not-ready-pending",
]


def test_the_required_cases_exist():
    names = [os.path.basename(d) for d in fixtures.case_dirs(FIXTURES)]
    for case in REQUIRED_CASES:
        assert case in names


@pytest.mark.parametrize("case", [os.path.basename(d) for d in fixtures.case_dirs(FIXTURES)])
def test_case_matches_and_converges(case):
    err = fixtures.check_case(os.path.join(FIXTURES, case), replicaset.reconcile,
                              fixtures.load_default_spec(DEFAULT_SPEC))
    assert err is None, err


def test_a_wrong_expectation_is_detected():
    case_dir = os.path.join(FIXTURES, "scale-0-to-1")
    case = fixtures.load_case(case_dir)
    spec = fixtures.load_default_spec(DEFAULT_SPEC)
    out = fixtures.run(replicaset.reconcile, case)
    with open(os.path.join(case_dir, "expected.yaml")) as f:
        expected = fixtures.load_all(f.read())[0]
    assert fixtures.to_actions(case, out, spec) == expected
    out.create_pods.append(out.create_pods[0])
    assert fixtures.to_actions(case, out, spec) != expected

    def wrong(input):
        # An Event the expectation does not have (the plugin proposes none).
        o = replicaset.reconcile(input)
        o.events.append(Event.warning("ScalingUp", "Creating 1 pod(s)"))
        return o

    assert fixtures.check_case(case_dir, wrong, spec) is not None


def test_loader_reads_what_the_host_would_send():
    case = fixtures.load_case(os.path.join(FIXTURES, "scale-3-to-1"))
    jz = case.jinghzhu
    assert (jz.metadata.name, jz.metadata.generation, jz.desired) == ("web", 3, 1)
    assert jz.status.current == 3
    assert [(p.metadata.name, p.ready) for p in case.pods] == [
        ("web-4xq8z", True), ("web-b7k2m", False), ("web-r9t5w", True)]
    template = fixtures.load_case(os.path.join(FIXTURES, "scale-0-to-3")).jinghzhu.template
    assert template.labels["tier"] == "frontend"
    terminating = fixtures.load_case(os.path.join(FIXTURES, "terminating-pods"), controlled_only=False)
    assert terminating.now.seconds == 1_767_225_605
    assert sum(p.metadata.deletion_timestamp is not None for p in terminating.pods) == 1
    foreign = os.path.join(FIXTURES, "foreign-pod-ignored")
    assert len(fixtures.load_case(foreign, controlled_only=False).pods) == 2
    assert fixtures.load_case(foreign).pods == []
