#!/usr/bin/env bash
# The main job, end to end on an embedded local control plane:
# build the plugin, start etcd + kube-apiserver + kube-controller-manager,
# install the CRD, start the host with the example plugin, apply the sample
# objects and watch them converge, scale one up and down, delete a pod and
# watch it come back, then tear everything down.
#
#   examples/demo.sh          # runs through and stops
#   examples/demo.sh --keep   # leaves everything running until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."

keep=false
[[ "${1:-}" == "--keep" ]] && keep=true

bold=$'\033[1m'; plain=$'\033[0m'
say() { printf '\n%s==> %s%s\n' "$bold" "$*" "$plain"; }
show() { printf '%s$ %s%s\n' "$bold" "$*" "$plain"; "$@"; }

say "setting up: Rust targets, cargo-component, Kubernetes binaries, the plugin (tests/setup.sh)"
tests/setup.sh
say "building the host and the control-plane command"
cargo build --quiet -p wasm-operator -p local-control-plane

work=$(mktemp -d -t wasm-operator-demo.XXXXXX)
cp_pid=""; host_pid=""
cleanup() {
    say "tearing down"
    [[ -n "$host_pid" ]] && kill "$host_pid" 2>/dev/null && wait "$host_pid" 2>/dev/null || true
    [[ -n "$cp_pid" ]] && kill "$cp_pid" 2>/dev/null && wait "$cp_pid" 2>/dev/null || true
    rm -rf "$work"
    echo "done: no process or temporary directory left behind"
}
trap cleanup EXIT

say "starting a local control plane (etcd, kube-apiserver, kube-controller-manager)"
target/debug/local-control-plane up --kubeconfig-out "$work/kubeconfig" >"$work/control-plane.out" 2>"$work/control-plane.err" &
cp_pid=$!
for _ in $(seq 1 600); do
    grep -q '^ready' "$work/control-plane.out" 2>/dev/null && break
    kill -0 "$cp_pid" 2>/dev/null || { cat "$work/control-plane.err" >&2; exit 1; }
    sleep 0.2
done
grep -q '^ready' "$work/control-plane.out" || { echo "the control plane did not start" >&2; exit 1; }
cat "$work/control-plane.out"
export KUBECONFIG="$work/kubeconfig"
kube_bin=$(sed -n 's/^export PATH=\([^:]*\):.*/\1/p' "$work/control-plane.out")
export PATH="$kube_bin:$PATH"

say "installing the Jinghzhu CRD (generated from the Rust types: wasm-operator crd)"
target/debug/wasm-operator crd | kubectl apply -f -
show kubectl wait --for=condition=Established crd/jinghzhus.jinghzhu.io --timeout=60s

plugin=target/wasm32-wasip2/release/replicaset_plugin.wasm
say "starting the host with the example plugin ($plugin, $(wc -c <"$plugin") bytes)"
target/debug/wasm-operator run --plugin "$plugin" --metrics-addr 127.0.0.1:0 >"$work/host.log" 2>&1 &
host_pid=$!
sleep 1
kill -0 "$host_pid" 2>/dev/null || { cat "$work/host.log" >&2; exit 1; }

# Waits until Jinghzhu $1 reports $2 current pods, Running, with $2 live pods.
converge() {
    local name=$1 want=$2 got pods
    for _ in $(seq 1 240); do
        got=$(kubectl get jz "$name" -o jsonpath='{.status.current}/{.status.state}' 2>/dev/null || true)
        pods=$(kubectl get pods -l "jinghzhu.io/owner=$name" --no-headers 2>/dev/null | wc -l)
        if [[ "$got" == "$want/Running" && "$pods" == "$want" ]]; then
            echo "$name: $want/$want pods, Running"
            return 0
        fi
        sleep 0.25
    done
    echo "$name did not converge to $want (status $got, $pods pods); host log:" >&2
    tail -n 30 "$work/host.log" >&2
    return 1
}

say "applying the sample objects"
show kubectl apply -f examples/jinghzhu-web.yaml -f examples/jinghzhu-nginx.yaml
converge web 1
converge nginx 3
show kubectl get jz
show kubectl get pods -L jinghzhu.io/owner

say "scaling web up to 4"
show kubectl patch jz web --type merge -p '{"spec":{"desired":4}}'
converge web 4
show kubectl get jz web
say "scaling web down to 2"
show kubectl patch jz web --type merge -p '{"spec":{"desired":2}}'
converge web 2
show kubectl get jz web -o jsonpath='{.status}{"\n"}'

victim=$(kubectl get pods -l jinghzhu.io/owner=nginx -o jsonpath='{.items[0].metadata.name}')
say "deleting pod $victim of nginx: the host puts a new one in its place"
show kubectl delete pod "$victim"
sleep 1
converge nginx 3
show kubectl get pods -l jinghzhu.io/owner=nginx

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
