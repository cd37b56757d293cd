#!/usr/bin/env bash
# Installs the JavaScript plugin toolchain once: `npm ci` from
# package-lock.json (componentize-js 0.23.0, jco 1.35.0, wizer 10.0.0,
# preview2-shim 0.25.0, yaml) into ~/.cache/wasm-operator/npm-<digest>, and
# makes node_modules next to this script a symbolic link to it. The digest
# covers the pinned devDependencies and the lockfile's packages, not the
# project's own name: plugins/js and every `wasm-operator new --lang js`
# project with the same pins share one install. A warm run only checks the
# link; changed pins get a new directory.
# The marker `.installed` is written last, so an interrupted install is
# redone. Prints the node_modules path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v npm >/dev/null || { echo "Node.js 20+ with npm is required for the JavaScript plugins" >&2; exit 1; }
digest=$(cd "$here" && node -e '
    const lock = require("./package-lock.json"), pkg = require("./package.json");
    delete lock.packages[""];
    process.stdout.write(JSON.stringify([pkg.devDependencies, lock.packages]));' | sha256sum | cut -c1-16)
dir=${WASM_OPERATOR_CACHE:-$HOME/.cache/wasm-operator}/npm-$digest
if [[ ! -f "$dir/.installed" ]]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$here/package.json" "$here/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
    touch "$dir/.installed"
fi
link=$here/node_modules
if [[ "$(readlink "$link" 2>/dev/null)" != "$dir/node_modules" ]]; then
    rm -rf "$link"
    ln -s "$dir/node_modules" "$link"
fi
echo "$dir/node_modules"
