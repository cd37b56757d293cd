#!/usr/bin/env python3
"""Unit tests of tests/run-test-binaries.py's scheduling (run by tests/run.sh
before the test binaries: `python3 tests/run_test_binaries_test.py`)."""

import importlib.util
import os
import subprocess
import sys
import time
import unittest
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "run_test_binaries", Path(__file__).with_name("run-test-binaries.py")
)
rtb = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rtb)


def binaries(*names):
    return [{"name": name, "package": "."} for name in names]


class WithEnv:
    """Sets environment variables for the length of a `with` block."""

    def __init__(self, **values):
        self.values = values
        self.saved = {}

    def __enter__(self):
        for key, value in self.values.items():
            self.saved[key] = os.environ.get(key)
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def __exit__(self, *_):
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class SchedulerTest(unittest.TestCase):
    known = {
        "deploy": {"secs": 900.0, "cores": 1.8},
        "smoke": {"secs": 300.0, "cores": 1.0},
        "host": {"secs": 70.0, "cores": 0.9},
        "containment": {"secs": 130.0, "cores": 1.0},
    }

    def scheduler(self):
        with WithEnv(WASM_OPERATOR_TEST_CORES="2"):
            return rtb.Scheduler(
                binaries("host", "containment", "deploy", "smoke"), self.known, "auto"
            )

    def test_slowest_first_without_a_dist_build_beside(self):
        with WithEnv(WASM_OPERATOR_DIST_PREBUILD=None):
            order = [b["name"] for b in self.scheduler().queue]
        self.assertEqual(order, ["deploy", "smoke", "containment", "host"])

    def test_the_binaries_that_need_the_dist_build_start_last_and_it_counts_as_a_core(self):
        build = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            with WithEnv(WASM_OPERATOR_DIST_PREBUILD=str(build.pid)):
                scheduler = self.scheduler()
                self.assertEqual(
                    [b["name"] for b in scheduler.queue],
                    ["smoke", "host", "deploy", "containment"],
                )
                first = scheduler.next()
                self.assertEqual(first["name"], "smoke")
                scheduler.started(first)
                # smoke (1.0) + the build (1.0) fill both cores: nothing else starts.
                self.assertIsNone(scheduler.next())
                build.kill()
                build.wait()
                # The build is done: host (0.9) fits beside smoke.
                self.assertEqual(scheduler.next()["name"], "host")
        finally:
            if build.poll() is None:
                build.kill()
                build.wait()

    def test_a_finished_but_unreaped_build_is_done(self):
        build = subprocess.Popen([sys.executable, "-c", "pass"])
        try:
            deadline = time.monotonic() + 10
            while True:
                with open(f"/proc/{build.pid}/stat") as stat:
                    if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
                self.assertLess(time.monotonic(), deadline, "the child never exited")
                time.sleep(0.05)
            with WithEnv(WASM_OPERATOR_DIST_PREBUILD=str(build.pid)):
                self.assertFalse(rtb.prebuild_running())
        finally:
            build.wait()

    def test_no_or_a_malformed_build_pid_means_none(self):
        for value in (None, "", "0", "not-a-pid"):
            with WithEnv(WASM_OPERATOR_DIST_PREBUILD=value):
                self.assertFalse(rtb.prebuild_running(), value)


if __name__ == "__main__":
    unittest.main()
