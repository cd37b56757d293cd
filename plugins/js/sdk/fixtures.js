// Golden fixtures natively (format: plugins/FIXTURES.md): read a case's
// input.yaml as the host does, run the plugin, compare with expected.yaml,
// then check idempotence as `wasm-operator reconcile --fixtures` does.
// Native only (node:fs and the `yaml` package).
//
//   import { runAll } from '../sdk/fixtures.js';
//   const failures = runAll('fixtures', reconcile, 'wit/default-pod-spec.json');

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';

import { compareStrings, sortedMap } from './kv.js';
import { decodeOutput, isEmpty } from './output.js';
import { call } from './plugin.js';
import { API_VERSION, KIND, encodeInput } from './testing.js';
import { parseRfc3339 } from './time.js';

/** `now` when a case has no `now` file. */
export const DEFAULT_NOW = '2026-01-01T00:00:00Z';

const PHASES = { '': 'pending', Pending: 'pending', Running: 'running', Succeeded: 'succeeded', Failed: 'failed', Unknown: 'unknown' };

/** Every YAML document of `text` (YAML 1.2 core schema, as the host reads it). */
export function loadAll(text) {
  return parseAllDocuments(text, { schema: 'core', intAsBigInt: false }).map((d) => {
    if (d.errors.length) throw new Error(d.errors[0].message);
    return d.toJS();
  });
}

/** Every object of a YAML text (`kind: List` flattened). */
export function objects(text) {
  const out = [];
  for (const doc of loadAll(text)) {
    if (doc == null) continue;
    if (doc.kind === 'List') out.push(...(doc.items ?? []));
    else out.push(doc);
  }
  return out;
}

const str = (v) => (v == null ? '' : typeof v === 'string' ? v : JSON.stringify(v));
const stringMap = (v) => (v && typeof v === 'object' ? sortedMap(Object.entries(v).map(([k, x]) => [k, str(x)])) : new Map());
const timestamp = (v) => (v == null ? undefined : parseRfc3339(String(v)));

