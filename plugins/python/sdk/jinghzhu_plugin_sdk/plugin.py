"""Turning a reconcile function into the component's export.

In the plugin's app module (the one ``componentize-py componentize`` is given)::

    from jinghzhu_plugin_sdk import plugin
    Reconciler = plugin.reconciler("my-plugin", "0.1.0", reconcile)

``reconcile(input: Input) -> Output`` sees friendly views and returns an
:class:`Output`; raising :class:`ReconcileError` fails the call with it. Any
other exception becomes a retryable error naming it (the instance is fresh
for every call, so nothing is left behind).
"""

from __future__ import annotations

from typing import Callable

from ._wit import wit
from .input import Input, decode
from .output import Output, ReconcileError, encode

ReconcileFn = Callable[[Input], Output]


def call(reconcile: ReconcileFn, raw: "wit.ReconcileInput") -> "wit.ReconcileOutput":
    """Decodes ``raw``, runs ``reconcile`` and encodes its output; raises the
    ``Err`` componentize-py returns as ``result::err``."""
    try:
        return encode(reconcile(decode(raw)))
    except ReconcileError as e:
        raise e.to_err() from None
    except Exception as e:  # noqa: BLE001 - a plugin bug is an error, not a trap
        raise ReconcileError(f"{type(e).__name__}: {e}", True).to_err() from None


def reconciler(name: str, version: str, reconcile: ReconcileFn) -> type:
    """The class componentize-py exports as ``reconciler``: assign it to
    ``Reconciler`` in the app module."""
    info = wit.PluginInfo(name, version)

    class Reconciler:
        def info(self) -> "wit.PluginInfo":
            return info

        def reconcile(self, input: "wit.ReconcileInput") -> "wit.ReconcileOutput":
            return call(reconcile, input)

    return Reconciler
