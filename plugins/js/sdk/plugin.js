// Turning a reconcile function into the component's export. In the entry
// module given to componentize-js:
//
//   import { log } from 'jinghzhu:operator/log@0.2.0';
//   import { reconcilerExport } from '../sdk/plugin.js';
//   export const reconciler = reconcilerExport({ name, version, reconcile, log });
//
// `reconcile(input)` sees the friendly views of input.js and returns an
// output object (output.js); throwing ReconcileError fails the call with it,
// any other exception becomes a retryable error naming it.

import { decode } from './input.js';
import { ReconcileError, encode } from './output.js';
import { setSink } from './log.js';

/** Decodes `raw`, runs `reconcile`, encodes the output; throws a
 * ReconcileError (whose `payload` is the WIT `reconcile-error`). */
export function call(reconcile, raw) {
  try {
    return encode(reconcile(decode(raw)));
  } catch (e) {
    if (e instanceof ReconcileError) throw e;
    throw new ReconcileError(`${e?.name ?? 'Error'}: ${e?.message ?? String(e)}`, true);
  }
}

/** The object componentize-js exports as `reconciler`. */
export function reconcilerExport({ name, version, reconcile, log }) {
  if (log !== undefined) setSink(log);
  const info = { name, version };
  return {
    info: () => info,
    reconcile: (raw) => call(reconcile, raw),
  };
}
