// Bounds an lru-cache by its number of entries without allocating for all of
// them up front. Given `max`, lru-cache allocates its key, value and link lists
// for `max` entries when it is made: the proxy's three caches of 100,000
// (CACHE_MAX_ENTRIES) held 12.5 MiB of RSS before their first entry. Bounded
// through `maxSize`, each entry counting 1, the same limit holds and the lists
// grow as entries come (the three caches: 0.3 MiB for 50 entries each).
const ONE = (): number => 1;

export function entryBound(entries: number): { maxSize: number; sizeCalculation: () => number } {
  return { maxSize: entries, sizeCalculation: ONE };
}
