// The instants' text forms (shared/audit/ch-instant.ts). isoOfMs keeps the last
// millisecond's string and the last second's prefix, so its answer must not
// depend on the instants asked before: checked on runs that repeat a
// millisecond, step within a second, cross seconds, go back, and jump years.
import fc from 'fast-check';
import t from 'tap';
import { chFromIso, isoFromCh, isoOfMs } from '../../shared/audit/ch-instant.js';

const iso = (ms: number) => new Date(ms).toISOString();

t.test('isoOfMs is toISOString at the edges of a second, a day, a year and the Date range', async (t) => {
  const edges = [
    Date.UTC(2026, 10, 27, 11, 59, 59, 999), Date.UTC(2026, 10, 27, 12, 0, 0, 0), Date.UTC(2026, 10, 27, 12, 0, 0, 7),
    Date.UTC(2026, 10, 27, 12, 0, 0, 42), Date.UTC(2026, 10, 27, 12, 0, 0, 100), Date.UTC(2026, 11, 31, 23, 59, 59, 999),
    Date.UTC(2027, 0, 1, 0, 0, 0, 1), 0, 1, -1, -999, -1000, -1001, 253402300799999, 253402300800001, 8.64e15, -8.64e15,
  ];
  for (const ms of [...edges, ...edges.reverse()]) t.equal(isoOfMs(ms), iso(ms), `ms ${ms}`);
});

t.test('isoOfMs answers as toISOString whatever was asked before', async (t) => {
  const step = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3 }), fc.integer({ min: -2, max: -1 }), fc.integer({ min: 1, max: 1500 }), fc.integer({ min: -1500, max: 1500 }), fc.integer({ min: -4e12, max: 4e12 }));
  fc.assert(
    fc.property(fc.integer({ min: -6e13, max: 6e13 }), fc.array(step, { minLength: 1, maxLength: 60 }), (start, steps) => {
      let ms = start;
      for (const d of steps) {
        ms = Math.max(-8.64e15, Math.min(8.64e15, ms + d));
        if (isoOfMs(ms) !== iso(ms)) return false;
      }
      return true;
    }),
    { numRuns: 2000 },
  );
  t.pass('2,000 runs of instants agreed with toISOString');
});

t.test('chFromIso and isoFromCh are inverses on toISOString forms', async (t) => {
  const ms = Date.UTC(2026, 2, 1, 12, 0, 0, 123);
  t.equal(chFromIso(iso(ms)), '2026-03-01 12:00:00.123');
  t.equal(isoFromCh(chFromIso(iso(ms))), iso(ms));
});
