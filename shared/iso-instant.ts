// An instant given by a caller (a query parameter, a command-line option), read
// one way everywhere: the admin API's filters and windows, and verify-audit.
import { GuardError } from './errors.js';

/**
 * An ISO 8601 date or date-time (a time without a zone is UTC) as toISOString();
 * 400 naming `name` otherwise, also for a day its month does not have
 * (Date.parse would roll 2026-02-30 over to March 2). A time finer than a
 * millisecond is rounded up to the next one: the instants stored are whole
 * milliseconds, so an inclusive `since` and an exclusive `until` then take
 * exactly the entries at or after, and before, the instant given.
 */
export function isoInstant(raw: string, name: string, what = 'Field'): string {
  // ISO 8601 date or date-time; a time without a zone is read as UTC.
  const m = /^(\d{4})-(\d{2})-(\d{2})(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})?)?$/.exec(raw);
  let time = m ? Date.parse(m[4] === undefined ? `${raw}T00:00:00Z` : m[7] === undefined ? `${raw}Z` : raw) : NaN;
  if (m && !Number.isNaN(time)) {
    const month = Number(m[2]);
    const day = Number(m[3]);
    if (month < 1 || month > 12 || day < 1 || day > daysIn(Number(m[1]), month)) time = NaN;
    else if (m[6] !== undefined && /[1-9]/.test(m[6].slice(4))) time += 1;
  }
  // A zone offset can carry a 4-digit year out of them (9999-12-31T23:59:59-01:00
  // is in year 10000), which the stores' instants cannot hold.
  const iso = Number.isNaN(time) ? '' : new Date(time).toISOString();
  if (iso.length !== 24) {
    throw new GuardError('invalid_request', `${what} '${name}' must be an ISO 8601 date or date-time, in years 0000 to 9999 (UTC).`, { field: name });
  }
  return iso;
}

/** Days in the month (1-12) of a year 0-9999; Date.UTC reads years 0-99 as 1900-1999, which would make 0000 no leap year. */
function daysIn(year: number, month: number): number {
  const date = new Date(0);
  date.setUTCFullYear(year, month, 0);
  return date.getUTCDate();
}

/** 0000-01-01T00:00:00.000Z, the earliest instant isoInstant takes. */
const EARLIEST_MS = Date.parse('0000-01-01T00:00:00.000Z');

/**
 * A default `since`, `ms` before `until`, not before year 0000: an `until` given
 * early in year 0000 would put it in year -1, which no store's query takes (a 500).
 */
export function defaultSince(until: Date, ms: number): Date {
  return new Date(Math.max(until.getTime() - ms, EARLIEST_MS));
}
