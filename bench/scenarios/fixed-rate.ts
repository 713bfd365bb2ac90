// Latency at a fixed request rate, well below every comparator's capacity, with
// coordinated omission corrected: wrk2 only (a closed-loop generator such as wrk
// measures latency at saturation instead). Skipped, with the reason, when wrk2
// is not on PATH; the bench installs nothing.
import { LOAD_COLUMNS, loadVariant, runningComparators, COMPARATOR_LABELS } from '../measure.js';
import { SMALL_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';

export const FIXED_RATE = 2000;

export const fixedRate: Scenario = {
  id: 'fixed-rate',
  title: `Fixed rate ${FIXED_RATE} req/s (GET small JSON)`,
  about: `p50/p99 latency when every comparator is asked for the same ${FIXED_RATE} requests per second (wrk2, coordinated omission corrected).`,
  columns: LOAD_COLUMNS,
  headline: 'p99',
  subject: 'guard',
  skipReason: (ctx) => (ctx.fixedRateLoad === null ? ctx.fixedRateNote : null),
  variants: (ctx) => runningComparators(ctx).map((name) => loadVariant(name, COMPARATOR_LABELS[name], name, (c, target) => ({
    paths: [target.pathFor(SMALL_PATH, c.keys.none)], method: 'GET', bodyBytes: 0, expectStatus: 200, rate: FIXED_RATE,
  }))),
};
