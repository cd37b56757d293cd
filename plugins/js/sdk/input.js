// Friendly read-only views of a `reconcile-input` (contract 0.2).
//
// Contract 0.2 sends every string once, in a string table, and labels,
// annotations and owner references in shared flat lists that objects refer
// to by spans. `decode(raw)` hides that: `input.jinghzhu.name`,
// `input.pods[0].phase`, `pod.metadata.labels.get('app')`. Strings decode on
// first read and are cached. Labels and annotations are `Map`s in key order.
// 64-bit numbers (`generation`, timestamps' `seconds`) are BigInts, as jco
// lifts them.

const decoder = new TextDecoder('utf-8', { fatal: true });

/** The strings of one table: `table.get(i)` is string `i`, decoded once. */
export class StringTable {
  constructor(raw) {
    this.bytes = raw.bytes;
    this.ends = raw.ends;
    this.cache = new Array(raw.ends.length);
  }

  get length() {
    return this.ends.length;
  }

  get(i) {
    let s = this.cache[i];
    if (s === undefined) {
      if (!(i >= 0 && i < this.ends.length)) {
        throw new RangeError(`string id ${i} is outside the table (${this.ends.length} strings)`);
      }
      const start = i > 0 ? this.ends[i - 1] : 0;
      s = decoder.decode(this.bytes.subarray(start, this.ends[i]));
      this.cache[i] = s;
    }
    return s;
  }
}

class Context {
  constructor(raw) {
    this.s = new StringTable(raw.strings);
    this.pairs = raw.pairs;
    this.owners = raw.owners;
  }

  map(span) {
    const out = new Map();
    for (let i = span.start; i < span.start + span.len; i++) {
      const kv = this.pairs[i];
      out.set(this.s.get(kv.key), this.s.get(kv.value));
    }
    return out;
  }

  ownerRefs(span) {
    const out = [];
    for (let i = span.start; i < span.start + span.len; i++) {
      const o = this.owners[i];
      out.push({
        apiVersion: this.s.get(o.apiVersion),
        kind: this.s.get(o.kind),
        name: this.s.get(o.name),
        uid: this.s.get(o.uid),
        controller: o.controller,
      });
    }
    return out;
  }
}

/** Metadata of the Jinghzhu or a Pod; text fields decode on first use. */
export class ObjectMeta {
  #c;
  #m;
  #labels;
  #annotations;
  #owners;

  constructor(context, meta) {
    this.#c = context;
    this.#m = meta;
  }

  get name() { return this.#c.s.get(this.#m.name); }
  get namespace() { return this.#c.s.get(this.#m.namespace); }
  get uid() { return this.#c.s.get(this.#m.uid); }
  get resourceVersion() { return this.#c.s.get(this.#m.resourceVersion); }
  /** BigInt; 0n when the API server does not track it. */
  get generation() { return this.#m.generation; }
  /** `{seconds: BigInt, nanoseconds}` or undefined. */
  get creationTimestamp() { return this.#m.creationTimestamp; }
  get deletionTimestamp() { return this.#m.deletionTimestamp; }

  /** Labels in key order (a fresh Map each time). */
  get labels() {
    this.#labels ??= this.#c.map(this.#m.labels);
    return new Map(this.#labels);
  }

  get annotations() {
    this.#annotations ??= this.#c.map(this.#m.annotations);
    return new Map(this.#annotations);
  }

  /** `[{apiVersion, kind, name, uid, controller}]`. */
  get ownerReferences() {
    this.#owners ??= this.#c.ownerRefs(this.#m.ownerReferences);
    return this.#owners.map((o) => ({ ...o }));
  }

  /** The uid of the owner reference marked controller, or undefined. */
  controllerUid() {
    const span = this.#m.ownerReferences;
    for (let i = span.start; i < span.start + span.len; i++) {
      const o = this.#c.owners[i];
      if (o.controller) return this.#c.s.get(o.uid);
    }
    return undefined;
  }
}

/** A Pod the Jinghzhu controls: `metadata`, `phase` ('pending', 'running',
 * 'succeeded', 'failed', 'unknown') and `ready`. */
export class Pod {
  constructor(context, raw) {
    this.metadata = new ObjectMeta(context, raw.metadata);
    this.phase = raw.phase;
    this.ready = raw.ready;
  }

  get name() { return this.metadata.name; }
}

/** The object being reconciled. `template` is `{labels, annotations, specJson}`
 * (`specJson` '' when the template has no spec) or undefined; `status` is
 * `{current, podList, state, message, observedGeneration}` or undefined. */
export class Jinghzhu {
  #c;
  #raw;
  #decoded = false;
  #template;
  #status;

  constructor(context, raw) {
    this.#c = context;
    this.#raw = raw;
    this.metadata = new ObjectMeta(context, raw.metadata);
    this.desired = raw.spec.desired;
  }

  get name() { return this.metadata.name; }

  #decode() {
    if (this.#decoded) return;
    const c = this.#c;
    const t = this.#raw.spec.template;
    if (t !== undefined && t !== null) {
      this.#template = { labels: c.map(t.labels), annotations: c.map(t.annotations), specJson: c.s.get(t.specJson) };
    }
    const st = this.#raw.status;
    if (st !== undefined && st !== null) {
      this.#status = {
        current: st.current,
        podList: Array.from(st.podList, (i) => c.s.get(i)),
        state: c.s.get(st.state),
        message: c.s.get(st.message),
        observedGeneration: st.observedGeneration,
      };
    }
    this.#decoded = true;
  }

  get template() {
    this.#decode();
    return this.#template;
  }

  get status() {
    this.#decode();
    return this.#status;
  }
}

/** Everything a reconcile may know: `jinghzhu`, `pods` (sorted by name,
 * terminating ones included), `now` (`{seconds: BigInt, nanoseconds}`). */
export class Input {
  constructor(raw) {
    const context = new Context(raw);
    this.raw = raw;
    this.strings = context.s;
    this.jinghzhu = new Jinghzhu(context, raw.jinghzhu);
    this.pods = raw.pods.map((p) => new Pod(context, p));
    this.now = raw.now;
  }
}

/** The friendly view of a raw 0.2 `reconcile-input`. */
export function decode(raw) {
  return new Input(raw);
}
