// Builders for reconcile inputs, for native unit tests (as the Rust SDK's
// `testing`), and `encodeInput`, which lays plain objects out as a 0.2
// `reconcile-input` the way the host does.
//
//   import { input, jinghzhu, pod } from '../sdk/testing.js';
//   const view = input(jinghzhu('demo', 'default', 3)).pod(pod('demo-a', 'pending')).view();
//
// Defaults: uids `uid-<name>`, generation 1, created an hour before
// DEFAULT_NOW, Pods in the Jinghzhu's namespace with a controller owner
// reference to it, Pods sorted by name.

import { decode } from './input.js';
import { compareStrings, sortedMap } from './kv.js';
import { StringTableBuilder, encodeStatus } from './output.js';

export const API_VERSION = 'jinghzhu.io/v1';
export const KIND = 'Jinghzhu';
/** `now` of built inputs (2023-11-14T22:13:20Z). */
export const DEFAULT_NOW = 1700000000;
/** Default creation time: an hour before DEFAULT_NOW. */
export const DEFAULT_CREATED = DEFAULT_NOW - 3600;

const ts = (s) => ({ seconds: BigInt(s), nanoseconds: 0 });

/** Plain metadata: `{name, namespace, uid, resourceVersion, generation (BigInt),
 * labels, annotations, creationTimestamp?, deletionTimestamp?, ownerReferences}`. */
export function meta(name, namespace = '') {
  return {
    name, namespace, uid: `uid-${name}`, resourceVersion: '1', generation: 1n,
    labels: new Map(), annotations: new Map(), creationTimestamp: ts(DEFAULT_CREATED),
    deletionTimestamp: undefined, ownerReferences: [],
  };
}

/** The 0.2 `reconcile-input` for plain objects `{jinghzhu: {metadata, desired,
 * template?, status?}, pods: [{metadata, phase, ready}], now}`. */
export function encodeInput(objects) {
  const t = new StringTableBuilder();
  const add = (s) => t.add(s);
  const pairs = [];
  const owners = [];
  const span = (m) => {
    const sorted = sortedMap(m);
    const start = pairs.length;
    for (const [k, v] of sorted) pairs.push({ key: add(k), value: add(v) });
    return { start, len: sorted.size };
  };
  const encodeMeta = (m) => {
    const out = {
      name: add(m.name), namespace: add(m.namespace ?? ''), uid: add(m.uid ?? ''), resourceVersion: add(m.resourceVersion ?? ''),
      generation: BigInt(m.generation ?? 0), labels: span(m.labels), annotations: span(m.annotations),
    };
    const start = owners.length;
    for (const r of m.ownerReferences ?? []) {
      owners.push({ apiVersion: add(r.apiVersion), kind: add(r.kind), name: add(r.name), uid: add(r.uid), controller: r.controller });
    }
    out.ownerReferences = { start, len: owners.length - start };
    if (m.creationTimestamp != null) out.creationTimestamp = m.creationTimestamp;
    if (m.deletionTimestamp != null) out.deletionTimestamp = m.deletionTimestamp;
    return out;
  };
  const jz = objects.jinghzhu;
  const jzMeta = encodeMeta(jz.metadata);
  const spec = { desired: jz.desired };
  if (jz.template != null) {
    spec.template = { labels: span(jz.template.labels), annotations: span(jz.template.annotations), specJson: add(jz.template.specJson ?? '') };
  }
  const raw = { jinghzhu: { metadata: jzMeta, spec } };
  if (jz.status != null) raw.jinghzhu.status = encodeStatus(jz.status, add);
  raw.pods = [...objects.pods]
    .sort((a, b) => compareStrings(a.metadata.name, b.metadata.name))
    .map((p) => ({ metadata: encodeMeta(p.metadata), phase: p.phase, ready: p.ready }));
  raw.pairs = pairs;
  raw.owners = owners;
  raw.now = objects.now;
  raw.strings = t.table();
  return raw;
}

/** The controller owner reference a Pod of `owner` carries. */
export function controllerReference(owner) {
  return { apiVersion: API_VERSION, kind: KIND, name: owner.metadata.name, uid: owner.metadata.uid, controller: true };
}

class JinghzhuBuilder {
  constructor(name, namespace, desired) {
    this.inner = { metadata: meta(name, namespace), desired, template: undefined, status: undefined };
  }

  uid(uid) { this.inner.metadata.uid = uid; return this; }
  generation(g) { this.inner.metadata.generation = BigInt(g); return this; }
  label(k, v) { this.inner.metadata.labels.set(k, v); return this; }
  createdAt(s) { this.inner.metadata.creationTimestamp = ts(s); return this; }
  deletingAt(s) { this.inner.metadata.deletionTimestamp = ts(s); return this; }
  desired(d) { this.inner.desired = d; return this; }
  /** `{labels, annotations, specJson}`. */
  template(t) { this.inner.template = t; return this; }
  status(s) { this.inner.status = s; return this; }
  build() { return structuredClone(this.inner); }
  input() { return new InputBuilder(this); }
}

/** A Jinghzhu asking for `desired` Pods, no template, no status. */
export function jinghzhu(name, namespace = 'default', desired = 1) {
  return new JinghzhuBuilder(name, namespace, desired);
}

class PodBuilder {
  constructor(name, phase) {
    this.inner = { metadata: meta(name), phase, ready: phase === 'running' };
    this.autoOwner = true;
  }

  ready(r) { this.inner.ready = r; return this; }
  createdAt(s) { this.inner.metadata.creationTimestamp = ts(s); return this; }
  noCreationTimestamp() { this.inner.metadata.creationTimestamp = undefined; return this; }
  terminating() { return this.deletingAt(DEFAULT_NOW); }
  deletingAt(s) { this.inner.metadata.deletionTimestamp = ts(s); return this; }
  label(k, v) { this.inner.metadata.labels.set(k, v); return this; }
  ownedBy(owner) { this.inner.metadata.ownerReferences.push(controllerReference(owner)); return this; }
  unowned() { this.inner.metadata.ownerReferences = []; this.autoOwner = false; return this; }
}

/** A Pod in `phase` (ready when running), owned by the input's Jinghzhu. */
export function pod(name, phase = 'running') {
  return new PodBuilder(name, phase);
}

class InputBuilder {
  constructor(jz) {
    this.jz = jz.build();
    this.builders = [];
    this.nowValue = ts(DEFAULT_NOW);
  }

  pod(p) { this.builders.push(p); return this; }
  pods(ps) { this.builders.push(...ps); return this; }
  now(s) { this.nowValue = ts(s); return this; }

  objects() {
    const pods = this.builders.map((b) => {
      const p = structuredClone(b.inner);
      if (!p.metadata.namespace) p.metadata.namespace = this.jz.metadata.namespace;
      if (b.autoOwner && p.metadata.ownerReferences.length === 0) p.metadata.ownerReferences.push(controllerReference(this.jz));
      return p;
    });
    return { jinghzhu: structuredClone(this.jz), pods, now: this.nowValue };
  }

  /** The raw 0.2 record, as the host would send it. */
  build() { return encodeInput(this.objects()); }

  /** The friendly view a plugin's `reconcile` receives. */
  view() { return decode(this.build()); }
}

export function input(jz) {
  return new InputBuilder(jz);
}
