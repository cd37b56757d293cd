#!/usr/bin/env bash
# Builds the plugin into target/{{name}}.wasm: a WebAssembly component of
# {{wit_package}} made by componentize-js (SpiderMonkey, pre-initialised with
# Wizer). http and fetch-event are disabled: plugins get no network.
#   ./build.sh [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/target/{{name}}.wasm}
"$here/toolchain.sh" >/dev/null
mkdir -p "$(dirname "$out")"
cd "$here"
node_modules/.bin/componentize-js src/app.js --wit wit --world-name operator --disable http fetch-event -o "$out.tmp" >&2
mv "$out.tmp" "$out"
echo "$out"
