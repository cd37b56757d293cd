#!/usr/bin/env bash
# Builds the plugin into target/{{name}}.wasm: a WebAssembly component of
# {{wit_package}}, in three steps with the toolchain of toolchain.sh:
# `go build` (GOOS=wasip1 GOARCH=wasm, a c-shared reactor), `wasm-tools
# component embed` (the WIT world `{{wit_world}}` of wit/) and `wasm-tools
# component new` (the WASI preview1 reactor adapter at the host's wasmtime
# version).
#   ./build.sh [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/target/{{name}}.wasm}
toolchain=$("$here/toolchain.sh")
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false \
    -ldflags=-checklinkname=0 -o "$work/core.wasm" ./cmd/plugin
"$toolchain/bin/wasm-tools" component embed wit --world {{wit_world}} "$work/core.wasm" -o "$work/embedded.wasm"
"$toolchain/bin/wasm-tools" component new "$work/embedded.wasm" \
    --adapt "wasi_snapshot_preview1=$toolchain/adapter.wasm" -o "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
