#!/usr/bin/env bash
# Regenerates bindings/ from wit/0.3 (`wasm-operator:controller@0.3.0`,
# world `controller`): ../gen-bindings.sh with WIT_WORLD=controller.
#
#   plugins/go/controller/gen-bindings.sh [OUT_DIR]   # default: bindings/ next to this script
set -euo pipefail
WIT_WORLD=controller exec "$(cd "$(dirname "$0")" && pwd)/../gen-bindings.sh" "$@"
