// An instant as ClickHouse's DateTime64(3, 'UTC') text (`2026-03-01 12:00:00.123`)
// and as the API's ISO 8601 (`2026-03-01T12:00:00.123Z`): the one pair of
// conversions the codec, the seals and the store's queries share; and the ISO
// form of each proxied call's instant.

/** `2026-03-01T12:00:00.123Z` (toISOString's form) → `2026-03-01 12:00:00.123`. */
export function chFromIso(iso: string): string {
  return `${iso.slice(0, 10)} ${iso.slice(11, 23)}`;
}

/** `2026-03-01 12:00:00.123` (from a DateTime64(3, 'UTC') column) → `2026-03-01T12:00:00.123Z`. */
export function isoFromCh(at: string): string {
  return `${at.slice(0, 10)}T${at.slice(11)}Z`;
}

let lastMs = NaN;
let lastIso = '';
let prefixSecond = NaN;
/** `2026-03-01T12:00:00.` of prefixSecond: toISOString's form up to the milliseconds. */
let prefix = '';

/**
 * `new Date(ms).toISOString()`, for the instant of every proxied call. Calls of
 * one millisecond (a dozen under full load) share one string, and the encoders
 * then compare it once; a new millisecond of the same second writes only its
 * digits after the second's prefix: ~35 ns against ~500 for a Date and its
 * toISOString, which at a moderate rate (each call its own millisecond) every
 * call paid (bench/micro/audit-encoding.ts, "isoOfMs").
 */
export function isoOfMs(ms: number): string {
  if (ms === lastMs) return lastIso;
  const second = Math.floor(ms / 1000);
  if (second !== prefixSecond) {
    lastIso = new Date(ms).toISOString();
    prefix = lastIso.slice(0, lastIso.length - 4); // toISOString ends ".mmmZ", whatever the year's width
    prefixSecond = second;
  } else {
    const millis = ms - second * 1000;
    lastIso = `${prefix}${millis < 10 ? '00' : millis < 100 ? '0' : ''}${millis}Z`;
  }
  lastMs = ms;
  return lastIso;
}
