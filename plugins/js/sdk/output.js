// What a reconcile returns, and its encoding into a 0.2 `reconcile-output`
// (one string table, labels in one flat list).
//
// An output is a plain object; every key is optional:
//   { createPods: [{ name?, generateName?, labels?: Map|object, annotations?, specJson? }],
//     deletePods: [name], status?: {current, podList, state, message, observedGeneration?},
//     requeueAfterMs?: number|BigInt, events: [{eventType: 'normal'|'warning', reason, message}] }

import { StringTable } from './input.js';

const encoder = new TextEncoder();

/** An output that asks for nothing. */
export function emptyOutput() {
  return { createPods: [], deletePods: [], status: undefined, requeueAfterMs: undefined, events: [] };
}

/** True when `output` asks for nothing at all. */
export function isEmpty(output) {
  return !(output.createPods?.length || output.deletePods?.length || output.status != null
    || output.requeueAfterMs != null || output.events?.length);
}

/** A `Normal` Event; `reason` is short UpperCamelCase, e.g. `ScalingUp`. */
export function normalEvent(reason, message) {
  return { eventType: 'normal', reason, message };
}

/** A `Warning` Event. */
export function warningEvent(reason, message) {
  return { eventType: 'warning', reason, message };
}

/** Throw from `reconcile` to fail the call: `retryable` true makes the host
 * retry with backoff, false waits for a change to the object. The `payload`
 * is what componentize-js returns as `result::err`. */
export class ReconcileError extends Error {
  constructor(message, retryable = true) {
    super(message);
    this.name = 'ReconcileError';
    this.retryable = retryable;
    Object.defineProperty(this, 'payload', { value: { message, retryable }, enumerable: false });
  }

  static retryable(message) { return new ReconcileError(message, true); }
  static fatal(message) { return new ReconcileError(message, false); }
}

function entries(m) {
  if (m == null) return [];
  return m instanceof Map ? [...m.entries()] : Object.entries(m);
}

/** Interns strings into one table: `add(s)` returns the id (0 is ''). */
export class StringTableBuilder {
  constructor() {
    this.ids = new Map([['', 0]]);
    this.chunks = [];
    this.ends = [0];
    this.size = 0;
  }

  add(s) {
    let id = this.ids.get(s);
    if (id === undefined) {
      const b = encoder.encode(s);
      this.chunks.push(b);
      this.size += b.length;
      id = this.ends.length;
      this.ends.push(this.size);
      this.ids.set(s, id);
    }
    return id;
  }

  table() {
    const bytes = new Uint8Array(this.size);
    let at = 0;
    for (const c of this.chunks) {
      bytes.set(c, at);
      at += c.length;
    }
    return { bytes, ends: Uint32Array.from(this.ends) };
  }
}

export function encodeStatus(status, add) {
  const st = {
    current: status.current,
    podList: Uint32Array.from(status.podList, add),
    state: add(status.state),
    message: add(status.message),
  };
  if (status.observedGeneration != null) st.observedGeneration = BigInt(status.observedGeneration);
  return st;
}

/** The 0.2 `reconcile-output` for `output`. */
export function encode(output) {
  const t = new StringTableBuilder();
  const add = (s) => t.add(s);
  const pairs = [];
  const spans = new Map();
  const span = (m) => {
    const list = entries(m);
    const key = JSON.stringify(list);
    let s = spans.get(key);
    if (s === undefined) {
      s = { start: pairs.length, len: list.length };
      for (const [k, v] of list) pairs.push({ key: add(k), value: add(v) });
      spans.set(key, s);
    }
    return s;
  };
  const createPods = (output.createPods ?? []).map((c) => {
    const pc = { labels: span(c.labels), annotations: span(c.annotations), specJson: add(c.specJson ?? '') };
    if (c.name != null) pc.name = add(c.name);
    if (c.generateName != null) pc.generateName = add(c.generateName);
    return pc;
  });
  const deletePods = Uint32Array.from(output.deletePods ?? [], add);
  const raw = {
    pairs,
    createPods,
    deletePods,
    events: (output.events ?? []).map((e) => ({ eventType: e.eventType, reason: add(e.reason), message: add(e.message) })),
  };
  if (output.status != null) raw.status = encodeStatus(output.status, add);
  if (output.requeueAfterMs != null) raw.requeueAfterMs = BigInt(output.requeueAfterMs);
  raw.strings = t.table();
  return raw;
}

/** The output a raw 0.2 `reconcile-output` describes (labels as Maps):
 * the inverse of `encode`, for tests and tools. */
export function decodeOutput(raw) {
  const s = new StringTable(raw.strings);
  const map = (span) => {
    const m = new Map();
    for (let i = span.start; i < span.start + span.len; i++) m.set(s.get(raw.pairs[i].key), s.get(raw.pairs[i].value));
    return m;
  };
  const out = {
    createPods: raw.createPods.map((c) => {
      const pc = { labels: map(c.labels), annotations: map(c.annotations), specJson: s.get(c.specJson) };
      if (c.name != null) pc.name = s.get(c.name);
      if (c.generateName != null) pc.generateName = s.get(c.generateName);
      return pc;
    }),
    deletePods: Array.from(raw.deletePods, (i) => s.get(i)),
    status: undefined,
    requeueAfterMs: raw.requeueAfterMs,
    events: raw.events.map((e) => ({ eventType: e.eventType, reason: s.get(e.reason), message: s.get(e.message) })),
  };
  if (raw.status != null) {
    const st = raw.status;
    out.status = {
      current: st.current,
      podList: Array.from(st.podList, (i) => s.get(i)),
      state: s.get(st.state),
      message: s.get(st.message),
      observedGeneration: st.observedGeneration,
    };
  }
  return out;
}
