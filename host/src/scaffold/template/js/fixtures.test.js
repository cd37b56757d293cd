// Every case in fixtures/: the proposal equals expected.yaml and the plugin
// converges (what `wasm-operator reconcile --fixtures fixtures` checks on the
// built component).
import assert from 'node:assert/strict';
import { basename } from 'node:path';
import { test } from 'node:test';

import * as fixtures from '../sdk/fixtures.js';
import { reconcile } from '../src/plugin.js';
import { DEFAULT_SPEC, FIXTURES } from './paths.js';

const defaultSpec = fixtures.loadDefaultSpec(DEFAULT_SPEC);
const cases = fixtures.caseDirs(FIXTURES);

test('there are cases', () => assert.ok(cases.length > 0));

for (const dir of cases) {
  test(`fixture ${basename(dir)}`, () => {
    assert.equal(fixtures.checkCase(dir, reconcile, defaultSpec), undefined);
  });
}
