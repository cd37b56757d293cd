"""pytest set-up: the SDK and src/ on the path, and the bindings of wit/
generated into build/bindings by componentize-py."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WIT_DIR = os.path.join(HERE, "wit")
FIXTURES = os.path.join(HERE, "fixtures")
DEFAULT_SPEC = os.path.join(WIT_DIR, "default-pod-spec.json")

for path in (os.path.join(HERE, "sdk"), os.path.join(HERE, "src")):
    if path not in sys.path:
        sys.path.insert(0, path)

import wit_bindings  # noqa: E402

wit_bindings.ensure(WIT_DIR, os.path.join(HERE, "build", "bindings"))
