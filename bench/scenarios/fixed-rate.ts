// Latency at a fixed request rate, well below every comparator's capacity, with
// coordinated omission corrected (a closed-loop generator such as wrk measures
// latency at saturation instead): wrk2 when it is on PATH, else the bench's own
// open-loop generator (bench/load/open-loop-worker.ts).
import { FIXED_RATE_COLUMNS, loadVariant, runningComparators, COMPARATOR_LABELS } from '../measure.js';
import { SMALL_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';

export const FIXED_RATE = 2000;

export const fixedRate: Scenario = {
  id: 'fixed-rate',
  title: `Fixed rate ${FIXED_RATE} req/s (GET small JSON)`,
  about: `p50/p99/p99.9 latency when every comparator is asked for the same ${FIXED_RATE} requests per second, counted from each request's scheduled instant (coordinated omission corrected).`,
  columns: FIXED_RATE_COLUMNS,
  headline: 'p99',
  subject: 'guard',
  skipReason: (ctx) => (ctx.fixedRateLoad === null ? ctx.fixedRateNote : null),
  variants: (ctx) => runningComparators(ctx).map((name) => loadVariant(name, COMPARATOR_LABELS[name], name, (c, target) => ({
    paths: [target.pathFor(SMALL_PATH, c.keys.none)], method: 'GET', bodyBytes: 0, expectStatus: 200, rate: FIXED_RATE,
  }))),
};
