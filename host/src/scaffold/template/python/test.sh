#!/usr/bin/env bash
# Runs the native tests (pytest: unit tests and the golden fixtures) with the
# toolchain's Python.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/toolchain.sh")
cd "$here"
exec "$venv/bin/python" -m pytest "$@"
