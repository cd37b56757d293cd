#!/usr/bin/env bash
# Runs the native tests (go test: the controller SDK and the plugin's unit
# tests) after linking the toolchain's runtime package (toolchain.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/toolchain.sh" >/dev/null
cd "$here"
exec go test "$@" ./controller/... ./plugin/...
