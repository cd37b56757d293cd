#!/usr/bin/env bash
# The main job, end to end on an embedded local control plane:
# build the plugin, start etcd + kube-apiserver + kube-controller-manager +
# kube-scheduler and kwok with three simulated nodes (pods really get
# scheduled, run and become Ready), install the CRD, start the host with the
# example plugin, apply the sample objects and watch their pods become
# Running and Ready, scale one up and down, delete a pod and make another one
# fail and watch both get replaced, swap the plugin for a second version in
# the running host and back (every object reconciled by the new plugin, no
# restart), then tear everything down.
#
#   examples/demo.sh          # runs through and stops
#   examples/demo.sh --keep   # leaves everything running until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."

keep=false
demo_started=$(date +%s)
[[ "${1:-}" == "--keep" ]] && keep=true

# shellcheck source=examples/lib/local-control-plane.sh
source examples/lib/local-control-plane.sh

say "setting up: Rust target, Kubernetes binaries, the plugin (tests/setup.sh --demo)"
started=$(date +%s)
tests/setup.sh --demo
say "building the host, the control-plane command and a second version of the plugin (feature v2)"
# One after the other: on 2 cores, the Go build beside the host's build
# made the cold start slower (564 s to pods Running against 533 s).
cargo build --quiet -p wasm-operator -p local-control-plane
cargo build --quiet -p wasm-operator-compile   # the compile helper beside the host (a build of its own: the host has no compiler)
# v2 in its own target directory, so the v1 build in target/ stays as it is.
cargo build --quiet --release --target wasm32-wasip2 -p replicaset-plugin --features v2 --target-dir target/demo-v2
echo "    (set-up and builds done: $(( $(date +%s) - started )) s)"

start_work demo
start_control_plane target/debug/local-control-plane

say "installing the Jinghzhu CRD (generated from the Rust types: wasm-operator crd)"
target/debug/wasm-operator crd | kubectl apply -f -
show kubectl wait --for=condition=Established crd/jinghzhus.jinghzhu.io --timeout=60s

v1=target/wasm32-wasip2/release/replicaset_plugin.wasm
v2=target/demo-v2/wasm32-wasip2/release/replicaset_plugin.wasm
# The host watches this file: replacing it swaps the plugin.
plugin=$work/plugin.wasm
cp "$v1" "$plugin"
say "starting the host with the example plugin ($v1, $(wc -c <"$plugin") bytes, copied to $plugin)"
target/debug/wasm-operator run --plugin "$plugin" --metrics-addr 127.0.0.1:0 >"$work/host.log" 2>&1 &
host_pid=$!
sleep 1
kill -0 "$host_pid" 2>/dev/null || { cat "$work/host.log" >&2; exit 1; }

# Live pods of Jinghzhu $1 (not terminating, not finished) that are Running and Ready.
running_ready() {
    kubectl get pods -l "jinghzhu.io/owner=$1" -o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}|{.status.phase}|{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null |
        grep -c '^|Running|True$' || true
}

# Waits until Jinghzhu $1 reports $2 current and $2 ready pods, state Running,
# and $2 of its pods really are Running and Ready.
converge() {
    local name=$1 want=$2 got pods
    for _ in $(seq 1 240); do
        got=$(kubectl get jz "$name" -o jsonpath='{.status.current}/{.status.readyReplicas}/{.status.state}' 2>/dev/null || true)
        pods=$(running_ready "$name")
        if [[ "$got" == "$want/$want/Running" && "$pods" == "$want" ]]; then
            echo "$name: $want/$want pods Running and Ready, status Running"
            return 0
        fi
        sleep 0.25
    done
    echo "$name did not converge to $want (status current/ready/state $got, $pods pods Running and Ready); host log:" >&2
    tail -n 30 "$work/host.log" >&2
    return 1
}

