#!/usr/bin/env bash
# Regenerates bindings/ (imports/ and exports/wit_exports/) from wit/0.3
# (`wasm-operator:controller@0.3.0`, world `controller`) with `wit-bindgen
# go` of the toolchain (../toolchain.sh), as ../gen-bindings.sh does for
# wit/0.2. The generated files are committed so that `go build`, `go test`
# and editors work without this step; the languages_controller test fails
# when they differ from a fresh generation.
#
#   plugins/go/controller/gen-bindings.sh [OUT_DIR]   # default: bindings/ next to this script
#
# exports/export_wasm_operator_controller_reconciler is ours (the SDK's
# entry point), not generated: the generator only writes stubs there with
# --generate-stubs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
out=${1:-$here/bindings}
toolchain=$("$here/../toolchain.sh")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$toolchain/bin/wit-bindgen" go --quiet \
    --pkg-name github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings \
    --out-dir "$tmp" "$repo/wit/0.3" >/dev/null
mkdir -p "$out"
rm -rf "$out/imports" "$out/exports/wit_exports"
mkdir -p "$out/exports"
cp -r "$tmp/imports" "$out/imports"
cp -r "$tmp/exports/wit_exports" "$out/exports/wit_exports"
echo "$out"
