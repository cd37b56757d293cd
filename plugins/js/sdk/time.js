// Time as the plugin sees it: the input's `now` (never the clock), and
// RFC 3339 conversions of the WIT `timestamp` (`{seconds: BigInt, nanoseconds}`).

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$/;

/** Whole seconds since the Unix epoch. */
export function fromSecs(seconds) {
  return { seconds: BigInt(seconds), nanoseconds: 0 };
}

/** Negative, zero or positive as `a` is before, at or after `b`. */
export function compare(a, b) {
  const s = BigInt(a.seconds) - BigInt(b.seconds);
  if (s !== 0n) return s < 0n ? -1 : 1;
  return a.nanoseconds - b.nanoseconds;
}

/** `later - earlier` in seconds (a Number). */
export function secondsBetween(earlier, later) {
  return Number(BigInt(later.seconds) - BigInt(earlier.seconds)) + (later.nanoseconds - earlier.nanoseconds) / 1e9;
}

/** How long before `now` `ts` was (use the input's `now`). */
export function ageSeconds(ts, now) {
  return secondsBetween(ts, now);
}

/** `2026-01-01T00:00:00Z`, with an optional fraction and offset. */
export function parseRfc3339(text) {
  const m = RFC3339.exec(text.trim());
  if (!m) throw new Error(`not an RFC 3339 time: ${JSON.stringify(text.trim())}`);
  const [, y, mo, d, h, mi, s, frac, off] = m;
  const days = Date.UTC(Number(y), Number(mo) - 1, Number(d)) / 86400000;
  let seconds = days * 86400 + Number(h) * 3600 + Number(mi) * 60 + Number(s);
  if (off !== 'Z' && off !== 'z') {
    const sign = off[0] === '-' ? -1 : 1;
    seconds -= sign * (Number(off.slice(1, 3)) * 3600 + Number(off.slice(4, 6)) * 60);
  }
  const nanoseconds = Number((frac ?? '').padEnd(9, '0').slice(0, 9) || '0');
  return { seconds: BigInt(seconds), nanoseconds };
}

/** `ts` as `YYYY-MM-DDTHH:MM:SS[.fraction]Z`. */
export function formatRfc3339(ts) {
  const base = new Date(Number(ts.seconds) * 1000).toISOString().slice(0, 19);
  const frac = ts.nanoseconds ? `.${String(ts.nanoseconds).padStart(9, '0').replace(/0+$/, '')}` : '';
  return `${base}${frac}Z`;
}
