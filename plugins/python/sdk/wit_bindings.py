"""Generates the SDK's Python bindings natively (for pytest and tools): runs
``componentize-py -d WIT -w operator bindings OUT`` when ``OUT`` is missing or
older than a ``.wit`` file of ``WIT``, and puts ``OUT`` on ``sys.path``.
Inside a component ``componentize-py componentize`` generates them itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def _newest_wit(wit_dir: str) -> float:
    times = [os.path.getmtime(os.path.join(root, f))
             for root, _, files in os.walk(wit_dir) for f in files if f.endswith(".wit")]
    if not times:
        raise FileNotFoundError(f"no .wit file in {wit_dir}")
    return max(times)


def componentize_py() -> str:
    """The componentize-py next to this Python (the venv), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "componentize-py")
    if os.path.exists(beside):
        return beside
    found = shutil.which("componentize-py")
    if found is None:
        raise RuntimeError("componentize-py not found: run tests/setup.sh (it makes the venv "
                           "~/.cache/wasm-operator/venv-componentize-py-0.25.1) and use its python")
    return found


def ensure(wit_dir: str, out_dir: str, world: str = "operator") -> str:
    """Bindings for ``world`` of ``wit_dir`` in ``out_dir``, fresh; on ``sys.path``."""
    marker = os.path.join(out_dir, "wit_world", "__init__.py")
    if not os.path.exists(marker) or os.path.getmtime(marker) < _newest_wit(wit_dir):
        shutil.rmtree(out_dir, ignore_errors=True)
        subprocess.run([componentize_py(), "-d", wit_dir, "-w", world, "bindings", out_dir],
                       check=True, stdout=subprocess.DEVNULL)
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    return out_dir
