#!/usr/bin/env bash
# Installs and builds everything the tests and the demo need, on a fresh
# machine or a warm one (every step is skipped or near-instant when done):
#   - the Rust targets for plugins (wasm32-wasip2, and wasm32-wasip1 for cargo-component)
#   - cargo-component (not with --demo: only the tests of the `cargo component
#     build` path need it, and on a cold machine it is a long source build)
#   - kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, built
#     with Go from the k8s.io/kubernetes module, and kwok (the simulated nodes),
#     with one `go build` of tests/control-plane/kubernetes; cached in
#     ~/.cache/wasm-operator (etcd comes from the etcd-bin-vendored-linux-amd64
#     crate)
#   - not with --demo: the OCI registry (distribution), oras and cosign for the
#     OCI tests and Helm for the chart tests, built by one more `go build` of
#     the same Go module (so the libraries they share compile once) and
#     cached the same way
#   - the example plugin: cargo build --target wasm32-wasip2 (and, not with
#     --demo, cargo component build)
#   - not with --demo: the Python, JavaScript and Go plugin toolchains (a
#     venv with componentize-py; npm ci from plugins/js/package-lock.json;
#     wit-bindgen-cli and wasm-tools from crates, the Go runtime package and
#     the WASI adapter from their crates: plugins/go/toolchain.sh), cached in
#     ~/.cache/wasm-operator
#
#   tests/setup.sh                  # everything the tests need
#   tests/setup.sh --compile-tests  # and compile them (tests/run.sh without arguments)
#   tests/setup.sh --demo           # only what examples/demo.sh needs
#
# After the Rust targets, the Go builds (with the control-plane command that
# runs them) go in one lane and the Rust and plugin tools in another, side
# by side (their lines prefixed [go] and [rust]). Each step ends with a line saying how long
# it took and the CPU time it used.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_COMPONENT_VERSION=0.21.1

demo=false
compile_tests=false
case "${1:-}" in
    --demo) demo=true ;;
    --compile-tests) compile_tests=true ;;
    "") ;;
    *) echo "usage: tests/setup.sh [--demo | --compile-tests]" >&2; exit 2 ;;
esac

# Sets cpu_now: CPU seconds (user + system) of the commands this shell (or
# lane) ran and waited for, from /proc (`times` would have to write a file:
# in a pipe or `$(...)` it reports a fresh subshell's zeros).
ticks=$(getconf CLK_TCK)
cpu_now=0
read_cpu() {
    local stat
    read -r -a stat <"/proc/$BASHPID/stat"
    cpu_now=$(( (stat[15] + stat[16]) / ticks ))
}
current=""; step_start=0; step_cpu=0
finish_step() {
    [[ -z "$current" ]] && return 0
    read_cpu
    printf '    (%s: %d s, %d s of CPU)\n' "$current" "$(( $(date +%s) - step_start ))" "$(( cpu_now - step_cpu ))" >&2
    current=""
}
step() {
    finish_step
    read_cpu
    current=$1; step_start=$(date +%s); step_cpu=$cpu_now
    printf '\n==> %s\n' "$*" >&2
}
trap finish_step EXIT

step "Rust targets for plugins (and clippy, rustfmt for the tests)"
if $demo; then
    rustup target add wasm32-wasip2
else
    rustup target add wasm32-wasip2 wasm32-wasip1
    # tests/run.sh checks the style and the lints.
    rustup component add clippy rustfmt
fi

command -v go >/dev/null || { echo "Go is required to build kube-apiserver and kwok: install Go 1.26.7+ and retry" >&2; exit 1; }

# Two lanes side by side, each step with its time: the Go builds, and the
# Rust and plugin tools. Each spends part of a cold run downloading (Go
# modules, crates, wheels, npm packages) while the other compiles.
go_lane() {
    step "the control-plane command: cargo build -p local-control-plane"
    cargo build --quiet -p local-control-plane
    # Run directly, not with `cargo run`: the Rust lane's cargo holds the
    # build directory's lock for minutes at a time.
    local control_plane=${CARGO_TARGET_DIR:-target}/debug/local-control-plane
    step "Kubernetes binaries and kwok (built with Go once, then cached)"
    "$control_plane" build
    if ! $demo; then
        step "OCI registry, oras, cosign and Helm for the tests (built with Go once, in the same module, then cached)"
        "$control_plane" tools
    fi
    finish_step
}

rust_lane() {
    if ! $demo && ! cargo component --version 2>/dev/null | grep -q "$CARGO_COMPONENT_VERSION"; then
        # --debug: an optimised build of cargo-component takes about three times
        # as long to compile, and its speed does not matter for a small plugin.
        # Without debug info: measured cold here one after the other, 155 s
        # wall / 285 s CPU with it (a 339 MB executable) against 128 s / 238 s
        # without (75 MB; the first build also fetched the sources).
        step "installing cargo-component $CARGO_COMPONENT_VERSION (once; a few minutes)"
        CARGO_PROFILE_DEV_DEBUG=false \
            cargo install --quiet cargo-component --locked --debug --version "$CARGO_COMPONENT_VERSION"
    fi
    step "example plugin: cargo build --target wasm32-wasip2"
    cargo build --quiet --release --target wasm32-wasip2 -p replicaset-plugin
    ls -l target/wasm32-wasip2/release/replicaset_plugin.wasm
    if ! $demo; then
        step "example plugin: cargo component build"
        cargo component build --quiet --release -p replicaset-plugin
        ls -l target/wasm32-wasip1/release/replicaset_plugin.wasm
        # Plugins in Python and JavaScript (plugins/python, plugins/js): the
        # toolchains only; tests build the components (plugins/build-components.sh).
        step "Python plugin toolchain: venv with componentize-py 0.25.1 (pip; cached in ~/.cache/wasm-operator)"
        plugins/python/toolchain.sh
        step "JavaScript plugin toolchain: npm ci of plugins/js (componentize-js 0.23.0, jco 1.35.0; cached by lockfile digest)"
        plugins/js/toolchain.sh
        step "Go plugin toolchain: wit-bindgen-cli 0.63.0 and wasm-tools 1.263.0 (cargo install, once), the Go runtime package and the WASI adapter from their crates (cached)"
        plugins/go/toolchain.sh
    fi
    if $compile_tests; then
        step "the workspace's tests: cargo test --workspace --no-run"
        cargo test --quiet --workspace --no-run
    fi
    finish_step
}

# Each lane in a subshell of its own (its own step times and CPU), its lines
# prefixed with its name; the set-up fails if either lane does.
finish_step
read_cpu
lanes_started=$(date +%s); lanes_cpu=$cpu_now
{ go_lane 2>&1 | sed -u 's/^/[go]   /' >&2; } &
go_pid=$!
{ rust_lane 2>&1 | sed -u 's/^/[rust] /' >&2; } &
rust_pid=$!
failed=()
wait "$go_pid" || failed+=("Go builds")
wait "$rust_pid" || failed+=("Rust and plugin tools")
read_cpu
printf '\n==> set-up lanes done in %d s (%d s of CPU in both)\n' \
    "$(( $(date +%s) - lanes_started ))" "$(( cpu_now - lanes_cpu ))" >&2
if (( ${#failed[@]} )); then
    echo "set-up failed in: $(IFS=,; echo "${failed[*]}") (its lines above, prefixed [go] or [rust], say why)" >&2
    exit 1
fi