say "applying the sample objects"
applied=$(date +%s%N)
show kubectl apply -f examples/jinghzhu-web.yaml -f examples/jinghzhu-nginx.yaml
converge web 1
converge nginx 3
echo "all 4 pods Running and Ready $(( ($(date +%s%N) - applied) / 1000000 )) ms after kubectl apply, $(( $(date +%s) - demo_started )) s after the demo started"
show kubectl get jz
show kubectl get pods -o wide -L jinghzhu.io/owner

say "scaling web up to 4"
show kubectl patch jz web --type merge -p '{"spec":{"desired":4}}'
converge web 4
show kubectl get jz web
say "scaling web down to 2 (the two deleted pods stay Terminating for their 30 s grace period, and do not count)"
show kubectl patch jz web --type merge -p '{"spec":{"desired":2}}'
converge web 2
show kubectl get pods -l jinghzhu.io/owner=web
show kubectl get jz web -o jsonpath='{.status}{"\n"}'

victim=$(kubectl get pods -l jinghzhu.io/owner=nginx -o jsonpath='{.items[0].metadata.name}')
say "deleting pod $victim of nginx: the host puts a new one in its place"
show kubectl delete pod "$victim"
sleep 1
converge nginx 3
show kubectl get pods -l jinghzhu.io/owner=nginx

# A live pod (the one deleted above is still Terminating).
victim=$(kubectl get pods -l jinghzhu.io/owner=nginx -o jsonpath='{range .items[*]}{.metadata.name}|{.metadata.deletionTimestamp}|{.status.phase}{"\n"}{end}' |
    grep '^[^|]*||Running$' | head -n 1 | cut -d'|' -f1)
say "making pod $victim of nginx fail (the simulated kubelet obeys the annotation stage.jinghzhu.io/fail): the host replaces it"
show kubectl annotate pod "$victim" stage.jinghzhu.io/fail=true
sleep 1
converge nginx 3
echo "the failed pod stays (Error), as a ReplicaSet leaves it; three others run:"
show kubectl get pods -l jinghzhu.io/owner=nginx
show kubectl get jz

# Replaces the watched plugin file with $1 (write, then rename: what a
# ConfigMap volume or an editor does) and waits until every Jinghzhu's status
# was written by a plugin whose `reconciledBy` matches the pattern $2.
swap_to() {
    local file=$1 suffix=$2 started by
    started=$(date +%s%N)
    cp "$file" "$plugin.new" && mv "$plugin.new" "$plugin"
    for _ in $(seq 1 240); do
        by=$(kubectl get jz -o jsonpath='{range .items[*]}{.status.reconciledBy}{"\n"}{end}')
        if [[ -n "$by" ]] && ! grep -qv "$suffix" <<<"$by"; then
            echo "every object reconciled by the new plugin $(( ($(date +%s%N) - started) / 1000000 )) ms after the file was replaced"
            return 0
        fi
        sleep 0.1
    done
    echo "the swap to $file did not reach every object; host log:" >&2
    tail -n 30 "$work/host.log" >&2
    return 1
}

say "hot swap: replacing the plugin with version 2 (its status messages start with [v2]) in the running host"
swap_to "$v2" "+v2 (sha256:"
show kubectl get jz -o custom-columns=NAME:.metadata.name,MESSAGE:.status.message
show kubectl get jz
converge web 2
converge nginx 3
say "hot swap back to version 1"
swap_to "$v1" "@[0-9.]* (sha256:"
show kubectl get jz -o custom-columns=NAME:.metadata.name,MESSAGE:.status.message
show kubectl get jz
grep -E 'swap|swapped' "$work/host.log" | tail -n 4 || true

say "Events recorded on the Jinghzhus"
show kubectl get events --field-selector involvedObject.kind=Jinghzhu --sort-by=.lastTimestamp
say "the host's log (last lines)"
tail -n 12 "$work/host.log"

if $keep; then
    say "everything is running; in another shell:"
    echo "  export KUBECONFIG=$KUBECONFIG PATH=$kube_bin:\$PATH"
    echo "  kubectl get jz -w"
    echo "Ctrl-C to stop"
    wait "$host_pid"
fi
