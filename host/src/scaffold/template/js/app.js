// The component's entry point: componentize-js exports `reconciler` as
// jinghzhu:operator/reconciler@0.2.0. Only this module imports the host's
// `log`; src/plugin.js and the SDK run natively under `node --test`.
import { log } from 'jinghzhu:operator/log@0.2.0';

import { reconcilerExport } from '../sdk/plugin.js';
import { PLUGIN_NAME, VERSION, reconcile } from './plugin.js';

export const reconciler = reconcilerExport({ name: PLUGIN_NAME, version: VERSION, reconcile, log });
