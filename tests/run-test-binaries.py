#!/usr/bin/env python3
"""Runs the workspace's test binaries (what `cargo test` does), several side
by side as the machine's cores allow, then its doc tests.

    tests/run-test-binaries.py [--jobs N|auto] [CARGO TEST ARGS...] [-- TEST ARGS...]

Each binary runs as `cargo test` would run it (working directory: its
package, `CARGO` and `CARGO_MANIFEST_DIR` set); its output is printed whole
when it ends (never interleaved), with its wall time and the CPU time it
and the processes it reaped used (its control plane, builds, plugins).
Both are kept in ~/.cache/wasm-operator/test-durations.json and decide only
the order and the pairing of the next run (see `Scheduler`): by default
(`auto`) a binary starts while the cores the running ones used on average
last time, plus its own, fit in the machine's cores (`WASM_OPERATOR_TEST_CORES`,
default: all). On this 2-core machine most end-to-end binaries use about one
core (they wait on Leases, timeouts and their control plane), the deploy,
languages, containment and shards binaries 1.5-1.9: running any two at once
(`--jobs 2`) took 1350 s where one at a time took ~800 s, pairing by cores
does not put two heavy ones together. Jobs: `--jobs`, else
WASM_OPERATOR_TEST_JOBS, else `auto`; `--jobs 1` runs one at a time.
The exit status is non-zero when a build or any binary failed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CACHE = Path(
    os.environ.get("WASM_OPERATOR_KUBE_CACHE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wasm-operator"
)
DURATIONS = CACHE / "test-durations.json"
# Seconds, for the order when no run was recorded yet (a fresh machine):
# `deploy` builds the `dist` binary, minutes on a cold cache.
FIRST_RUN_ESTIMATES = {"deploy": 900.0, "containment": 130.0, "languages": 120.0, "languages_controller": 120.0, "faults": 110.0}
# The binaries that run the Dockerfile's `dist` build (e2e_tests::deploy::host_binary).
# While tests/run.sh builds it beside the tests (WASM_OPERATOR_DIST_PREBUILD
# names that build's process) they start last (started first, each would wait for
# the build in a test slot), and the build counts as one core while it runs.
NEEDS_DIST = ("deploy", "containment", "fencing")


def prebuild_running():
    try:
        pid = int(os.environ.get("WASM_OPERATOR_DIST_PREBUILD") or 0)
    except ValueError:
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A finished child not yet reaped by its shell is a zombie: done.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def split_args(argv):
    jobs = os.environ.get("WASM_OPERATOR_TEST_JOBS") or "auto"
    cargo_args, test_args = [], []
    rest = list(argv)
    if "--jobs" in rest:
        i = rest.index("--jobs")
        jobs = rest[i + 1]
        del rest[i : i + 2]
    if "--" in rest:
        i = rest.index("--")
        cargo_args, test_args = rest[:i], rest[i + 1 :]
    else:
        cargo_args = rest
    return jobs, cargo_args, test_args


def scope(cargo_args):
    """`--workspace`, unless the arguments name packages (`-p`, `--package`)."""
    named = any(a in ("-p", "--package") or a.startswith("--package=") for a in cargo_args)
    return [] if named else ["--workspace"]


def build(cargo, cargo_args):
    """`cargo test --no-run`: the test executables, with their packages."""
    cmd = [cargo, "test", *scope(cargo_args), "--no-run", "--message-format=json-render-diagnostics"]
    proc = subprocess.Popen(cmd + cargo_args, stdout=subprocess.PIPE, text=True)
    binaries = []
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if (
            msg.get("reason") == "compiler-artifact"
            and msg.get("profile", {}).get("test")
            and msg.get("executable")
        ):
            target = msg["target"]
            package = str(Path(msg["manifest_path"]).parent)
            name = target["name"] if "lib" not in target["kind"] else f"{target['name']} (unit)"
            binaries.append({"name": name, "exe": msg["executable"], "package": package})
    return proc.wait(), binaries


def load_durations():
    """{name: {"secs": wall seconds, "cores": CPU seconds per wall second}}
    of the last run (an older file holds seconds only)."""
    try:
        raw = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    known = {}
    for name, value in raw.items():
        if isinstance(value, dict):
            known[name] = {"secs": float(value.get("secs", 0.0)), "cores": float(value.get("cores", 1.0))}
        elif isinstance(value, (int, float)):
            known[name] = {"secs": float(value), "cores": 1.0}
    return known


def save_durations(durations):
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = DURATIONS.with_suffix(".tmp")
        tmp.write_text(json.dumps(durations, indent=1, sort_keys=True))
        tmp.replace(DURATIONS)
    except OSError:
        pass


class Scheduler:
    """Which binary starts next. With a number of jobs: that many at once,
    slowest first. With `auto`: binaries start while the cores they used on
    average in the last run (CPU time over wall time, their control planes
    and builds included) fit in the machine's cores, slowest first, so a
    binary that mostly waits (timeouts, Lease expiries) runs beside one
    that computes, and two that compute do not run at once; a binary never
    measured counts as one core. One always runs, whatever it needs."""

    def __init__(self, binaries, known, jobs):
        self.queue = sorted(binaries, key=lambda b: -known.get(b["name"], {}).get("secs", 0.0))
        if prebuild_running():
            self.queue.sort(key=lambda b: b["name"] in NEEDS_DIST)
        self.known = known
        self.auto = jobs == "auto"
        self.limit = 4 if self.auto else max(1, int(jobs))
        self.cores = float(os.environ.get("WASM_OPERATOR_TEST_CORES") or os.cpu_count() or 1)
        self.running = {}

    def cores_of(self, binary):
        return self.known.get(binary["name"], {}).get("cores", 1.0)

    def describe(self):
        if self.auto:
            return f"as many at once as fit in {self.cores:g} cores (by the cores each used last time), at most {self.limit}"
        return f"{self.limit} at a time"

    def next(self):
        """The binary to start now, or None (wait for one to finish)."""
        if not self.queue or len(self.running) >= self.limit:
            return None
        if not self.running or not self.auto:
            return self.queue.pop(0)
        load = sum(self.running.values()) + (1.0 if prebuild_running() else 0.0)
        for i, binary in enumerate(self.queue):
            if load + self.cores_of(binary) <= self.cores:
                return self.queue.pop(i)
        return None

    def started(self, binary):
        self.running[binary["name"]] = self.cores_of(binary)

    def finished(self, binary):
        self.running.pop(binary["name"], None)


def main():
    jobs, cargo_args, test_args = split_args(sys.argv[1:])
    cargo = os.environ.get("CARGO") or shutil.which("cargo") or "cargo"
    status, binaries = build(cargo, cargo_args)
    if status != 0:
        print(f"==> cargo test --no-run failed ({status})", flush=True)
        return status
    known = {name: {"secs": secs, "cores": 1.0} for name, secs in FIRST_RUN_ESTIMATES.items()}
    known.update(load_durations())
    scheduler = Scheduler(binaries, known, jobs)
    print(f"==> running {len(binaries)} test binaries, {scheduler.describe()}", flush=True)
    changed = threading.Condition()
    failed = []
    durations = dict(known)

    def run(binary):
        env = dict(os.environ, CARGO=cargo, CARGO_MANIFEST_DIR=binary["package"])
        started = time.monotonic()
        with tempfile.TemporaryFile(mode="w+") as out:
            child = subprocess.Popen(
                [binary["exe"]] + test_args,
                cwd=binary["package"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            # wait4: the binary's CPU time with that of the children it
            # reaped (its control plane, builds, plugins).
            # (Its returncode set, Popen does not try to reap it again.)
            _, raw, usage = os.wait4(child.pid, 0)
            code = child.returncode = os.waitstatus_to_exitcode(raw)
            took = time.monotonic() - started
            cpu = usage.ru_utime + usage.ru_stime
            cores = cpu / max(took, 0.1)
            out.seek(0)
            text = out.read()
        with changed:
            durations[binary["name"]] = {"secs": round(took, 1), "cores": round(cores, 2)}
            if code != 0:
                failed.append(binary["name"])
            print(
                f"\n==> {binary['name']} ({Path(binary['exe']).name}): {took:.0f} s, exit {code}",
                flush=True,
            )
            print(f"    (cpu {cpu:.0f} s: {cores:.2f} cores on average)", flush=True)
            sys.stdout.write(text)
            sys.stdout.flush()
            scheduler.finished(binary)
            changed.notify_all()

    threads = []
    with changed:
        while scheduler.queue:
            binary = scheduler.next()
            if binary is None:
                # Woken when a binary ends; the timeout notices the end of
                # the `dist` build beside them.
                changed.wait(timeout=5)
                continue
            scheduler.started(binary)
            thread = threading.Thread(target=run, args=(binary,))
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join()
    save_durations(durations)

    # Doc tests of the whole workspace, unless the arguments pick packages
    # or targets (`-p x`, `--test x`, ...): a run of a part skips them.
    picks = {"--lib", "--bin", "--bins", "--test", "--tests", "--bench", "--benches", "--example", "--examples"}
    if not picks.intersection(cargo_args) and scope(cargo_args):
        print("\n==> doc tests: cargo test --workspace --doc", flush=True)
        doc = subprocess.call([cargo, "test", "--workspace", "--doc"] + cargo_args + ["--"] + test_args)
        if doc != 0:
            failed.append("doc tests")
    if failed:
        print(f"==> failed: {', '.join(failed)}", flush=True)
        return 101
    return 0


if __name__ == "__main__":
    sys.exit(main())
