#!/usr/bin/env bash
# The Memcached example end to end on an embedded local control plane:
# build the host and the Memcached plugin (contract 0.3), start etcd +
# kube-apiserver + kube-controller-manager (with its Deployment and
# ReplicaSet controllers) + kube-scheduler and kwok with three simulated
# nodes, install the CRDs, run the host with only declared controllers
# (`run --plugin-controllers`), declare the Memcached controller with the
# plugin in a ConfigMap, apply the sample Memcached and watch its Deployment's
# pods run and its status list them; scale it, delete its Deployment and
# watch it come back; then tear everything down.
#
#   examples/memcached/demo.sh          # runs through and stops
#   examples/memcached/demo.sh --keep   # leaves everything running until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/../.."

keep=false
[[ "${1:-}" == "--keep" ]] && keep=true

# shellcheck source=examples/lib/local-control-plane.sh
source examples/lib/local-control-plane.sh

say "setting up: Rust target, Kubernetes binaries (tests/setup.sh --demo)"
tests/setup.sh --demo
say "building the host, its compile helper, the control-plane command and the Memcached plugin"
cargo build --quiet -p wasm-operator -p local-control-plane
cargo build --quiet -p wasm-operator-compile
cargo build --quiet --release --target wasm32-wasip2 -p memcached-plugin
plugin=target/wasm32-wasip2/release/memcached_plugin.wasm

start_work memcached
start_control_plane target/debug/local-control-plane --workload-controllers

say "installing the CRDs: the host's (with PluginController) and Memcached's"
target/debug/wasm-operator crd | kubectl apply -f -
show kubectl apply -f examples/memcached/crd.yaml
show kubectl wait --for=condition=Established crd/plugincontrollers.wasm-operator.io crd/memcacheds.cache.example.com --timeout=60s

say "starting the host with declared controllers only"
target/debug/wasm-operator run --plugin-controllers >"$work/host.log" 2>&1 &
host_pid=$!
sleep 1
kill -0 "$host_pid" 2>/dev/null || { cat "$work/host.log" >&2; exit 1; }

say "declaring the Memcached controller, its plugin ($(wc -c <"$plugin") bytes) in a ConfigMap"
show kubectl create namespace wasm-operator
show kubectl -n wasm-operator create configmap memcached-plugin --from-file=plugin.wasm="$plugin"
show kubectl apply -f examples/memcached/controller.yaml
for _ in $(seq 1 240); do
    state=$(kubectl get plugincontroller memcached -o jsonpath='{.status.state}' 2>/dev/null || true)
    [[ "$state" == Serving ]] && break
    sleep 0.5
done
show kubectl get plugincontrollers

# Waits until Memcached $1 reports $2 ready replicas and $2 pods in status.nodes.
converge() {
    local name=$1 want=$2 got
    for _ in $(seq 1 480); do
        got=$(kubectl get memcached "$name" -o jsonpath='{.status.readyReplicas}/{.status.nodes[*]}' 2>/dev/null || true)
        if [[ "${got%%/*}" == "$want" && $(wc -w <<<"${got#*/}") == "$want" ]]; then
            echo "$name: $want ready, status.nodes: ${got#*/}"
            return 0
        fi
        sleep 0.25
    done
    echo "$name did not converge to $want (readyReplicas/nodes: $got); host log:" >&2
    tail -n 30 "$work/host.log" >&2
    return 1
}

say "applying the sample Memcached (size 3)"
show kubectl apply -f examples/memcached/memcached.yaml
converge memcached-sample 3
show kubectl get memcached,deployments,pods

say "scaling it to 5"
show kubectl patch memcached memcached-sample --type merge -p '{"spec":{"size":5}}'
converge memcached-sample 5

say "deleting its Deployment: the controller makes it again"
show kubectl delete deployment memcached-sample --wait=true
converge memcached-sample 5
show kubectl get memcached,deployments

say "the Memcached's Events and the host's log"
kubectl get events --field-selector involvedObject.kind=Memcached -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message | head -n 12
grep -E "declared|serving|refused" "$work/host.log" | tail -n 5 || true

if $keep; then
    say "everything keeps running (KUBECONFIG=$KUBECONFIG); Ctrl-C to stop"
    wait "$host_pid"
fi
