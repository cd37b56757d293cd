"""The component's entry point: ``componentize-py componentize app`` finds
``Reconciler`` here and exports it as ``jinghzhu:operator/reconciler@0.2.0``.
Everything is imported at build time (componentize-py pre-initialises the
interpreter), so a call pays only for the reconcile itself."""

from jinghzhu_plugin_sdk import plugin

import replicaset

Reconciler = plugin.reconciler(replicaset.PLUGIN_NAME, replicaset.VERSION, replicaset.reconcile)