function canonicalJson(v) {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort(compareStrings).map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

function parseMeta(obj, defaultNamespace) {
  const m = obj.metadata ?? {};
  return {
    name: str(m.name),
    namespace: str(m.namespace) || defaultNamespace,
    uid: str(m.uid),
    resourceVersion: str(m.resourceVersion),
    generation: BigInt(m.generation ?? 0),
    labels: stringMap(m.labels),
    annotations: stringMap(m.annotations),
    creationTimestamp: timestamp(m.creationTimestamp),
    deletionTimestamp: timestamp(m.deletionTimestamp),
    ownerReferences: (m.ownerReferences ?? []).map((r) => ({
      apiVersion: str(r.apiVersion), kind: str(r.kind), name: str(r.name), uid: str(r.uid), controller: r.controller === true,
    })),
  };
}

function parseJinghzhu(obj) {
  const spec = obj.spec ?? {};
  let template;
  if (spec.template && typeof spec.template === 'object') {
    const tm = spec.template.metadata ?? {};
    template = {
      labels: stringMap(tm.labels),
      annotations: stringMap(tm.annotations),
      specJson: 'spec' in spec.template ? canonicalJson(spec.template.spec) : '',
    };
  }
  let status;
  if (obj.status && typeof obj.status === 'object') {
    const s = obj.status;
    status = {
      current: Number(s.current ?? 0),
      podList: (s.podList ?? []).map(String),
      state: str(s.state),
      message: str(s.message),
      observedGeneration: s.observedGeneration == null ? undefined : BigInt(s.observedGeneration),
    };
  }
  const desired = Number(spec.desired ?? 0);
  if (!Number.isInteger(desired) || desired < 0 || desired >= 2 ** 32) throw new Error(`spec.desired ${desired} is not a u32`);
  return { metadata: parseMeta(obj, 'default'), desired, template, status };
}

function parsePod(obj, defaultNamespace) {
  const st = obj.status ?? {};
  const phase = PHASES[str(st.phase)];
  if (phase === undefined) throw new Error(`unknown pod phase ${JSON.stringify(st.phase)}`);
  const ready = (st.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
  return { metadata: parseMeta(obj, defaultNamespace), phase, ready };
}

/** The input a case directory describes: only the Pods the host would pass
 * (controller reference to the Jinghzhu's uid, same namespace), or every Pod
 * with `controlledOnly` false. */
export function loadCase(caseDir, controlledOnly = true) {
  const objs = objects(readFileSync(join(caseDir, 'input.yaml'), 'utf8'));
  if (objs.some((o) => !o || typeof o !== 'object' || !o.kind)) throw new Error('an object without kind');
  const jzs = objs.filter((o) => o.kind === 'Jinghzhu');
  if (jzs.length !== 1) throw new Error(`expected exactly one Jinghzhu, found ${jzs.length}`);
  const jz = parseJinghzhu(jzs[0]);
  const pods = [];
  for (const o of objs) {
    if (o.kind !== 'Pod') continue;
    const p = parsePod(o, jz.metadata.namespace);
    const controlled = p.metadata.namespace === jz.metadata.namespace
      && p.metadata.ownerReferences.some((r) => r.controller && r.uid === jz.metadata.uid);
    if (controlled || !controlledOnly) pods.push(p);
  }
  pods.sort((a, b) => compareStrings(a.metadata.name, b.metadata.name));
  const nowPath = join(caseDir, 'now');
  const now = parseRfc3339(existsSync(nowPath) ? readFileSync(nowPath, 'utf8') : DEFAULT_NOW);
  return { jinghzhu: jz, pods, now };
}

/** The host's default pod spec (`wit/default-pod-spec.json`). */
export function loadDefaultSpec(path) {
  return JSON.parse(readFileSync(path, 'utf8'));
}

const mapObject = (m) => Object.fromEntries(m instanceof Map ? m : Object.entries(m ?? {}));
const plainNumber = (v) => (typeof v === 'bigint' ? Number(v) : v);

/** `output` in the shape `wasm-operator reconcile` prints (and expected.yaml holds). */
export function toActions(kase, output, defaultSpec) {
  const t = kase.jinghzhu.template;
  const templateSpec = t && t.specJson.trim() !== '' ? JSON.parse(t.specJson) : defaultSpec;
  const actions = {};
  if (output.createPods?.length) {
    actions.createPods = output.createPods.map((c) => {
      const d = {};
      if (c.name != null) d.name = c.name;
      if (c.generateName != null) d.generateName = c.generateName;
      const labels = mapObject(c.labels);
      const annotations = mapObject(c.annotations);
      if (Object.keys(labels).length) d.labels = labels;
      if (Object.keys(annotations).length) d.annotations = annotations;
      d.spec = (c.specJson ?? '').trim() !== '' ? JSON.parse(c.specJson) : templateSpec;
      return d;
    });
  }
  if (output.deletePods?.length) actions.deletePods = [...output.deletePods];
  if (output.status != null) {
    const s = output.status;
    actions.status = { current: s.current, podList: [...s.podList], state: s.state, message: s.message };
    if (s.observedGeneration != null) actions.status.observedGeneration = plainNumber(s.observedGeneration);
  }
  if (output.requeueAfterMs != null) actions.requeueAfterMs = plainNumber(output.requeueAfterMs);
  if (output.events?.length) {
    actions.events = output.events.map((e) => ({ type: e.eventType === 'normal' ? 'Normal' : 'Warning', reason: e.reason, message: e.message }));
  }
  return actions;
}

const ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

function suffix(n) {
  let out = '';
  for (let i = 0; i < 5; i++) {
    out += ALPHABET[n % ALPHABET.length];
    n = Math.floor(n / ALPHABET.length);
  }
  return out;
}

/** `kase` after the API server carried out `output`; `serial.n` numbers
 * generated names across calls. */
export function apply(kase, output, serial) {
  const next = structuredClone(kase);
  const jz = next.jinghzhu;
  const deleted = new Set(output.deletePods ?? []);
  next.pods = next.pods.filter((p) => !deleted.has(p.metadata.name));
  for (const c of output.createPods ?? []) {
    serial.n += 1;
    const name = c.name ?? (c.generateName != null ? c.generateName + suffix(serial.n) : `unnamed-${suffix(serial.n)}`);
    const labels = new Map(c.labels instanceof Map ? c.labels : Object.entries(c.labels ?? {}));
    labels.set('app.kubernetes.io/managed-by', 'wasm-operator');
    labels.set('jinghzhu.io/owner', jz.metadata.name);
    next.pods.push({
      metadata: {
        name, namespace: jz.metadata.namespace, uid: `offline-uid-${serial.n}`, resourceVersion: '', generation: 0n,
        labels, annotations: new Map(c.annotations instanceof Map ? c.annotations : Object.entries(c.annotations ?? {})),
        creationTimestamp: kase.now, deletionTimestamp: undefined,
        ownerReferences: [{ apiVersion: API_VERSION, kind: KIND, name: jz.metadata.name, uid: jz.metadata.uid, controller: true }],
      },
      phase: 'pending',
      ready: false,
    });
  }
  next.pods.sort((a, b) => compareStrings(a.metadata.name, b.metadata.name));
  if (output.status != null) jz.status = structuredClone(output.status);
  return next;
}

/** Runs `reconcile` as the component does: the case encoded as a 0.2 input,
 * decoded by the SDK, the output encoded and decoded back. */
export function run(reconcile, kase) {
  return decodeOutput(call(reconcile, encodeInput(kase)));
}

/** undefined when the case passes, else what differs. */
export function checkCase(caseDir, reconcile, defaultSpec) {
  const kase = loadCase(caseDir, true);
  const output = run(reconcile, kase);
  if (!isDeepStrictEqual(run(reconcile, loadCase(caseDir, false)), output)) {
    return 'the output changes when uncontrolled pods are passed in';
  }
  const actual = toActions(kase, output, defaultSpec);
  const docs = loadAll(readFileSync(join(caseDir, 'expected.yaml'), 'utf8')).filter((d) => d != null);
  if (docs.length > 1) return `expected.yaml holds ${docs.length} documents, not 1`;
  const expected = docs[0] ?? {};
  if (!isDeepStrictEqual(actual, expected)) {
    return `output differs from expected.yaml\n--- expected\n${stringify(expected)}--- actual\n${stringify(actual)}`;
  }
  const serial = { n: 0 };
  const secondCase = apply(kase, output, serial);
  const second = run(reconcile, secondCase);
  if (second.createPods.length || second.deletePods.length) {
    return `second reconcile still creates or deletes: ${JSON.stringify(toActions(secondCase, second, defaultSpec))}`;
  }
  const thirdCase = apply(secondCase, second, serial);
  const third = run(reconcile, thirdCase);
  if (!isEmpty(third)) return `third reconcile is not empty: ${JSON.stringify(toActions(thirdCase, third, defaultSpec))}`;
  return undefined;
}

/** The case directories (those with an input.yaml), by name. */
export function caseDirs(fixturesDir) {
  return readdirSync(fixturesDir)
    .filter((d) => existsSync(join(fixturesDir, d, 'input.yaml')) && statSync(join(fixturesDir, d)).isDirectory())
    .sort(compareStrings)
    .map((d) => join(fixturesDir, d));
}

/** Every case of `fixturesDir`; returns `{case: what failed}`. */
export function runAll(fixturesDir, reconcile, defaultSpecPath) {
  const defaultSpec = loadDefaultSpec(defaultSpecPath);
  const failures = {};
  for (const dir of caseDirs(fixturesDir)) {
    let err;
    try {
      err = checkCase(dir, reconcile, defaultSpec);
    } catch (e) {
      err = `${e.name}: ${e.message}`;
    }
    if (err !== undefined) failures[basename(dir)] = err;
  }
  return failures;
}
