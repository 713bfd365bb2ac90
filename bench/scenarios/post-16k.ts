// POST with a 16 KiB body to a sink that answers small JSON: the request-body path.
import { comparatorVariants, LOAD_COLUMNS } from '../measure.js';
import { SINK_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';

export const POST_BODY_BYTES = 16 * 1024;

export const post16k: Scenario = {
  id: 'post-16k',
  title: 'POST 16 KiB body',
  about: 'A 16 KiB request body read by the proxy and sent on (the guard collects bodies up to 64 KiB and sends them in one write).',
  columns: LOAD_COLUMNS,
  headline: 'rps',
  subject: 'guard',
  variants: (ctx) => comparatorVariants(ctx, SINK_PATH, 'POST', POST_BODY_BYTES),
};
