// The tests' quantileExact (test/support/quantile.ts), which the report's and the
// summary's expected latencies are computed with, is ClickHouse's: run here in
// the embedded engine on the same values.
import { query } from 'chdb';
import fc from 'fast-check';
import t from 'tap';
import { quantileExact } from '../support/quantile.js';

t.test('quantileExact is ClickHouse\'s, on values the engine ranks too', async (t) => {
  t.equal(quantileExact([...Array(20).keys()].map((i) => i + 1), 0.95), 20, 'p95 of 1..20');
  t.equal(quantileExact([10, 20], 0.5), 20, 'p50 of two');
  t.equal(quantileExact([], 0.95), 0, 'none');
  const samples = fc.sample(fc.array(fc.integer({ min: 0, max: 100_000 }), { minLength: 1, maxLength: 60 }), 25);
  for (const values of samples) {
    const sorted = [...values].sort((a, b) => a - b);
    const engine = query(`SELECT quantileExact(0.95)(x), quantileExact(0.5)(x) FROM (SELECT arrayJoin([${values.join(',')}]) AS x)`, 'CSV').trim().split(',').map(Number);
    t.same([quantileExact(sorted, 0.95), quantileExact(sorted, 0.5)], engine, `${values.length} values`);
  }
});
