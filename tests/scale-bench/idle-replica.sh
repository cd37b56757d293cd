#!/usr/bin/env bash
# An idle replica (N = 0) of two builds side by side, alternating: VmRSS and
# the executable's resident pages (exec-pages.py beside this script), 20 s
# after /readyz, each start with a cold page cache for the binaries, with
# and without --keep-start-up-pages. Usage:
#   tests/scale-bench/idle-replica.sh OLD_DIR NEW_DIR [ROUNDS]
# Each DIR holds a wasm-operator (and its wasm-operator-compile, if the build
# has no compiler). Needs the local control plane and the example plugin
# built (`cargo build -p local-control-plane`, the plugin as in README.md).
# Full reports go to $OUT (default: a temporary directory).
set -euo pipefail
old=$1 new=$2 rounds=${3:-2}
repo=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
cp_bin=$target/debug/local-control-plane
plugin=$target/wasm32-wasip2/release/replicaset_plugin.wasm
work=$(mktemp -d -t crates-measure.XXXXXX)
out=${OUT:-$work/reports}; mkdir -p "$out"
cp_pid=""; host_pid=""
cleanup() {
    [[ -n "$host_pid" ]] && kill "$host_pid" 2>/dev/null && wait "$host_pid" 2>/dev/null || true
    [[ -n "$cp_pid" ]] && kill "$cp_pid" 2>/dev/null && wait "$cp_pid" 2>/dev/null || true
}
trap cleanup EXIT
"$cp_bin" up --no-controller-manager --no-nodes --kubeconfig-out "$work/kubeconfig" >"$work/cp.out" 2>"$work/cp.err" &
cp_pid=$!
for _ in $(seq 1 900); do grep -q '^ready' "$work/cp.out" 2>/dev/null && break; sleep 0.2; done
grep -q '^ready' "$work/cp.out" || { cat "$work/cp.err"; exit 1; }
export KUBECONFIG="$work/kubeconfig"
export PATH="$(sed -n 's/^export PATH=\([^:]*\):.*/\1/p' "$work/cp.out"):$PATH"
"$old/wasm-operator" crd | kubectl apply -f - >/dev/null
cp "$plugin" "$work/plugin.wasm"

cold() { python3 -c 'import os,sys
for p in sys.argv[1:]:
    os.posix_fadvise(os.open(p, os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)' "$@"; }

# start NAME DIR [flags...]: one host, measured 20 s after /readyz.
start() {
    local name=$1 dir=$2; shift 2
    cold "$dir"/wasm-operator*
    env -u WASM_OPERATOR_COMPILE_HELPER "$dir/wasm-operator" run --plugin "$work/plugin.wasm" \
        --metrics-addr 127.0.0.1:28111 --cache-dir "$work/cache-$(basename "$dir")" "$@" \
        >"$work/$name.log" 2>&1 &
    host_pid=$!
    for _ in $(seq 1 600); do curl -fs 127.0.0.1:28111/readyz >/dev/null 2>&1 && break; sleep 0.2; done
    sleep 20
    echo "== $name $*"
    python3 "$repo/tests/scale-bench/exec-pages.py" "$host_pid" --top 12 >"$out/$name.txt" 2>&1 || true
    grep -E "VmRSS|^  total|^text present|^compiler-only" "$out/$name.txt" || true
    kill "$host_pid"; wait "$host_pid" 2>/dev/null || true; host_pid=""
}
# Warm the precompiled caches (each build compiles once, unmeasured).
start warm-old "$old" >/dev/null; start warm-new "$new" >/dev/null
for round in $(seq 1 "$rounds"); do
    start "old-$round" "$old"
    start "new-$round" "$new"
    start "old-keep-$round" "$old" --keep-start-up-pages
    start "new-keep-$round" "$new" --keep-start-up-pages
done
grep -h "compile\|helper" "$work"/warm-new.log | head -5 || true
