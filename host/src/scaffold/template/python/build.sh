#!/usr/bin/env bash
# Builds the plugin into target/{{name}}.wasm: a WebAssembly component of
# {{wit_package}} made by componentize-py (CPython, pre-initialised: the SDK
# and src/ are imported at build time, so a call pays only for reconcile).
#   ./build.sh [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/target/{{name}}.wasm}
venv=$("$here/toolchain.sh")
mkdir -p "$(dirname "$out")"
cd "$here"
"$venv/bin/componentize-py" -d wit -w operator componentize -p sdk -p src app -o "$out.tmp" >&2
mv "$out.tmp" "$out"
echo "$out"
