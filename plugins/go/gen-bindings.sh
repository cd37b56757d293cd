#!/usr/bin/env bash
# Regenerates an SDK's bindings/ (imports/ and exports/wit_exports/) with
# `wit-bindgen go` of the toolchain (toolchain.sh): by default the 0.2 SDK's
# (bindings/ next to this script, from wit/0.2), with WIT_WORLD=controller
# the 0.3 controller SDK's (controller/bindings/, from wit/0.3;
# controller/gen-bindings.sh runs this). The generated files are committed
# so that `go build`, `go test` and editors work without this step; the
# languages and languages_controller tests fail when they differ from a
# fresh generation.
#
#   [WIT_WORLD=controller] plugins/go/gen-bindings.sh [OUT_DIR]   # default: the SDK's bindings/
#
# exports/export_*_reconciler is ours (the SDK's entry point), not
# generated: the generator only writes stubs there with --generate-stubs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
case "${WIT_WORLD:-operator}" in
    operator) wit=$repo/wit/0.2 sdk=$here ;;
    controller) wit=$repo/wit/0.3 sdk=$here/controller ;;
    *) echo "WIT_WORLD=${WIT_WORLD}: use operator (contract 0.2, the default) or controller (0.3)" >&2; exit 2 ;;
esac
out=${1:-$sdk/bindings}
toolchain=$("$here/toolchain.sh")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$toolchain/bin/wit-bindgen" go --quiet \
    --pkg-name "github.com/wasm-operator/wasm-operator/${sdk#"$repo"/}/bindings" \
    --out-dir "$tmp" "$wit" >/dev/null
mkdir -p "$out"
rm -rf "$out/imports" "$out/exports/wit_exports"
mkdir -p "$out/exports"
cp -r "$tmp/imports" "$out/imports"
cp -r "$tmp/exports/wit_exports" "$out/exports/wit_exports"
echo "$out"
