"""pytest set-up: the SDK and the plugin on the path, and the bindings of
``wit/0.2`` generated into ``build/bindings`` (see ``sdk/wit_bindings.py``)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WIT_DIR = os.path.join(REPO, "wit", "0.2")
FIXTURES = os.path.join(REPO, "plugins", "replicaset", "fixtures")
DEFAULT_SPEC = os.path.join(REPO, "wit", "default-pod-spec.json")

for path in (os.path.join(HERE, "sdk"), os.path.join(HERE, "replicaset")):
    if path not in sys.path:
        sys.path.insert(0, path)

import wit_bindings  # noqa: E402

wit_bindings.ensure(WIT_DIR, os.path.join(HERE, "build", "bindings"))
