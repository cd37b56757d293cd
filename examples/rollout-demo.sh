#!/usr/bin/env bash
# Canary rollouts end to end on an embedded local control plane (issue 41):
# start etcd + kube-apiserver + kube-controller-manager + kube-scheduler and
# kwok, install the CRDs (Jinghzhu and JinghzhuPlugin), start the host with
# --plugin-resource serving the JinghzhuPlugin `replicaset` from a
# ConfigMap, create 10 Jinghzhus and watch them converge; then
#   1. put the example plugin's v2 in the ConfigMap: with spec.rollout it
#      serves 25%, then 50%, then every object, each step judged against
#      the stable v1, and is promoted;
#   2. put a v3 in the ConfigMap that fails on a fifth of the objects (the
#      misbehaving test plugin built with `v2,fail-fifth`: a retryable error
#      for every object whose name's FNV-1a 64 hash is 0 modulo 5): it is
#      aborted at its first step by the failure-rate criterion, a
#      PluginRefused Warning names the rule, and v2 keeps serving (the
#      cohort is a hash of each object's UID: when v3's first 25% holds
#      neither failing object, they are deleted and created again, same
#      names, until one lands there);
# and print the time from v3 being offered to its abort. Then tear
# everything down.
#
#   examples/rollout-demo.sh          # runs through and stops
#   examples/rollout-demo.sh --keep   # leaves everything running until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."

keep=false
demo_started=$(date +%s)
[[ "${1:-}" == "--keep" ]] && keep=true
T=${CARGO_TARGET_DIR:-target}
OBJECTS=10

# shellcheck source=examples/lib/local-control-plane.sh
source examples/lib/local-control-plane.sh
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

say "setting up: Rust target, Kubernetes binaries, the plugin (tests/setup.sh --demo)"
started=$(date +%s)
tests/setup.sh --demo
say "building the host, the control-plane command, v2 (the example plugin, feature v2) and v3 (the misbehaving test plugin, features v2,fail-fifth)"
cargo build --quiet -p wasm-operator -p local-control-plane
cargo build --quiet -p wasm-operator-compile   # the compile helper beside the host (a build of its own: the host has no compiler)
# Each variant in its own target directory, so the v1 build stays as it is.
cargo build --quiet --release --target wasm32-wasip2 -p replicaset-plugin --features v2 --target-dir target/demo-v2
cargo build --quiet --release --target wasm32-wasip2 -p misbehaving-plugin --features v2,fail-fifth --target-dir target/demo-v3
echo "    (set-up and builds done: $(( $(date +%s) - started )) s)"
host_bin=$T/debug/wasm-operator
v1=$T/wasm32-wasip2/release/replicaset_plugin.wasm
v2=target/demo-v2/wasm32-wasip2/release/replicaset_plugin.wasm
v3=target/demo-v3/wasm32-wasip2/release/misbehaving_plugin.wasm

start_work rollout-demo
start_control_plane "$T/debug/local-control-plane"

say "installing the CRDs, Jinghzhu and JinghzhuPlugin (generated from the Rust types: wasm-operator crd)"
"$host_bin" crd | kubectl apply -f -
show kubectl wait --for=condition=Established crd/jinghzhus.jinghzhu.io crd/jinghzhuplugins.jinghzhu.io --timeout=60s

# The ConfigMap the resource names; replacing it offers a new plugin
# (`kubectl replace`, not `apply`: apply would copy the bytes into an
# annotation, which is limited to 256 KiB).
put_plugin() {
    kubectl create configmap replicaset-plugin --from-file=plugin.wasm="$1" --dry-run=client -o yaml |
        kubectl "$2" -f - >/dev/null
}
say "the plugin v1 in the ConfigMap default/replicaset-plugin, and the JinghzhuPlugin that serves it, with a rollout strategy"
put_plugin "$v1" create
cat >"$work/plugin.yaml" <<'EOF'
apiVersion: jinghzhu.io/v1
kind: JinghzhuPlugin
metadata:
  name: replicaset
spec:
  source:
    configMap: {namespace: default, name: replicaset-plugin, key: plugin.wasm}
  rollout:
    steps: [25, 50]                  # then 100
    stepSeconds: 4
    minReconciles: 1
    maxFailureIncreasePercent: 10
EOF
cat "$work/plugin.yaml"
kubectl apply -f "$work/plugin.yaml"

say "starting the host: wasm-operator run --plugin-resource replicaset"
"$host_bin" run --plugin-resource replicaset --metrics-addr 127.0.0.1:0 >"$work/host.log" 2>&1 &
host_pid=$!
sleep 1
kill -0 "$host_pid" 2>/dev/null || { cat "$work/host.log" >&2; exit 1; }

# name|current/ready/state|reconciledBy of every Jinghzhu.
objects_status() {
    kubectl get jz -o jsonpath='{range .items[*]}{.metadata.name}|{.status.current}/{.status.readyReplicas}/{.status.state}|{.status.reconciledBy}{"\n"}{end}'
}

