#!/usr/bin/env bash
# Builds a Go plugin into a component of jinghzhu:operator@0.2.0 (world
# `operator` of wit/0.2), or with WIT_WORLD=controller of
# wasm-operator:controller@0.3.0 (world `controller` of wit/0.3, the SDK in
# controller/), in three steps with the toolchain of toolchain.sh
# (installed once, cached):
#   1. go build: GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared (a reactor:
#      the host calls its exports, main never runs), -ldflags=-checklinkname=0
#      (the runtime package reaches runtime.sbrk through go:linkname),
#      -trimpath (the same bytes from any checkout);
#   2. wasm-tools component embed: the WIT world into the module;
#   3. wasm-tools component new: the module wrapped as a component, its WASI
#      preview1 imports adapted to preview2 by the reactor adapter at the
#      host's wasmtime version.
#
#   [WIT_WORLD=controller] plugins/go/build.sh [OUT] [MAIN_DIR] [GO BUILD FLAGS...]
#       OUT       default: ${CARGO_TARGET_DIR:-target}/plugins/replicaset-go.wasm
#       MAIN_DIR  the plugin's main package, in this module or another one
#                 (built with `go -C MAIN_DIR build`); default: cmd/replicaset
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-${CARGO_TARGET_DIR:-$repo/target}/plugins/replicaset-go.wasm}
main_dir=${2:-$here/cmd/replicaset}
shift $(( $# > 2 ? 2 : $# ))
case "${WIT_WORLD:-operator}" in
    operator) wit=$repo/wit/0.2 world=operator ;;
    controller) wit=$repo/wit/0.3 world=controller ;;
    *) echo "WIT_WORLD=${WIT_WORLD}: use operator (contract 0.2, the default) or controller (0.3)" >&2; exit 2 ;;
esac
command -v go >/dev/null || { echo "Go 1.26+ is required: install it, then run tests/setup.sh" >&2; exit 1; }
toolchain=$("$here/toolchain.sh")
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
GOOS=wasip1 GOARCH=wasm go -C "$main_dir" build -buildmode=c-shared -trimpath -buildvcs=false \
    -ldflags=-checklinkname=0 "$@" -o "$work/core.wasm" .
"$toolchain/bin/wasm-tools" component embed "$wit" --world "$world" \
    "$work/core.wasm" -o "$work/embedded.wasm"
"$toolchain/bin/wasm-tools" component new "$work/embedded.wasm" \
    --adapt "wasi_snapshot_preview1=$toolchain/adapter.wasm" -o "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
