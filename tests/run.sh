#!/usr/bin/env bash
# The test command: sets everything up (tests/setup.sh; a fresh checkout gets
# a target directory cached outside the repository, tests/cached-target.sh),
# then runs every test of the workspace against a real local control plane,
# then prints a summary.
set -euo pipefail
cd "$(dirname "$0")/.."

start=$(date +%s)
tests/cached-target.sh
tests/setup.sh

log=$(mktemp -t wasm-operator-tests.XXXXXX)
trap 'rm -f "$log"' EXIT
printf '\n==> cargo test --workspace\n' >&2
set +e
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

printf '\n==> summary\n'
grep -E '^test result:' "$log" | awk '
    { passed += $4; failed += $6; ignored += $8; suites += 1 }
    END { printf "%d test suites: %d passed, %d failed, %d ignored\n", suites, passed, failed, ignored }'
grep -E '^    [^ ].* (FAILED|failed)|^test .* FAILED$' "$log" || true
echo "total time: $(( $(date +%s) - start )) s"
exit "$status"
