// Unit tests of reconcile on inputs built with the SDK's builders.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { isEmpty } from '../sdk/output.js';
import * as status from '../sdk/status.js';
import { input, jinghzhu, pod } from '../sdk/testing.js';
import { reconcile } from '../src/plugin.js';

test('creates the missing pods', () => {
  const out = reconcile(input(jinghzhu('web', 'default', 3)).pod(pod('web-a')).view());
  assert.deepEqual(out.createPods.map((c) => c.generateName), ['web-', 'web-']);
  assert.equal(out.status.state, status.SCALING);
  assert.equal(out.status.message, '1/3 pods, 1/3 ready; creating 2');
});

test('deletes pending pods first', () => {
  const view = input(jinghzhu('web', 'default', 1)).pods([pod('web-a'), pod('web-b', 'pending')]).view();
  assert.deepEqual(reconcile(view).deletePods, ['web-b']);
});

test('a converged object needs nothing', () => {
  const jz = jinghzhu('web', 'default', 1);
  const first = reconcile(input(jz).pod(pod('web-a')).view());
  assert.ok(isEmpty(reconcile(input(jz.status(first.status)).pod(pod('web-a')).view())));
});
