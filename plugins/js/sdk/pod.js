// Helpers for the Pods a Jinghzhu controls: which ones count, and the
// create for a new one from the Jinghzhu's template (as the Rust SDK's `pod`).

import { compareStrings } from './kv.js';

/** Deletion was requested: the Pod is going away. */
export function isTerminating(pod) {
  return pod.metadata.deletionTimestamp != null;
}

/** Phase `succeeded` or `failed`: it will never run again. */
export function isFinished(pod) {
  return pod.phase === 'succeeded' || pod.phase === 'failed';
}

/** Counts towards `desired`: neither terminating nor finished. */
export function isLive(pod) {
  return !isTerminating(pod) && !isFinished(pod);
}

/** Phase `running` and its `Ready` condition `True`. */
export function isRunningAndReady(pod) {
  return pod.phase === 'running' && pod.ready;
}

/** How many of `pods` are live and running and ready. */
export function countReady(pods) {
  let n = 0;
  for (const p of pods) if (isLive(p) && isRunningAndReady(p)) n++;
  return n;
}

/** The live Pods among `pods`, in their order. */
export function livePods(pods) {
  return pods.filter(isLive);
}

/** The Pod's controller owner reference points at `owner` (by uid). */
export function isControlledBy(pod, owner) {
  const uid = owner.metadata.uid;
  return pod.metadata.ownerReferences.some((r) => r.controller && r.uid === uid);
}

/** The names of `pods`, sorted (by code point, as Rust and Python sort). */
export function sortedNames(pods) {
  return Array.from(pods, (p) => p.metadata.name).sort(compareStrings);
}

/** `<jinghzhu-name>-`, the prefix of the Pods' generated names. */
export function generateName(jinghzhu) {
  return `${jinghzhu.metadata.name}-`;
}

/** A create for one new Pod: `generateName` `<name>-`, the template's labels,
 * annotations and spec (`specJson` '' without a template or with an empty
 * spec: the host's default pod template). */
export function fromTemplate(jinghzhu) {
  const t = jinghzhu.template;
  if (t === undefined) {
    return { generateName: generateName(jinghzhu), labels: new Map(), annotations: new Map(), specJson: '' };
  }
  return {
    generateName: generateName(jinghzhu),
    labels: new Map(t.labels),
    annotations: new Map(t.annotations),
    specJson: t.specJson.trim() === '' ? '' : t.specJson,
  };
}
