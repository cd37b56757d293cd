// Helpers for the Jinghzhu's status: building one, comparing two, returning
// it only when it changed (as the Rust SDK's `status`).

import { compareStrings } from './kv.js';

/** All `desired` Pods live, running and ready. */
export const RUNNING = 'Running';
/** The count is right but some Pods are not running and ready yet. */
export const PENDING = 'Pending';
/** The live count differs from `desired`. */
export const SCALING = 'Scaling';

/** `Scaling` while `live != desired`, else `Pending` while `ready < live`,
 * else `Running` (0 wanted and none there is `Running`). */
export function state(live, ready, desired) {
  if (live !== desired) return SCALING;
  if (ready < live) return PENDING;
  return RUNNING;
}

/** A status: `current` is the number of names, `podList` the names sorted;
 * `observedGeneration` a BigInt or undefined. */
export function build(podNames, state, message, observedGeneration) {
  const podList = Array.from(podNames).sort(compareStrings);
  return { current: podList.length, podList, state, message, observedGeneration };
}

function sameGeneration(a, b) {
  if (a == null || b == null) return a == null && b == null;
  return BigInt(a) === BigInt(b);
}

/** Two statuses say the same thing (the order of `podList` aside). */
export function statusEqual(a, b) {
  if (a.current !== b.current || a.state !== b.state || a.message !== b.message
    || !sameGeneration(a.observedGeneration, b.observedGeneration) || a.podList.length !== b.podList.length) {
    return false;
  }
  const x = [...a.podList].sort(compareStrings);
  const y = [...b.podList].sort(compareStrings);
  return x.every((n, i) => n === y[i]);
}

/** `computed` when it differs from `observed` (or there is none),
 * undefined when nothing changed: no write. */
export function statusPatch(observed, computed) {
  if (observed != null && statusEqual(observed, computed)) return undefined;
  return computed;
}

/** `statusPatch` against the status `jinghzhu` has. */
export function patchFor(jinghzhu, computed) {
  return statusPatch(jinghzhu.status, computed);
}
