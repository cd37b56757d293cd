"""The component's entry point: componentize-py finds `Reconciler` here and
exports it as jinghzhu:operator/reconciler@0.2.0."""

from jinghzhu_plugin_sdk import plugin as sdk_plugin

import plugin

Reconciler = sdk_plugin.reconciler(plugin.PLUGIN_NAME, plugin.VERSION, plugin.reconcile)