# Waits until every Jinghzhu has $1 pods Running and Ready in its status and,
# when $2 is given, was last reconciled by a plugin matching the pattern $2.
converge_all() {
    local want=$1 by=${2:-} lines count
    for _ in $(seq 1 240); do
        lines=$(objects_status)
        count=$(grep -c "|$want/$want/Running|${by:+.*}${by}" <<<"$lines" || true)
        if [[ "$count" == "$(wc -l <<<"$lines")" ]] && (( count >= OBJECTS )); then
            echo "all $count objects: $want/$want pods Running and Ready${by:+, reconciled by $by}"
            return 0
        fi
        sleep 0.25
    done
    echo "the objects did not converge:" >&2
    objects_status >&2
    tail -n 30 "$work/host.log" >&2
    return 1
}

say "creating $OBJECTS Jinghzhus (web-0 ... web-$((OBJECTS - 1)), one pod each)"
for i in $(seq 0 $((OBJECTS - 1))); do
    printf 'apiVersion: jinghzhu.io/v1\nkind: Jinghzhu\nmetadata:\n  name: web-%d\nspec:\n  desired: 1\n---\n' "$i"
done >"$work/objects.yaml"
kubectl apply -f "$work/objects.yaml" >/dev/null
converge_all 1 "replicaset@"
show kubectl get jzp

# Objects whose status was last written by a plugin matching $1 (of reconciledBy).
objects_on() { echo "$(objects_status | grep -c "$1" || true)/$OBJECTS"; }
# Reconciles that failed, by the host's log.
failed_reconciles() { grep -c 'plugin failed' "$work/host.log" || true; }

# Polls the resource every 0.2 s, printing a line whenever its rollout or
# the figure the command $2 prints (column title $1) changes, until the
# rollout's phase is $3; at most $4 s.
watch_rollout() {
    local title=$1 figure=$2 until=$3 limit=$4 started line last="" phase on
    started=$(date +%s%N)
    printf '%8s  %-12s %-7s %-6s %s\n' "ELAPSED" "ROLLOUT" "WEIGHT" "STEP" "$title"
    while (( $(ms_since "$started") < limit * 1000 )); do
        line=$(kubectl get jzp replicaset -o jsonpath='{.status.rollout.phase}|{.status.rollout.weight}|{.status.rollout.step}' 2>/dev/null || true)
        on=$(eval "$figure")
        if [[ "$line|$on" != "$last" ]]; then
            IFS='|' read -r phase weight step <<<"$line"
            printf '%6d ms  %-12s %-7s %-6s %s\n' "$(ms_since "$started")" "${phase:--}" "${weight:--}" "${step:--}" "$on"
            last="$line|$on"
        fi
        [[ "${line%%|*}" == "$until" ]] && return 0
        sleep 0.2
    done
    echo "the rollout did not reach $until within $limit s; host log:" >&2
    tail -n 30 "$work/host.log" >&2
    return 1
}

say "rolling out v2: replacing the ConfigMap's plugin with v2 (status messages start with [v2])"
echo "(a source that keeps moving within --min-swap-interval-secs, 10 s by default, is held as flapping; one move is offered at once)"
put_plugin "$v2" replace
watch_rollout "OBJECTS ON V2" 'objects_on "replicaset@.*+v2"' Promoted 120
converge_all 1 "replicaset@.*+v2"
show kubectl get jzp
show kubectl get jzp replicaset -o jsonpath='{.status.rollout}{"\n"}'
grep 'canary rollout' "$work/host.log" | cut -c1-220 || true

