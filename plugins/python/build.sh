#!/usr/bin/env bash
# Builds the Python replicaset plugin into a component of
# jinghzhu:operator@0.2.0 with componentize-py (CPython, pre-initialised: the
# SDK and the plugin are imported at build time).
#
#   plugins/python/build.sh [OUT]     # default: ${CARGO_TARGET_DIR:-target}/plugins/replicaset-py.wasm
#
# componentize-py comes from $COMPONENTIZE_PY, else the venv tests/setup.sh
# makes (~/.cache/wasm-operator/venv-componentize-py-0.25.1), else PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-${CARGO_TARGET_DIR:-$repo/target}/plugins/replicaset-py.wasm}
venv=${WASM_OPERATOR_CACHE:-$HOME/.cache/wasm-operator}/venv-componentize-py-0.25.1
cpy=${COMPONENTIZE_PY:-}
if [[ -z "$cpy" ]]; then
    if [[ -x "$venv/bin/componentize-py" ]]; then cpy=$venv/bin/componentize-py
    elif command -v componentize-py >/dev/null; then cpy=$(command -v componentize-py)
    else echo "componentize-py not found: run tests/setup.sh (it makes $venv)" >&2; exit 1
    fi
fi
mkdir -p "$(dirname "$out")"
cd "$here"
"$cpy" -d "$repo/wit/0.2" -w operator componentize -p sdk -p replicaset app -o "$out.tmp" >&2
mv "$out.tmp" "$out"
echo "$out"
