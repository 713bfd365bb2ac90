// Server-sent events: time from sending the request to the end of the first
// event, through each comparator, for sequential requests on a kept-alive
// connection (median and p90 of them). A proxy that buffers the stream shows here.
import { COMPARATOR_LABELS, runningComparators, targetOf } from '../measure.js';
import { SSE_PATH } from '../routes.js';
import type { Sample, Scenario } from '../scenario.js';
import { percentile } from '../stats.js';

export const sse: Scenario = {
  id: 'sse',
  title: 'SSE time to first event',
  about: 'Sequential GETs of an event stream whose first event leaves the upstream at once: milliseconds until the client has that event (median and p90), and until the stream ends.',
  columns: [
    { key: 'ttfe50', label: 'first event p50 ms', digits: 2, better: 'lower', ratio: true },
    { key: 'ttfe90', label: 'first event p90 ms', digits: 2, better: 'lower', ratio: true },
    { key: 'total50', label: 'whole stream p50 ms', digits: 2, better: 'lower' },
    { key: 'errors', label: 'errors', digits: 0, better: 'lower' },
  ],
  headline: 'ttfe50',
  subject: 'guard',
  variants: (ctx) => runningComparators(ctx).map((name) => ({
    name,
    label: COMPARATOR_LABELS[name],
    async measure(c): Promise<Sample> {
      const target = targetOf(c, name);
      const url = `${target.origin}${target.pathFor(SSE_PATH, c.keys.none)}`;
      const firstEvent: number[] = [];
      const whole: number[] = [];
      let errors = 0;
      for (let i = 0; i < c.options.sseRequests; i++) {
        const ex = await c.http.exchange(url, { timeoutMs: 10_000, sse: true });
        if (name === 'guard') c.guardCalls.completed += 1;
        if (ex.status !== 200 || ex.firstEventMs === null) {
          errors++;
          continue;
        }
        firstEvent.push(ex.firstEventMs);
        whole.push(ex.totalMs);
      }
      return { ttfe50: percentile(firstEvent, 50), ttfe90: percentile(firstEvent, 90), total50: percentile(whole, 50), errors };
    },
  })),
};
