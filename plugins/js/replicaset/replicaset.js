// The replicaset plugin's logic in JavaScript: exactly what the Rust
// `replicaset-logic` crate does (plugins/replicaset-logic).
//
// Keeps `desired` live Pods: too few, create the difference from the
// template (at most BURST_REPLICAS per reconcile); too many, delete the
// surplus (not running before running, not ready before ready, newer before
// older, then by name); finished and terminating Pods are replaced, never
// deleted; the status (count, names, "3/3 pods, 2/3 ready", state) is
// returned only when it changed. It proposes no Event of its own: the host
// records one SuccessfulCreate or SuccessfulDelete per reconcile naming the
// Pods, so a second Event for the same scale would only cost a write; its
// "scaling up"/"scaling down" line is at debug (the host's info line names
// the Pods).

import { compareStrings } from '../sdk/kv.js';
import * as log from '../sdk/log.js';
import * as pod from '../sdk/pod.js';
import * as status from '../sdk/status.js';
import { compare as compareTimes } from '../sdk/time.js';

export const PLUGIN_NAME = 'replicaset-js';
export const VERSION = '0.1.0';
/** Most Pods created (or deleted) per reconcile (the ReplicaSet controller's burstReplicas). */
export const BURST_REPLICAS = 500;

const PHASE_RANK = { pending: 0, unknown: 1, running: 2, succeeded: 3, failed: 3 };

/** Negative when `a` should be deleted before `b`. */
export function compareDeletionPriority(a, b) {
  const rank = PHASE_RANK[a.phase] - PHASE_RANK[b.phase];
  if (rank !== 0) return rank;
  if (a.ready !== b.ready) return a.ready ? 1 : -1;
  const x = a.metadata.creationTimestamp;
  const y = b.metadata.creationTimestamp;
  if (x == null || y == null) {
    if (x != null || y != null) return x == null ? -1 : 1; // no creation time first
  } else {
    const c = compareTimes(y, x); // newest first
    if (c !== 0) return c;
  }
  return compareStrings(a.metadata.name, b.metadata.name);
}

/** The `count` Pods of `candidates` to delete, first to go first. */
export function pick(candidates, count) {
  return [...candidates].sort(compareDeletionPriority).slice(0, count);
}

/** Controlled by `jz` (by uid), not terminating, not finished. */
export function livePods(jz, pods) {
  return pods.filter((p) => pod.isControlledBy(p, jz) && pod.isLive(p));
}

export function statusMessage(current, ready, desired, activity, n) {
  let text = `${current}/${desired} pods, ${ready}/${desired} ready`;
  if (activity === 'creating') text += `; creating ${n}`;
  else if (activity === 'deleting') text += `; deleting ${n}`;
  else if (activity === 'owner-deleting') text += '; Jinghzhu is being deleted';
  return text;
}

export function reconcile(input) {
  const jz = input.jinghzhu;
  const live = livePods(jz, input.pods);
  const desired = jz.desired;
  let activity = 'steady';
  let n = 0;
  if (jz.metadata.deletionTimestamp != null) {
    activity = 'owner-deleting';
  } else if (desired > live.length) {
    activity = 'creating';
    n = Math.min(desired - live.length, BURST_REPLICAS);
  } else if (live.length > desired) {
    activity = 'deleting';
    n = Math.min(live.length - desired, BURST_REPLICAS);
  }

  const out = { createPods: [], deletePods: [], status: undefined, requeueAfterMs: undefined, events: [] };
  if (activity === 'creating') {
    const create = pod.fromTemplate(jz);
    out.createPods = Array.from({ length: n }, () => create);
    log.debug('scaling up', [['jinghzhu', jz.name], ['live', live.length], ['desired', desired], ['creating', n]]);
  } else if (activity === 'deleting') {
    out.deletePods = pick(live, n).map((p) => p.name);
    log.debug('scaling down', [['jinghzhu', jz.name], ['live', live.length], ['desired', desired], ['deleting', out.deletePods.join(',')]]);
  }

  const ready = pod.countReady(live);
  const generation = jz.metadata.generation;
  const computed = status.build(
    live.map((p) => p.name),
    status.state(live.length, ready, desired),
    statusMessage(live.length, ready, desired, activity, n),
    generation !== 0n ? generation : undefined,
  );
  out.status = status.patchFor(jz, computed);
  return out;
}
