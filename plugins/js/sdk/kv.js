// Labels and annotations: the SDK hands them out as `Map`s in key order.

/** Compares two strings by Unicode code point (the order of their UTF-8
 * bytes, which Rust and Python use); `<` on JS strings compares UTF-16 code
 * units and differs above U+FFFF. */
export function compareStrings(a, b) {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.codePointAt(i);
    const y = b.codePointAt(i);
    if (x !== y) return x < y ? -1 : 1;
    if (x > 0xffff) i++;
  }
  return a.length < b.length ? -1 : a.length > b.length ? 1 : 0;
}

/** A Map sorted by key from a Map, an object or `[key, value]` pairs; for a
 * key given twice the last value wins. */
export function sortedMap(pairs) {
  const m = new Map(pairs instanceof Map ? pairs : Array.isArray(pairs) ? pairs : Object.entries(pairs ?? {}));
  return new Map([...m.entries()].sort(([a], [b]) => compareStrings(a, b)));
}

/** `base` with `overlay` on top (overlay wins), sorted by key. */
export function merge(base, overlay) {
  return sortedMap([...sortedMap(base), ...sortedMap(overlay)]);
}

/** The value of label `key`, or undefined. */
export function label(labels, key) {
  return labels.get(key);
}

/** The value of annotation `key`, or undefined. */
export function annotation(annotations, key) {
  return annotations.get(key);
}
