// Structured logging into the host's `tracing` output.
//
// Inside a component the plugin's entry module hands the imported
// `jinghzhu:operator/log@0.2.0` function to `setSink` (the `reconciler`
// helper does it). Natively (node --test) there is no such import: a call is
// written to stderr and kept in a buffer that tests read with
// `takeCaptured()` (the newest CAPTURE_LIMIT records).

/** How many records the native capture buffer keeps. */
export const CAPTURE_LIMIT = 10000;

let sink;
let captured = [];

/** Sends log calls to `hostLog(level, message, [{key, value}])`. */
export function setSink(hostLog) {
  sink = hostLog;
}

/** Writes one line at `level` ('trace', 'debug', 'info', 'warn', 'error')
 * with `fields` (`[[key, value], ...]` or an object; values become strings). */
export function log(level, message, fields = []) {
  const pairs = (Array.isArray(fields) ? fields : Object.entries(fields)).map(([k, v]) => ({ key: String(k), value: String(v) }));
  if (sink !== undefined) {
    sink(level, message, pairs);
    return;
  }
  process.stderr.write(`[plugin ${level}] ${message}${pairs.map((p) => ` ${p.key}=${JSON.stringify(p.value)}`).join('')}\n`);
  captured.push({ level, message, fields: pairs });
  if (captured.length > CAPTURE_LIMIT) captured = captured.slice(-CAPTURE_LIMIT);
}

export const trace = (message, fields) => log('trace', message, fields);
export const debug = (message, fields) => log('debug', message, fields);
export const info = (message, fields) => log('info', message, fields);
export const warn = (message, fields) => log('warn', message, fields);
export const error = (message, fields) => log('error', message, fields);

/** Returns and clears the records logged so far (native runs only). */
export function takeCaptured() {
  const out = captured;
  captured = [];
  return out;
}
