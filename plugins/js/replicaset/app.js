// The component's entry point: tools/build.mjs bundles it (with the SDK)
// and componentize-js exports `reconciler` as
// `jinghzhu:operator/reconciler@0.2.0`. Only this module imports the host's
// `log`; the SDK and the logic run natively in `node --test` without it.
import { log } from 'jinghzhu:operator/log@0.2.0';

import { reconcilerExport } from '../sdk/plugin.js';
import { PLUGIN_NAME, VERSION, reconcile } from './replicaset.js';

export const reconciler = reconcilerExport({ name: PLUGIN_NAME, version: VERSION, reconcile, log });
