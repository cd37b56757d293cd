// The shared golden fixtures (plugins/replicaset/fixtures), natively: each
// case's proposal equals expected.yaml and the plugin converges.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { test } from 'node:test';

import * as fixtures from '../sdk/fixtures.js';
import { warningEvent } from '../sdk/output.js';
import { reconcile } from '../replicaset/replicaset.js';
import { DEFAULT_SPEC, FIXTURES } from './paths.js';

const REQUIRED_CASES = ['scale-0-to-1', 'scale-0-to-3', 'scale-3-to-1', 'terminating-pods', 'desired-0',
  'converged-no-change', 'stale-status-only', 'foreign-pod-ignored', 'failed-pod-replaced', 'not-ready-pending'];
const defaultSpec = fixtures.loadDefaultSpec(DEFAULT_SPEC);

test('the required cases exist', () => {
  const names = fixtures.caseDirs(FIXTURES).map((d) => basename(d));
  for (const c of REQUIRED_CASES) assert.ok(names.includes(c), `missing case ${c}`);
});

for (const dir of fixtures.caseDirs(FIXTURES)) {
  test(`fixture ${basename(dir)} matches and converges`, () => {
    assert.equal(fixtures.checkCase(dir, reconcile, defaultSpec), undefined);
  });
}

test('a wrong expectation is detected', () => {
  const dir = join(FIXTURES, 'scale-0-to-1');
  const kase = fixtures.loadCase(dir);
  const out = fixtures.run(reconcile, kase);
  const expected = fixtures.loadAll(readFileSync(join(dir, 'expected.yaml'), 'utf8'))[0];
  assert.deepEqual(fixtures.toActions(kase, out, defaultSpec), expected);
  out.createPods.push(out.createPods[0]);
  assert.notDeepEqual(fixtures.toActions(kase, out, defaultSpec), expected);
  const wrong = (input) => {
    // An Event the expectation does not have (the plugin proposes none).
    const o = reconcile(input);
    o.events.push(warningEvent('ScalingUp', 'Creating 1 pod(s)'));
    return o;
  };
  assert.notEqual(fixtures.checkCase(dir, wrong, defaultSpec), undefined);
});

test('the loader reads what the host would send', () => {
  const kase = fixtures.loadCase(join(FIXTURES, 'scale-3-to-1'));
  const jz = kase.jinghzhu;
  assert.deepEqual([jz.metadata.name, jz.metadata.generation, jz.desired, jz.status.current], ['web', 3n, 1, 3]);
  assert.deepEqual(kase.pods.map((p) => [p.metadata.name, p.ready]), [['web-4xq8z', true], ['web-b7k2m', false], ['web-r9t5w', true]]);
  assert.equal(fixtures.loadCase(join(FIXTURES, 'scale-0-to-3')).jinghzhu.template.labels.get('tier'), 'frontend');
  const terminating = fixtures.loadCase(join(FIXTURES, 'terminating-pods'), false);
  assert.equal(terminating.now.seconds, 1767225605n);
  assert.equal(terminating.pods.filter((p) => p.metadata.deletionTimestamp != null).length, 1);
  assert.equal(fixtures.loadCase(join(FIXTURES, 'foreign-pod-ignored'), false).pods.length, 2);
  assert.equal(fixtures.loadCase(join(FIXTURES, 'foreign-pod-ignored')).pods.length, 0);
});
