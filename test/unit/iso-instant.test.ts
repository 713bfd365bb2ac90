// The instants callers give (shared/iso-instant.ts): days a month has, in every year 0000-9999.
import t from 'tap';
import { GuardError } from '../../shared/errors.js';
import { isoInstant } from '../../shared/iso-instant.js';

t.test('February 29 is a day in leap years only, years 0000-0099 included (Date.UTC reads those as 1900-1999)', async (t) => {
  for (const day of ['0000-02-29', '0004-02-29', '0096-02-29', '2000-02-29', '2024-02-29', '9996-02-29']) {
    t.equal(isoInstant(day, 'since'), `${day}T00:00:00.000Z`, day);
  }
  for (const day of ['0001-02-29', '0100-02-29', '1900-02-29', '2026-02-29', '2026-02-30', '2026-04-31', '2026-13-01', '2026-00-10']) {
    t.throws(() => isoInstant(day, 'since'), GuardError, day);
  }
});

t.test('a time finer than a millisecond rounds up; a zone offset is applied', async (t) => {
  t.equal(isoInstant('2026-11-28T01:02:03.0001Z', 'until'), '2026-11-28T01:02:03.001Z');
  t.equal(isoInstant('2026-11-28T01:02:03.000Z', 'until'), '2026-11-28T01:02:03.000Z');
  t.equal(isoInstant('2026-11-28T01:00+01:00', 'until'), '2026-11-28T00:00:00.000Z');
  t.throws(() => isoInstant('9999-12-31T23:59:59-01:00', 'until'), GuardError, 'past year 9999');
});