# FNV-1a 64 of $1, modulo $2 (unsigned): the hash of the host's canary
# cohort (of an object's UID, in ten-thousandths) and of fail-fifth (of its
# name, modulo 5).
fnv_mod() {
    local s=$1 m=$2 h=-3750763034362895579 i c
    for ((i = 0; i < ${#s}; i++)); do
        printf -v c '%d' "'${s:i:1}"
        h=$(( (h ^ c) * 1099511628211 ))
    done
    echo $(( ( ((h >> 1) & 0x7fffffffffffffff) % m * 2 + (h & 1) ) % m ))
}

# Lists name, cohort position and whether v3 fails it, for every object;
# succeeds when v3's first cohort (25%: positions below 2500) holds one it fails.
first_cohort_fails() {
    local name uid position fails hit=1
    printf '  %-10s %-14s %s\n' OBJECT "COHORT (0-9999)" "V3 FAILS IT"
    while IFS='|' read -r name uid; do
        position=$(fnv_mod "$uid" 10000)
        fails=no; [[ $(fnv_mod "$name" 5) == 0 ]] && fails=yes
        (( position < 2500 )) && [[ $fails == yes ]] && hit=0
        printf '  %-10s %-14s %s\n' "$name" "$position$( (( position < 2500 )) && echo ' (25%)')" "$fails"
    done < <(kubectl get jz -o jsonpath='{range .items[*]}{.metadata.name}|{.metadata.uid}{"\n"}{end}')
    return $hit
}

say "which objects v3 fails (name hash) and which its first step serves (UID hash)"
if ! first_cohort_fails; then
    # UIDs are random: v3's first 25% may hold neither failing name (then v3
    # would pass its first step and fail a later one). The failing objects
    # are deleted and created again (same names, new UIDs) until one lands
    # there: still the same fifth of the objects fails.
    failing=()
    for i in $(seq 0 $((OBJECTS - 1))); do
        [[ $(fnv_mod "web-$i" 5) == 0 ]] && failing+=("web-$i")
    done
    tries=0
    while :; do
        tries=$((tries + 1))
        (( tries <= 100 )) || { echo "no failing object landed in the first cohort" >&2; exit 1; }
        for name in "${failing[@]}"; do
            kubectl delete jz "$name" --wait=true >/dev/null
            printf 'apiVersion: jinghzhu.io/v1\nkind: Jinghzhu\nmetadata:\n  name: %s\nspec:\n  desired: 1\n' "$name" |
                kubectl create -f - >/dev/null
        done
        first_cohort_fails >/dev/null && break
    done
    echo "none of the failing fifth was in v3's first cohort: ${failing[*]} deleted and created again $tries time(s)"
    first_cohort_fails || true
    converge_all 1 "replicaset@.*+v2"
fi

say "rolling out v3 (fails on a fifth of the objects): replacing the ConfigMap's plugin with v3"
failed_before=$(failed_reconciles)
offered=$(date +%s%N)
put_plugin "$v3" replace
watch_rollout "FAILED RECONCILES" 'echo $(( $(failed_reconciles) - failed_before ))' Aborted 120
abort_ms=$(ms_since "$offered")
show kubectl get jzp
show kubectl get jzp replicaset -o jsonpath='{.status.rollout}{"\n"}'
show kubectl get events --field-selector involvedObject.kind=JinghzhuPlugin,reason=PluginRefused
grep -E 'canary rollout|plugin failed' "$work/host.log" | tail -n 6 | cut -c1-260 || true

say "v2 still serves every object: each reconciled by v2 again, and scaling a failing one works"
converge_all 1 "replicaset@.*+v2"
v2_digest=sha256:$(sha256sum "$v2" | cut -d' ' -f1)
serving=$(kubectl get jzp replicaset -o jsonpath='{.status.digest}')
[[ "$serving" == "$v2_digest" ]] || { echo "the resource serves $serving, not v2 ($v2_digest)" >&2; exit 1; }
echo "the resource serves v2 ($serving)"
show kubectl patch jz web-2 --type merge -p '{"spec":{"desired":2}}'
for _ in $(seq 1 120); do
    [[ $(kubectl get jz web-2 -o jsonpath='{.status.current}/{.status.readyReplicas}/{.status.state}') == 2/2/Running ]] && break
    sleep 0.25
done
show kubectl get jz -o custom-columns=NAME:.metadata.name,CURRENT:.status.current,STATE:.status.state,RECONCILED-BY:.status.reconciledBy

# The time (ms since the epoch) of the last host log line matching $1 ("" if none).
log_ms() {
    local line
    line=$(grep "$1" "$work/host.log" | tail -n 1 | cut -d' ' -f1)
    [[ -n "$line" ]] && date -d "$line" +%s%3N 2>/dev/null || true
}
say "v3 was aborted $abort_ms ms after it was offered (ConfigMap replaced -> rollout Aborted in the resource's status)"
started_ms=$(log_ms 'canary rollout started.*misbehaving')
first_failure=$(grep 'plugin failed' "$work/host.log" | sed -n "$((failed_before + 1))p" | cut -d' ' -f1)
first_failure=$([[ -n "$first_failure" ]] && date -d "$first_failure" +%s%3N || true)
aborted=$(log_ms 'canary rollout aborted')
if [[ -n "$started_ms" && -n "$first_failure" && -n "$aborted" ]]; then
    echo "    by the host's log: offered -> v3's rollout started $(( started_ms - offered / 1000000 )) ms (vetted: compiled and smoke-reconciled);"
    echo "    started -> v3's first failed reconcile $(( first_failure - started_ms )) ms; first failed reconcile -> abort $(( aborted - first_failure )) ms"
fi
echo "    (the demo ran for $(( $(date +%s) - demo_started )) s)"

if $keep; then
    say "everything is running; in another shell:"
    echo "  export KUBECONFIG=$KUBECONFIG PATH=$kube_bin:\$PATH"
    echo "  kubectl get jzp -w"
    echo "Ctrl-C to stop"
    wait "$host_pid"
fi
