#!/usr/bin/env bash
# Builds the JavaScript replicaset plugin into a component of
# jinghzhu:operator@0.2.0 with componentize-js (SpiderMonkey via
# StarlingMonkey, pre-initialised with Wizer). `http` and `fetch-event` are
# disabled: the host gives plugins no network.
#
#   plugins/js/build.sh [OUT]     # default: ${CARGO_TARGET_DIR:-target}/plugins/replicaset-js.wasm
#
# Needs plugins/js/node_modules (tests/setup.sh: `npm ci` from the lockfile).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-${CARGO_TARGET_DIR:-$repo/target}/plugins/replicaset-js.wasm}
cjs=$here/node_modules/.bin/componentize-js
if [[ ! -x "$cjs" ]]; then
    echo "componentize-js not installed in $here/node_modules: run tests/setup.sh (npm ci from package-lock.json)" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
cd "$here"
"$cjs" replicaset/app.js --wit "$repo/wit/0.2" --world-name operator --disable http fetch-event -o "$out.tmp" >&2
mv "$out.tmp" "$out"
echo "$out"
