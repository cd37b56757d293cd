// SDK for wasm-operator reconcile plugins in JavaScript (contract
// `jinghzhu:operator@0.2.0`, built with componentize-js). Native-only parts
// (testing builders, fixtures) live in testing.js and fixtures.js, which a
// component never imports.
export * as kv from './kv.js';
export * as log from './log.js';
export * as pod from './pod.js';
export * as status from './status.js';
export * as time from './time.js';
export { decode, Input, Jinghzhu, ObjectMeta, Pod, StringTable } from './input.js';
export { decodeOutput, emptyOutput, encode, isEmpty, normalEvent, ReconcileError, warningEvent } from './output.js';
export { call, reconcilerExport } from './plugin.js';

/** The WIT package this SDK implements. */
export const WIT_PACKAGE = 'jinghzhu:operator@0.2.0';
/** The interface a plugin exports. */
export const RECONCILER_INTERFACE = 'jinghzhu:operator/reconciler@0.2.0';
