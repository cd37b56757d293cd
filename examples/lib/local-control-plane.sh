# Sourced by the example scripts (examples/demo.sh, examples/rollout-demo.sh):
# how they talk, and the local control plane they run against, torn down
# with the host when the script exits.
#
#   start_work NAME                      # a temporary directory in $work, cleaned up on exit
#   start_control_plane BIN [ARGS...]    # `BIN up ARGS...`; exports KUBECONFIG and the Kubernetes binaries' PATH
#   host_pid=$!                          # (the script's) the host, stopped on exit

bold=$'\033[1m'; plain=$'\033[0m'
say() { printf '\n%s==> %s%s\n' "$bold" "$*" "$plain"; }
show() { printf '%s$ %s%s\n' "$bold" "$*" "$plain"; "$@"; }

cp_pid=""; host_pid=""; work=""
cleanup() {
    say "tearing down"
    [[ -n "$host_pid" ]] && kill "$host_pid" 2>/dev/null && wait "$host_pid" 2>/dev/null || true
    [[ -n "$cp_pid" ]] && kill "$cp_pid" 2>/dev/null && wait "$cp_pid" 2>/dev/null || true
    [[ -n "$work" ]] && rm -rf "$work"
    echo "done: no process or temporary directory left behind"
}

start_work() {
    work=$(mktemp -d -t "wasm-operator-$1.XXXXXX")
    trap cleanup EXIT
}

start_control_plane() {
    say "starting a local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok with 3 simulated nodes)"
    "$1" up --kubeconfig-out "$work/kubeconfig" "${@:2}" >"$work/control-plane.out" 2>"$work/control-plane.err" &
    cp_pid=$!
    for _ in $(seq 1 600); do
        grep -q '^ready' "$work/control-plane.out" 2>/dev/null && break
        kill -0 "$cp_pid" 2>/dev/null || { cat "$work/control-plane.err" >&2; exit 1; }
        sleep 0.2
    done
    grep -q '^ready' "$work/control-plane.out" || { echo "the control plane did not start" >&2; exit 1; }
    cat "$work/control-plane.out"
    export KUBECONFIG="$work/kubeconfig"
    local kube_bin
    kube_bin=$(sed -n 's/^export PATH=\([^:]*\):.*/\1/p' "$work/control-plane.out")
    export PATH="$kube_bin:$PATH"
    show kubectl get nodes
}
