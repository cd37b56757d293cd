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
#   - Helm (not with --demo), for the chart tests, installed with `go install`
#     and cached the same way
#   - not with --demo: the OCI registry (distribution), oras and cosign for the
#     OCI tests, installed with `go install` and cached the same way
#   - the example plugin: cargo build --target wasm32-wasip2 (and, not with
#     --demo, cargo component build)
#   - not with --demo: the Python and JavaScript plugin toolchains (a venv
#     with componentize-py; npm ci from plugins/js/package-lock.json), cached
#     in ~/.cache/wasm-operator
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
    # --debug: an optimised build of cargo-component takes about three times
    # as long to compile, and its speed does not matter for a small plugin.
    step "installing cargo-component $CARGO_COMPONENT_VERSION (once; a few minutes)"
    cargo install cargo-component --locked --debug --version "$CARGO_COMPONENT_VERSION"
fi

step "Kubernetes binaries and kwok (built with Go once, then cached)"
command -v go >/dev/null || { echo "Go is required to build kube-apiserver and kwok: install Go 1.26+ and retry" >&2; exit 1; }
cargo run --quiet -p local-control-plane -- build

if ! $demo; then
    step "OCI registry, oras and cosign for the OCI tests (go install once, then cached)"
    cargo run --quiet -p local-control-plane -- oci-tools
fi

if ! $demo; then
    step "Helm (renders the chart in examples/deploy/helm; go install once, then cached)"
    cargo run --quiet -p local-control-plane -- helm
fi

step "example plugin: cargo build --target wasm32-wasip2"
cargo build --release --target wasm32-wasip2 -p replicaset-plugin
ls -l target/wasm32-wasip2/release/replicaset_plugin.wasm >&2
if ! $demo; then
    step "example plugin: cargo component build"
    cargo component build --release -p replicaset-plugin
    ls -l target/wasm32-wasip1/release/replicaset_plugin.wasm >&2
fi

if ! $demo; then
    # Plugins in Python and JavaScript (plugins/python, plugins/js): the
    # toolchains only; tests build the components (plugins/build-components.sh).
    step "Python plugin toolchain: venv with componentize-py 0.25.1 (pip; cached in ~/.cache/wasm-operator)"
    plugins/python/toolchain.sh >&2
    step "JavaScript plugin toolchain: npm ci of plugins/js (componentize-js 0.23.0, jco 1.35.0; cached by lockfile digest)"
    plugins/js/toolchain.sh >&2
fi
