#!/usr/bin/env bash
# The test command: sets everything up (tests/setup.sh; a fresh checkout gets
# a target directory cached outside the repository, tests/cached-target.sh),
# then runs every test of the workspace against a real local control plane
# (test binary by test binary, slowest first: tests/run-test-binaries.py), then prints
# a summary. Arguments go to `cargo test` (and after `--` to the binaries).
set -euo pipefail
cd "$(dirname "$0")/.."

start=$(date +%s)
# Names this run: a `dist` build that passed in full in one test binary is
# reused by the others (tests/e2e/src/deploy.rs).
export WASM_OPERATOR_TEST_RUN="${WASM_OPERATOR_TEST_RUN:-$start-$$}"
tests/cached-target.sh
# A whole run compiles the tests during the set-up, beside the Go builds; a
# run narrowed by arguments compiles what they name afterwards.
if (( $# == 0 )); then tests/setup.sh --compile-tests; else tests/setup.sh; fi

log=$(mktemp -t wasm-operator-tests.XXXXXX)
dist_log=$(mktemp -t wasm-operator-dist-build.XXXXXX)
dist_pid=""
trap 'rm -f "$log" "$dist_log"; [[ -n "$dist_pid" ]] && kill "$dist_pid" 2>/dev/null; true' EXIT
# A whole run builds the host as the Dockerfile does beside the tests (in
# full where that never passed for this key, else cheaper), and the two test
# binaries that need it run last (tests/e2e/src/bin/dist-build.rs).
dist_build=${CARGO_TARGET_DIR:-target}/debug/dist-build
if (( $# == 0 )) && [[ -x "$dist_build" ]]; then
    printf '\n==> the `dist` build the Dockerfile runs, beside the tests (its output: at the end)\n' >&2
    dist_started=$(date +%s)
    "$dist_build" >"$dist_log" 2>&1 &
    dist_pid=$!
    export WASM_OPERATOR_DIST_PREBUILD=$dist_pid
fi
# A whole run checks the style and the lints first (the same as a
# developer's `cargo fmt` and `cargo clippy`); a failure fails the run, but
# the tests still run so one push shows everything.
lint_status=0
if (( $# == 0 )); then
    printf '\n==> cargo fmt --all --check; cargo clippy --workspace --all-targets -- -D warnings\n' >&2
    lint_started=$(date +%s)
    cargo fmt --all --check || lint_status=1
    cargo clippy --workspace --all-targets --quiet -- -D warnings || lint_status=1
    printf '==> lints: exit %d, %d s\n' "$lint_status" "$(( $(date +%s) - lint_started ))" >&2
fi
printf '\n==> the scheduling of the test binaries (tests/run_test_binaries_test.py)\n' >&2
python3 tests/run_test_binaries_test.py
printf '\n==> cargo test --workspace (tests/run-test-binaries.py)\n' >&2
set +e
python3 tests/run-test-binaries.py "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [[ -n "$dist_pid" ]]; then
    dist_status=0
    wait "$dist_pid" || dist_status=$?
    dist_pid=""
    printf '\n==> the `dist` build: exit %d, waited for until %d s after its start (its own time: below)\n' "$dist_status" "$(( $(date +%s) - dist_started ))"
    cat "$dist_log"
    (( dist_status == 0 )) || status=1
fi

(( lint_status == 0 )) || status=1

printf '\n==> summary\n'
(( lint_status == 0 )) || echo "lints FAILED (cargo fmt --check or cargo clippy -D warnings: see above)"
grep -E '^test result:' "$log" | awk '
    { passed += $4; failed += $6; ignored += $8; suites += 1 }
    END { printf "%d test suites: %d passed, %d failed, %d ignored\n", suites, passed, failed, ignored }'
grep -E '^    [^ ].* (FAILED|failed)|^test .* FAILED$' "$log" || true
echo "slowest test binaries (wall time each):"
grep -E '^==> .*: [0-9]+ s, exit [0-9]+$' "$log" | sed 's/^==> /  /' | sort -t: -k2 -rn | head -12 || true
echo "total time: $(( $(date +%s) - start )) s"
exit "$status"
