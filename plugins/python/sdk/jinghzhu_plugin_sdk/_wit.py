"""The generated bindings of ``jinghzhu:operator@0.2.0`` (world ``operator``).

``componentize-py bindings`` writes them from ``wit/0.2``: inside a component
``componentize-py componentize`` puts them on the path itself; natively the
tests' ``conftest.py`` (``jinghzhu_plugin_sdk.native.ensure_bindings``)
generates them into ``build/bindings``. Nothing else in the SDK imports
``wit_world`` directly.
"""

from wit_world.imports import log as wit_log  # noqa: F401
from wit_world.imports import types as wit  # noqa: F401

try:  # componentize-py's helper module (Ok/Err for `result` types)
    from componentize_py_types import Err  # noqa: F401
except ImportError:  # pragma: no cover - older layouts
    from wit_world.types import Err  # type: ignore # noqa: F401

#: The WIT package these bindings implement.
WIT_PACKAGE = "jinghzhu:operator@0.2.0"
#: The interface a plugin exports.
RECONCILER_INTERFACE = "jinghzhu:operator/reconciler@0.2.0"
