// An instant as ClickHouse's DateTime64(3, 'UTC') text (`2026-03-01 12:00:00.123`)
// and as the API's ISO 8601 (`2026-03-01T12:00:00.123Z`): the one pair of
// conversions the codec, the seals and the store's queries share.

/** `2026-03-01T12:00:00.123Z` (toISOString's form) → `2026-03-01 12:00:00.123`. */
export function chFromIso(iso: string): string {
  return `${iso.slice(0, 10)} ${iso.slice(11, 23)}`;
}

/** `2026-03-01 12:00:00.123` (from a DateTime64(3, 'UTC') column) → `2026-03-01T12:00:00.123Z`. */
export function isoFromCh(at: string): string {
  return `${at.slice(0, 10)}T${at.slice(11)}Z`;
}
