"""Every case in fixtures/: the proposal equals expected.yaml and the plugin
converges (what `wasm-operator reconcile --fixtures fixtures` checks on the
built component)."""

import os

import pytest
from conftest import DEFAULT_SPEC, FIXTURES
from jinghzhu_plugin_sdk import fixtures

import plugin

CASES = [os.path.basename(d) for d in fixtures.case_dirs(FIXTURES)]


def test_there_are_cases():
    assert CASES


@pytest.mark.parametrize("case", CASES)
def test_case(case):
    err = fixtures.check_case(os.path.join(FIXTURES, case), plugin.reconcile,
                              fixtures.load_default_spec(DEFAULT_SPEC))
    assert err is None, err
