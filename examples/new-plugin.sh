#!/usr/bin/env bash
# From nothing to a plugin reconciling on a local control plane, timed:
# `wasm-operator new` a plugin crate, make the walk-through's one-line change
# (round `desired` up to an even number, plugins/README.md), build it in its
# own target directory as a plugin author would, run the host with it and
# wait until a Jinghzhu asking for 3 Pods has 4. The control plane starts
# first and is not timed (an author has a cluster already).
#
#   examples/new-plugin.sh
#
# Needs what tests/setup.sh installs. The SDK comes from this checkout
# (--sdk-path): the default git dependency needs access to GitHub.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

cargo build --quiet -p wasm-operator -p local-control-plane
cargo build --quiet -p wasm-operator-compile   # the compile helper beside the host (a build of its own: the host has no compiler)
wasm_operator="$repo/target/debug/wasm-operator"

source examples/lib/local-control-plane.sh
start_work new-plugin
start_control_plane target/debug/local-control-plane
"$wasm_operator" crd | kubectl apply -f - >/dev/null
kubectl wait --for=condition=Established crd/jinghzhus.jinghzhu.io --timeout=60s >/dev/null

now() { date +%s.%N; }
since() { printf '%.1f' "$(echo "$(now) - $1" | bc)"; }
start=$(now)

echo "==> wasm-operator new even-replicas"
"$wasm_operator" new even-replicas --path "$work/even-replicas" --sdk-path "$repo" >/dev/null
cd "$work/even-replicas"
sed -i 's/    let desired = jz.spec.desired;/    let desired = jz.spec.desired.next_multiple_of(2);/' src/lib.rs
grep -q 'next_multiple_of(2)' src/lib.rs || { echo "the template changed: update this script" >&2; exit 1; }

echo "==> cargo build --release --target wasm32-wasip2 (the crate's own target/)"
t=$(now)
env -u CARGO_TARGET_DIR cargo build --quiet --release --target wasm32-wasip2
build_s=$(since "$t")
plugin=target/wasm32-wasip2/release/even_replicas.wasm

echo "==> wasm-operator run --max-surge 1 --plugin target/live.wasm (a copy of $plugin); a Jinghzhu with desired: 3"
t=$(now)
# The host runs a copy, as plugins/README.md's walk-through says: replacing
# target/live.wasm (by a rename) swaps in any plugin.
cp "$plugin" target/live.wasm
# --max-surge 1: the host refuses more pods than `desired` unless allowed.
"$wasm_operator" run --max-surge 1 --plugin target/live.wasm --metrics-addr 127.0.0.1:0 >"$work/host.log" 2>&1 &
host_pid=$!
kubectl apply -f - >/dev/null <<'EOF'
apiVersion: jinghzhu.io/v1
kind: Jinghzhu
metadata:
  name: odd
  namespace: default
spec:
  desired: 3
EOF
for _ in $(seq 1 480); do
    got=$(kubectl get jz odd -o jsonpath='{.status.current}/{.status.state}' 2>/dev/null || true)
    [[ "$got" == "4/Running" ]] && break
    kill -0 "$host_pid" 2>/dev/null || { cat "$work/host.log" >&2; exit 1; }
    sleep 0.25
done
[[ "$got" == "4/Running" ]] || { echo "odd did not converge (status $got)" >&2; tail -n 20 "$work/host.log" >&2; exit 1; }
run_s=$(since "$t")
kubectl get jz odd

echo "from new to reconciled: $(since "$start") s (build ${build_s} s, host start to 4/4 pods ${run_s} s)"
