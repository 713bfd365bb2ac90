// GET of a ~200-byte JSON answer: the per-request cost of the proxy, with almost
// no body to move.
import { comparatorVariants, LOAD_COLUMNS } from '../measure.js';
import { SMALL_BODY, SMALL_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';

export const smallGet: Scenario = {
  id: 'small-get',
  title: `GET ${SMALL_BODY.length}-byte JSON`,
  about: 'Requests per second and latency for a small JSON answer: what the proxy costs per call, with almost no body to move.',
  columns: LOAD_COLUMNS,
  headline: 'rps',
  subject: 'guard',
  variants: (ctx) => comparatorVariants(ctx, SMALL_PATH, 'GET', 0),
};
