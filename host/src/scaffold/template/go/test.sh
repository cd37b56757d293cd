#!/usr/bin/env bash
# Runs the native tests (go test: the SDK, unit tests of the logic and every
# golden fixture) after linking the toolchain's runtime package
# (toolchain.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/toolchain.sh" >/dev/null
cd "$here"
exec go test "$@" ./sdk/... ./plugin/...
