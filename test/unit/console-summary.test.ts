// The console overview's figures (console/summary.ts) against the PDF's: its
// p95 is ClickHouse's quantileExact, run here in the embedded engine on the
// same values; an entry a page repeated counts once.
import { query } from 'chdb';
import fc from 'fast-check';
import t from 'tap';
import { quantileExact, summarize } from '../../console/summary.js';

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

t.test('summarize counts an entry a page repeated once, per agent, most calls first', async (t) => {
  const entry = (id: string, agent: string, latency: number, decision: 'allowed' | 'denied') => ({ id, agent_id: agent, agent_name: `name-${agent}`, latency_ms: latency, decision });
  const rows = summarize([entry('1', 'a', 10, 'allowed'), entry('2', 'a', 20, 'denied'), entry('2', 'a', 20, 'denied'), entry('3', 'b', 5, 'allowed')]);
  t.same(rows, [{ agent: 'name-a', calls: 2, denied: 1, p95: 20 }, { agent: 'name-b', calls: 1, denied: 0, p95: 5 }]);
});
