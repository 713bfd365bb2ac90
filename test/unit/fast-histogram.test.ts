// FastHistogram (shared/metrics.ts) counts on the hot path and hands prom-client
// its buckets when /metrics is read: the text is the one prom-client's own
// Histogram writes for the same observations.
import fc from 'fast-check';
import { Histogram, Registry } from 'prom-client';
import t from 'tap';
import { FastHistogram } from '../../shared/metrics.js';

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

t.test('the exposition equals prom-client Histogram\'s for the same values, bounds and beyond included', async (t) => {
  await fc.assert(fc.asyncProperty(fc.array(fc.oneof(fc.double({ min: 0, max: 60, noNaN: true }), fc.constantFrom(...BUCKETS)), { maxLength: 200 }), async (values) => {
    const ours = new Registry();
    const theirs = new Registry();
    const fast = new FastHistogram({ name: 'x_seconds', help: 'h', buckets: BUCKETS, registers: [ours] });
    const reference = new Histogram({ name: 'x_seconds', help: 'h', buckets: BUCKETS, registers: [theirs] });
    for (const v of values) {
      fast.observe(v);
      reference.observe(v);
    }
    return (await ours.metrics()) === (await theirs.metrics());
  }), { numRuns: 100 });
  t.pass('100 random sets of values gave the same text');
});

t.test('a value that is not a number is not counted (prom-client would throw on the hot path)', async (t) => {
  const registry = new Registry();
  const fast = new FastHistogram({ name: 'y_seconds', help: 'h', buckets: BUCKETS, registers: [registry] });
  fast.observe(Number.NaN);
  fast.observe(0.002);
  t.match(await registry.metrics(), /y_seconds_count 1\n/);
});
