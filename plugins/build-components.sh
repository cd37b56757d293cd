#!/usr/bin/env bash
# Builds the plugin components and checks that every artifact is a
# WebAssembly component (header `00 61 73 6d 0d 00 01 00`: magic, then
# version 0x0d with layer 1) exporting the interface it should.
#
#   plugins/build-components.sh            # build everything, then check
#   plugins/build-components.sh --check    # only check existing artifacts
#
# Artifacts (T = ${CARGO_TARGET_DIR:-target}):
#   T/wasm32-wasip2/release/replicaset_plugin.wasm               cargo build --target wasm32-wasip2
#   T/wasm32-wasip1/release/replicaset_plugin.wasm               cargo component build (if installed)
#   T/v2/wasm32-wasip2/release/replicaset_plugin.wasm            --features v2 (hot-swap tests)
#   T/contract-0-1/wasm32-wasip2/release/replicaset_plugin.wasm  --features contract-0-1 (0.1 compatibility)
#   T/wasm32-wasip2/release/misbehaving_plugin.wasm
#   T/always-trap/wasm32-wasip2/release/misbehaving_plugin.wasm  --features always-trap
#   T/fail-fifth/wasm32-wasip2/release/misbehaving_plugin.wasm   --features v2,fail-fifth (canary rollouts: fails a fifth of names)
#   T/differ/wasm32-wasip2/release/misbehaving_plugin.wasm       --features differ (canary rollouts: differing proposals)
#   T/wasm32-wasip2/release/other_world_plugin.wasm
#   T/wasm32-wasip2/release/memcached_plugin.wasm                examples/memcached (contract 0.3)
#   T/wasm32-wasip2/release/static_site_plugin.wasm              examples/static-site (contract 0.3)
#   T/wasm32-wasip2/release/misbehaving_controller_plugin.wasm   tests/plugins/misbehaving-controller (contract 0.3)
#   T/wasm32-wasip2/release/replicaset_controller_plugin.wasm    plugins/replicaset-controller (the replicaset example on 0.3)
#   T/plugins/replicaset-py.wasm     plugins/python/build.sh (componentize-py; if the venv is installed)
#   T/plugins/replicaset-js.wasm     plugins/js/build.sh (componentize-js; if node_modules is installed)
#   T/plugins/replicaset-go.wasm     plugins/go/build.sh (Go, wasm-tools; if plugins/go/toolchain.sh ran)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${CARGO_TARGET_DIR:-target}

if [[ "${1:-}" != "--check" ]]; then
    # One package per invocation: features are never unified across them.
    cargo build --release --target wasm32-wasip2 -p replicaset-plugin
    cargo build --release --target wasm32-wasip2 -p replicaset-plugin --features v2 --target-dir "$T/v2"
    cargo build --release --target wasm32-wasip2 -p replicaset-plugin --features contract-0-1 --target-dir "$T/contract-0-1"
    cargo build --release --target wasm32-wasip2 -p misbehaving-plugin
    cargo build --release --target wasm32-wasip2 -p misbehaving-plugin --features always-trap --target-dir "$T/always-trap"
    cargo build --release --target wasm32-wasip2 -p misbehaving-plugin --features v2,fail-fifth --target-dir "$T/fail-fifth"
    cargo build --release --target wasm32-wasip2 -p misbehaving-plugin --features differ --target-dir "$T/differ"
    cargo build --release --target wasm32-wasip2 -p other-world-plugin
    cargo build --release --target wasm32-wasip2 -p memcached-plugin
    cargo build --release --target wasm32-wasip2 -p static-site-plugin
    cargo build --release --target wasm32-wasip2 -p misbehaving-controller-plugin
    cargo build --release --target wasm32-wasip2 -p replicaset-controller-plugin
    cargo build --release --target wasm32-wasip2 -p listed-children-plugin
    # Python and JavaScript: the toolchains tests/setup.sh installs.
    if [[ -x "${WASM_OPERATOR_CACHE:-$HOME/.cache/wasm-operator}/venv-componentize-py-0.25.1/bin/componentize-py" ]]; then
        plugins/python/build.sh "$T/plugins/replicaset-py.wasm" >/dev/null
    else
        echo "componentize-py not installed (plugins/python/toolchain.sh): skipping the Python plugin" >&2
    fi
    if [[ -x plugins/js/node_modules/.bin/componentize-js ]]; then
        plugins/js/build.sh "$T/plugins/replicaset-js.wasm" >/dev/null
    else
        echo "componentize-js not installed (plugins/js/toolchain.sh): skipping the JavaScript plugin" >&2
    fi
    if [[ -e plugins/go/.wit-go-runtime/go.mod ]]; then
        plugins/go/build.sh "$T/plugins/replicaset-go.wasm" >/dev/null
    else
        echo "the Go plugin toolchain is not installed (plugins/go/toolchain.sh): skipping the Go plugin" >&2
    fi
    if cargo component --version >/dev/null 2>&1; then
        cargo component build --release -p replicaset-plugin
    else
        echo "cargo-component not installed (cargo install cargo-component --locked): skipping the wasm32-wasip1 build" >&2
    fi
