#!/usr/bin/env bash
# Installs and builds everything the tests and the demo need, on a fresh
# machine or a warm one (every step is skipped or near-instant when done):
#   - the Rust targets for plugins (wasm32-wasip2, and wasm32-wasip1 for cargo-component)
#   - cargo-component
#   - kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, built
#     with Go from the k8s.io/kubernetes module, and kwok (the simulated nodes),
#     installed with `go install`; cached in ~/.cache/wasm-operator (etcd comes
#     from the etcd-bin-vendored-linux-amd64 crate)
#   - the example plugin, both ways (cargo build --target wasm32-wasip2, cargo component build)
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_COMPONENT_VERSION=0.21.1

step() { printf '\n==> %s\n' "$*" >&2; }

step "Rust targets for plugins"
rustup target add wasm32-wasip2 wasm32-wasip1

if ! cargo component --version 2>/dev/null | grep -q "$CARGO_COMPONENT_VERSION"; then
    step "installing cargo-component $CARGO_COMPONENT_VERSION (once; a few minutes)"
    cargo install cargo-component --locked --version "$CARGO_COMPONENT_VERSION"
fi

step "Kubernetes binaries and kwok (built with Go once, then cached)"
command -v go >/dev/null || { echo "Go is required to build kube-apiserver and kwok: install Go 1.26+ and retry" >&2; exit 1; }
cargo run --quiet -p local-control-plane -- build

step "example plugin: cargo build --target wasm32-wasip2"
cargo build --release --target wasm32-wasip2 -p replicaset-plugin
step "example plugin: cargo component build"
cargo component build --release -p replicaset-plugin
ls -l target/wasm32-wasip2/release/replicaset_plugin.wasm target/wasm32-wasip1/release/replicaset_plugin.wasm >&2
