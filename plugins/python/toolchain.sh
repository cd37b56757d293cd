#!/usr/bin/env bash
# Installs the Python plugin toolchain once: a venv with the pins of
# plugins/python/requirements.txt (componentize-py 0.25.1, pytest, PyYAML)
# from PyPI, at ~/.cache/wasm-operator/venv-componentize-py-0.25.1. The
# marker `.requirements-<digest>` is written last: a warm run with the same
# requirements.txt returns at once, a changed file or an interrupted install
# rebuilds the venv. Prints the venv's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${WASM_OPERATOR_CACHE:-$HOME/.cache/wasm-operator}/venv-componentize-py-0.25.1
digest=$(sha256sum "$here/requirements.txt" | cut -c1-16)
if [[ -f "$venv/.requirements-$digest" && -x "$venv/bin/componentize-py" ]]; then
    echo "$venv"; exit 0
fi
python=""
for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
        python=$candidate; break
    fi
done
[[ -n "$python" ]] || { echo "Python 3.10+ is required for componentize-py and pytest" >&2; exit 1; }
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
touch "$venv/.requirements-$digest"
echo "$venv"
