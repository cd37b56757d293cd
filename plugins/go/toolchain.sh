#!/usr/bin/env bash
# Installs the Go plugin toolchain once, into
# ~/.cache/wasm-operator/go-plugin-toolchain-<digest of this file>:
#   bin/wit-bindgen   wit-bindgen-cli 0.63.0 (cargo install, `go` generator only)
#   bin/wasm-tools    wasm-tools 1.263.0 (cargo install, `component` commands only)
#   runtime/          the Go package `go.bytecodealliance.org/pkg` the generated
#                     bindings import. The Go module proxy does not serve it;
#                     the same source ships in the `wit-bindgen-go` 0.63.0
#                     crate (src/pkg, Apache-2.0), which cargo fetches from
#                     crates.io like any dependency. Copied here with our
#                     patches (see patch_runtime below).
#   adapter.wasm      the WASI preview1 reactor adapter of the
#                     `wasi-preview1-component-adapter-provider` crate at the
#                     host's wasmtime version (48.0.8): `wasm-tools component
#                     new` wraps the Go module with it.
# The marker `.installed` is written last: a warm run returns at once, an
# interrupted one starts over. A changed pin (this file) is a new directory.
#
# Then makes `.wit-go-runtime` next to this script (or next to the go.mod of
# the directory given as the first argument) a symbolic link to runtime/:
# go.mod's `replace go.bytecodealliance.org/pkg => ./.wit-go-runtime` finds
# it there. Prints the toolchain directory.
#
#   plugins/go/toolchain.sh [PROJECT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "${1:-$here}" && pwd)

WIT_BINDGEN_VERSION=0.63.0
WASM_TOOLS_VERSION=1.263.0
# The host's wasmtime version: older adapters lack
# `adapter_monotonic_clock_set_paused`, which the runtime package imports.
ADAPTER_VERSION=48.0.8

command -v go >/dev/null || { echo "Go 1.26+ is required for the Go plugins" >&2; exit 1; }
command -v cargo >/dev/null || { echo "cargo is required to install wit-bindgen and wasm-tools" >&2; exit 1; }

digest=$(sha256sum "$0" | cut -c1-16)
dir=${WASM_OPERATOR_CACHE:-$HOME/.cache/wasm-operator}/go-plugin-toolchain-$digest

# Applies our patches to the runtime package copied from the crate:
# - its go.mod asks for Go 1.27.1; nothing in it needs more than 1.26, the
#   Go this project builds with (and the newest the module proxy serves here).
patch_runtime() {
    local runtime=$1
    sed -i 's/^go 1\.27\.1$/go 1.26/' "$runtime/go.mod"
    grep -qx 'go 1.26' "$runtime/go.mod" || { echo "the runtime package's go line is not 1.27.1 any more: check patch_runtime" >&2; exit 1; }
}

install() {
    rm -rf "$dir"
    mkdir -p "$dir/fetch/src"
    # --debug without debug info: builds in a third of the release time; their
    # speed does not matter for one small component.
    CARGO_PROFILE_DEV_DEBUG=false cargo install --quiet --locked --debug --root "$dir" \
        wit-bindgen-cli --version "$WIT_BINDGEN_VERSION" --no-default-features --features go
    CARGO_PROFILE_DEV_DEBUG=false cargo install --quiet --locked --debug --root "$dir" \
        wasm-tools --version "$WASM_TOOLS_VERSION" --no-default-features --features component
    # The two crates whose files we take, fetched by cargo into its registry.
    cat >"$dir/fetch/Cargo.toml" <<EOF
[package]
name = "go-plugin-toolchain-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
wit-bindgen-go = "=$WIT_BINDGEN_VERSION"
wasi-preview1-component-adapter-provider = "=$ADAPTER_VERSION"

[workspace]
EOF
    touch "$dir/fetch/src/lib.rs"
    local paths
    paths=$(cargo metadata --quiet --format-version 1 --manifest-path "$dir/fetch/Cargo.toml" | python3 -c '
import json, os, sys
meta = json.load(sys.stdin)
want = {"wit-bindgen-go", "wasi-preview1-component-adapter-provider"}
for p in meta["packages"]:
    if p["name"] in want:
        print(p["name"], os.path.dirname(p["manifest_path"]))')
    local go_crate adapter_crate
    go_crate=$(awk '$1 == "wit-bindgen-go" { print $2 }' <<<"$paths")
    adapter_crate=$(awk '$1 == "wasi-preview1-component-adapter-provider" { print $2 }' <<<"$paths")
    [[ -d "$go_crate/src/pkg" ]] || { echo "no src/pkg in the wit-bindgen-go crate ($go_crate)" >&2; exit 1; }
    [[ -f "$adapter_crate/artefacts/wasi_snapshot_preview1.reactor.wasm" ]] ||
        { echo "no reactor adapter in $adapter_crate/artefacts" >&2; exit 1; }
    cp -r "$go_crate/src/pkg" "$dir/runtime"
    chmod -R u+w "$dir/runtime"
    # Only the Go sources: the crate's copy also carries the project's web pages.
    rm -rf "$dir/runtime/docs"
    patch_runtime "$dir/runtime"
    cp "$adapter_crate/artefacts/wasi_snapshot_preview1.reactor.wasm" "$dir/adapter.wasm"
    rm -rf "$dir/fetch"
    touch "$dir/.installed"
}

if [[ ! -f "$dir/.installed" ]]; then
    install >&2
fi

link=$project/.wit-go-runtime
if [[ "$(readlink "$link" 2>/dev/null)" != "$dir/runtime" ]]; then
    rm -rf "$link"
    ln -s "$dir/runtime" "$link"
fi
echo "$dir"