fi

status=0
# check FILE INTERFACE...: a component that names every INTERFACE.
check() {
    local file=$1; shift
    if [[ ! -f "$file" ]]; then
        echo "MISSING  $file"; status=1; return
    fi
    local header
    header=$(head -c 8 "$file" | od -An -tx1 | tr -d ' \n')
    if [[ "$header" != "0061736d0d000100" ]]; then
        echo "NOT A COMPONENT (header $header)  $file"; status=1; return
    fi
    for interface in "$@"; do
        if ! grep -aq -- "$interface" "$file"; then
            echo "NO $interface  $file"; status=1; return
        fi
    done
    printf 'ok %8d bytes  %s\n' "$(stat -c %s "$file")" "$file"
}

reconciler=jinghzhu:operator/reconciler@0.2.0
check "$T/wasm32-wasip2/release/replicaset_plugin.wasm" "$reconciler"
if cargo component --version >/dev/null 2>&1 || [[ -f "$T/wasm32-wasip1/release/replicaset_plugin.wasm" ]]; then
    check "$T/wasm32-wasip1/release/replicaset_plugin.wasm" "$reconciler"
fi
check "$T/v2/wasm32-wasip2/release/replicaset_plugin.wasm" "$reconciler" "+v2"
check "$T/contract-0-1/wasm32-wasip2/release/replicaset_plugin.wasm" jinghzhu:operator/reconciler@0.1.0
check "$T/wasm32-wasip2/release/misbehaving_plugin.wasm" "$reconciler"
check "$T/always-trap/wasm32-wasip2/release/misbehaving_plugin.wasm" "$reconciler" "+always-trap"
check "$T/fail-fifth/wasm32-wasip2/release/misbehaving_plugin.wasm" "$reconciler" "+v2.fail-fifth"
check "$T/differ/wasm32-wasip2/release/misbehaving_plugin.wasm" "$reconciler" "+differ"
check "$T/wasm32-wasip2/release/other_world_plugin.wasm" jinghzhu:operator/reconciler@0.9.0
controller=wasm-operator:controller/reconciler@0.3.0
check "$T/wasm32-wasip2/release/memcached_plugin.wasm" "$controller"
check "$T/wasm32-wasip2/release/static_site_plugin.wasm" "$controller"
check "$T/wasm32-wasip2/release/misbehaving_controller_plugin.wasm" "$controller"
check "$T/wasm32-wasip2/release/replicaset_controller_plugin.wasm" "$controller"
# It reuses the 0.2 plugin's logic: none of contract 0.2 may be linked in.
if grep -aq "jinghzhu:operator/" "$T/wasm32-wasip2/release/replicaset_controller_plugin.wasm" 2>/dev/null; then
    echo "NAMES contract 0.2  $T/wasm32-wasip2/release/replicaset_controller_plugin.wasm"; status=1
fi
for lang in py js go; do
    if [[ -f "$T/plugins/replicaset-$lang.wasm" ]]; then
        check "$T/plugins/replicaset-$lang.wasm" jinghzhu:operator/reconciler@0.2.0 "replicaset-$lang"
    fi
done
exit $status
