// /metrics stays bounded whatever tenants name things (shared/metrics.ts).
import t from 'tap';
import { Metrics, RATE_LIMITED_SERIES } from '../../shared/metrics.js';

t.test('rate-limit refusals past a thousand distinct limit names count as limit="other"', async (t) => {
  const metrics = new Metrics({ agentLabel: false });
  // Any signed-up user can name limits: one new name per policy change.
  for (let i = 0; i < RATE_LIMITED_SERIES + 500; i++) metrics.recordRateLimited(`tenant-limit-${i}`, 'agent');
  metrics.recordRateLimited('tenant-limit-0', 'agent'); // a name already counted keeps its series
  const lines = (await metrics.text()).split('\n').filter((l) => l.startsWith('tcg_rate_limited_total{'));
  t.equal(lines.length, RATE_LIMITED_SERIES + 1, `${lines.length} series: the first names and "other"`);
  t.ok(lines.includes('tcg_rate_limited_total{limit="other"} 500'), 'the rest, counted');
  t.ok(lines.includes('tcg_rate_limited_total{limit="tenant-limit-0"} 2'));
});
