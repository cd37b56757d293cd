#!/usr/bin/env bash
# Installs and builds everything the tests and the demo need, on a fresh
# machine or a warm one (every step is skipped or near-instant when done):
#   - the Rust targets for plugins (wasm32-wasip2, and wasm32-wasip1 for cargo-component)
#   - cargo-component (not with --demo: only the tests of the `cargo component
#     build` path need it, and on a cold machine it is a long source build)
#   - kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, built
#     with Go from the k8s.io/kubernetes module, and kwok (the simulated nodes),
#     installed with `go install`; cached in ~/.cache/wasm-operator (etcd comes
#     from the etcd-bin-vendored-linux-amd64 crate)
#   - the example plugin: cargo build --target wasm32-wasip2 (and, not with
#     --demo, cargo component build)
#
#   tests/setup.sh          # everything the tests need
#   tests/setup.sh --demo   # only what examples/demo.sh needs
#
# Each step ends with a line saying how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_COMPONENT_VERSION=0.21.1

demo=false
[[ "${1:-}" == "--demo" ]] && demo=true

current=""; step_start=0
finish_step() {
    [[ -n "$current" ]] && printf '    (%s: %d s)\n' "$current" "$(( $(date +%s) - step_start ))" >&2
    current=""
}
step() {
    finish_step
    current=$1; step_start=$(date +%s)
    printf '\n==> %s\n' "$*" >&2
}
trap finish_step EXIT

step "Rust targets for plugins"
if $demo; then
    rustup target add wasm32-wasip2
else
    rustup target add wasm32-wasip2 wasm32-wasip1
fi

if ! $demo && ! cargo component --version 2>/dev/null | grep -q "$CARGO_COMPONENT_VERSION"; then
    step "installing cargo-component $CARGO_COMPONENT_VERSION (once; a few minutes)"
    cargo install cargo-component --locked --version "$CARGO_COMPONENT_VERSION"
fi

step "Kubernetes binaries and kwok (built with Go once, then cached)"
command -v go >/dev/null || { echo "Go is required to build kube-apiserver and kwok: install Go 1.26+ and retry" >&2; exit 1; }
cargo run --quiet -p local-control-plane -- build

step "example plugin: cargo build --target wasm32-wasip2"
cargo build --release --target wasm32-wasip2 -p replicaset-plugin
ls -l target/wasm32-wasip2/release/replicaset_plugin.wasm >&2
if ! $demo; then
    step "example plugin: cargo component build"
    cargo component build --release -p replicaset-plugin
    ls -l target/wasm32-wasip1/release/replicaset_plugin.wasm >&2
fi
