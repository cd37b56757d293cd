#!/usr/bin/env python3
"""Runs the workspace's test binaries (what `cargo test` does), one at a
time by default or a few side by side, then its doc tests.

    tests/run-test-binaries.py [--jobs N] [CARGO TEST ARGS...] [-- TEST ARGS...]

On a machine with cores to spare, `--jobs 2` runs two binaries side by
side (each starts its own control plane). On this 2-core machine that was
slower: the end-to-end binaries keep their control planes busy, and two of
them at once took 1350 s of wall time where one at a time takes ~800 s, so
the default is 1. Each binary runs as
`cargo test` would run it (working directory: its package, `CARGO` and
`CARGO_MANIFEST_DIR` set), its output is printed whole when it ends (never
interleaved), and the slowest binaries of the last run start first
(durations kept in ~/.cache/wasm-operator/test-durations.json; they only
decide the order). Jobs: `--jobs`, else WASM_OPERATOR_TEST_JOBS, else 1.
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
FIRST_RUN_ESTIMATES = {"deploy": 900.0, "containment": 130.0, "languages": 120.0, "faults": 110.0}


def split_args(argv):
    jobs = int(os.environ.get("WASM_OPERATOR_TEST_JOBS") or 1)
    cargo_args, test_args = [], []
    rest = list(argv)
    if "--jobs" in rest:
        i = rest.index("--jobs")
        jobs = int(rest[i + 1])
        del rest[i : i + 2]
    if "--" in rest:
        i = rest.index("--")
        cargo_args, test_args = rest[:i], rest[i + 1 :]
    else:
        cargo_args = rest
    return max(1, jobs), cargo_args, test_args


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
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def save_durations(durations):
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = DURATIONS.with_suffix(".tmp")
        tmp.write_text(json.dumps(durations, indent=1, sort_keys=True))
        tmp.replace(DURATIONS)
    except OSError:
        pass


def main():
    jobs, cargo_args, test_args = split_args(sys.argv[1:])
    cargo = os.environ.get("CARGO") or shutil.which("cargo") or "cargo"
    status, binaries = build(cargo, cargo_args)
    if status != 0:
        print(f"==> cargo test --no-run failed ({status})", flush=True)
        return status
    known = dict(FIRST_RUN_ESTIMATES, **load_durations())
    # Slowest first (unknown ones last, in build order), so the long ones
    # do not end up alone at the end.
    binaries.sort(key=lambda b: -known.get(b["name"], 0.0))
    print(
        f"==> running {len(binaries)} test binaries, {jobs} at a time",
        flush=True,
    )
    lock = threading.Lock()
    queue = list(binaries)
    failed = []
    durations = dict(known)

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                binary = queue.pop(0)
            env = dict(os.environ, CARGO=cargo, CARGO_MANIFEST_DIR=binary["package"])
            started = time.monotonic()
            with tempfile.TemporaryFile(mode="w+") as out:
                code = subprocess.call(
                    [binary["exe"]] + test_args,
                    cwd=binary["package"],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
                took = time.monotonic() - started
                out.seek(0)
                text = out.read()
            with lock:
                durations[binary["name"]] = round(took, 1)
                if code != 0:
                    failed.append(binary["name"])
                print(
                    f"\n==> {binary['name']} ({Path(binary['exe']).name}): {took:.0f} s, exit {code}",
                    flush=True,
                )
                sys.stdout.write(text)
                sys.stdout.flush()

    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
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
