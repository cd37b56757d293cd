// The SDK's own parts: the 0.2 string table both ways, views, helpers.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { StringTable } from '../sdk/input.js';
import { compareStrings, merge } from '../sdk/kv.js';
import { ReconcileError, decodeOutput, encode, warningEvent } from '../sdk/output.js';
import { call, reconcilerExport } from '../sdk/plugin.js';
import * as pod from '../sdk/pod.js';
import * as status from '../sdk/status.js';
import { input, jinghzhu, pod as aPod } from '../sdk/testing.js';
import * as time from '../sdk/time.js';

test('the string table decodes UTF-8 by byte offsets', () => {
  const t = new StringTable({ bytes: new TextEncoder().encode('é日x'), ends: Uint32Array.from([0, 2, 5, 6]) });
  assert.deepEqual([0, 1, 2, 3].map((i) => t.get(i)), ['', 'é', '日', 'x']);
  assert.throws(() => t.get(4), RangeError);
});

test('output encoding interns and round-trips', () => {
  const out = {
    createPods: [{ generateName: 'a-', labels: new Map([['k', 'v']]), annotations: new Map(), specJson: '' },
      { generateName: 'a-', labels: new Map([['k', 'v']]), annotations: new Map(), specJson: '' }],
    deletePods: ['a-1', 'v'],
    status: { current: 1, podList: ['a-1'], state: 'Running', message: 'ok', observedGeneration: 3n },
    requeueAfterMs: 5n,
    events: [warningEvent('Bad', 'ünïcode')],
  };
  const raw = encode(out);
  assert.equal(raw.strings.ends[0], 0);
  assert.equal(raw.strings.ends.length, 9);
  assert.equal(raw.pairs.length, 1, 'identical label maps share one span');
  assert.deepEqual(decodeOutput(raw), out);
});

test('views read what was encoded', () => {
  const view = input(jinghzhu('web', 'ns', 2).label('team', 'a').generation(4))
    .pod(aPod('web-b', 'unknown').label('x', '1')).pod(aPod('web-a')).now(9).view();
  const jz = view.jinghzhu;
  assert.deepEqual([jz.name, jz.metadata.namespace, jz.metadata.uid, jz.metadata.generation, jz.desired], ['web', 'ns', 'uid-web', 4n, 2]);
  assert.deepEqual([...jz.metadata.labels], [['team', 'a']]);
  assert.equal(jz.template, undefined);
  assert.equal(jz.status, undefined);
  assert.deepEqual(view.pods.map((p) => p.name), ['web-a', 'web-b']);
  assert.equal(view.pods[1].phase, 'unknown');
  assert.equal(view.pods[0].metadata.ownerReferences[0].kind, 'Jinghzhu');
  assert.equal(view.pods[0].metadata.controllerUid(), 'uid-web');
  assert.equal(view.now.seconds, 9n);
});

test('pod and status helpers follow the Rust SDK', () => {
  const view = input(jinghzhu('w', 'd', 3)).pods([aPod('w-a'), aPod('w-b').terminating(), aPod('w-c', 'failed'), aPod('w-d').ready(false)]).view();
  assert.deepEqual(pod.livePods(view.pods).map((p) => p.name), ['w-a', 'w-d']);
  assert.equal(pod.countReady(view.pods), 1);
  assert.deepEqual(pod.sortedNames([...view.pods].reverse()), ['w-a', 'w-b', 'w-c', 'w-d']);
  assert.deepEqual([status.state(0, 0, 3), status.state(3, 2, 3), status.state(3, 3, 3), status.state(0, 0, 0)], ['Scaling', 'Pending', 'Running', 'Running']);
  const a = status.build(['b', 'a'], 'Running', 'm', 1n);
  assert.deepEqual([a.current, a.podList], [2, ['a', 'b']]);
  assert.ok(status.statusEqual(a, { current: 2, podList: ['b', 'a'], state: 'Running', message: 'm', observedGeneration: 1n }));
  assert.equal(status.statusPatch(a, a), undefined);
  assert.equal(status.statusPatch(undefined, a), a);
  assert.deepEqual([...merge(new Map([['b', '2'], ['a', '1']]), { b: 'x' })], [['a', '1'], ['b', 'x']]);
  assert.deepEqual(pod.fromTemplate(view.jinghzhu), { generateName: 'w-', labels: new Map(), annotations: new Map(), specJson: '' });
  // Code point order, not UTF-16 order: U+FF5E sorts before U+1F600.
  assert.deepEqual(['\u{1F600}', '\uFF5E'].sort(compareStrings), ['\uFF5E', '\u{1F600}']);
});

test('time conversions', () => {
  assert.equal(time.parseRfc3339('2026-01-01T00:00:00Z').seconds, 1767225600n);
  const ts = time.parseRfc3339('2023-11-14T22:13:20.5Z');
  assert.deepEqual(ts, { seconds: 1700000000n, nanoseconds: 500000000 });
  assert.equal(time.parseRfc3339('2023-11-15T00:13:20+02:00').seconds, 1700000000n);
  assert.equal(time.formatRfc3339(ts), '2023-11-14T22:13:20.5Z');
  assert.equal(time.ageSeconds(time.fromSecs(10), time.fromSecs(70)), 60);
  assert.throws(() => time.parseRfc3339('yesterday'));
});

test('errors become err results', () => {
  const raw = input(jinghzhu('w')).build();
  assert.throws(() => call(() => { throw ReconcileError.fatal('no'); }, raw), (e) => e.payload.message === 'no' && e.payload.retryable === false);
  assert.throws(() => call(() => ({}).x.y, raw), (e) => e.payload.retryable && e.payload.message.startsWith('TypeError'));
  const exp = reconcilerExport({ name: 'n', version: '1', reconcile: () => ({}) });
  assert.deepEqual(exp.info(), { name: 'n', version: '1' });
});
