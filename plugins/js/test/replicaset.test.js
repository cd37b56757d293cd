// Scenario tests of the replicaset logic on inputs built with the SDK's
// testing builders (the same scenarios as plugins/replicaset/tests).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as log from '../sdk/log.js';
import { isEmpty } from '../sdk/output.js';
import * as status from '../sdk/status.js';
import { input, jinghzhu, pod } from '../sdk/testing.js';
import { reconcile } from '../replicaset/replicaset.js';

test('scales up from the template without an event of its own', () => {
  const jz = jinghzhu('web', 'shop', 3).template({ labels: new Map([['app', 'web']]), annotations: new Map([['n', 'x']]), specJson: '{"containers":[]}' });
  log.takeCaptured();
  const out = reconcile(input(jz).pod(pod('web-a')).view());
  assert.equal(out.createPods.length, 2);
  const c = out.createPods[0];
  assert.deepEqual([c.generateName, [...c.labels], [...c.annotations], c.specJson], ['web-', [['app', 'web']], [['n', 'x']], '{"containers":[]}']);
  // The host's SuccessfulCreate names the pods: the plugin adds no Event.
  assert.deepEqual(out.events, []);
  assert.equal(out.status.message, '1/3 pods, 1/3 ready; creating 2');
  assert.equal(out.status.state, status.SCALING);
  const logged = log.takeCaptured();
  assert.equal(logged.length, 1);
  assert.equal(logged[0].message, 'scaling up');
  assert.equal(logged[0].level, 'debug');
  assert.deepEqual(logged[0].fields.find((f) => f.key === 'creating'), { key: 'creating', value: '2' });
});

test('scales down in active-pods order', () => {
  const view = input(jinghzhu('web', 'default', 1)).pods([
    pod('old-ready').createdAt(100),
    pod('new-ready').createdAt(200),
    pod('not-ready').ready(false).createdAt(50),
    pod('pending-no-time', 'pending').noCreationTimestamp(),
  ]).view();
  log.takeCaptured();
  const out = reconcile(view);
  assert.deepEqual(out.deletePods, ['pending-no-time', 'not-ready', 'new-ready']);
  // The host's SuccessfulDelete names the pods: the plugin adds no Event.
  assert.deepEqual(out.events, []);
  const logged = log.takeCaptured();
  assert.equal(logged.length, 1);
  assert.equal(logged[0].message, 'scaling down');
  assert.equal(logged[0].level, 'debug');
  assert.deepEqual(logged[0].fields.find((f) => f.key === 'deleting'), { key: 'deleting', value: 'pending-no-time,not-ready,new-ready' });
});

test('terminating and finished pods are replaced, not deleted', () => {
  const out = reconcile(input(jinghzhu('web', 'default', 2)).pods([pod('web-a'), pod('web-b').terminating(), pod('web-c', 'failed')]).view());
  assert.deepEqual(out.deletePods, []);
  assert.equal(out.createPods.length, 1);
  assert.deepEqual(out.status.podList, ['web-a']);
});

test('uncontrolled pods are ignored and owner deletion stops scaling', () => {
  const out = reconcile(input(jinghzhu('web', 'default', 1).deletingAt(5)).pods([pod('x').unowned()]).view());
  assert.deepEqual([out.createPods, out.events], [[], []]);
  assert.equal(out.status.message, '0/1 pods, 0/1 ready; Jinghzhu is being deleted');
});

test('an unchanged status is not written', () => {
  const jz = jinghzhu('web', 'default', 1);
  const first = reconcile(input(jz).pod(pod('web-a')).view());
  assert.equal(first.status.state, status.RUNNING);
  assert.ok(isEmpty(reconcile(input(jz.status(first.status)).pod(pod('web-a')).view())));
});
