// GET of a 64 KiB body: response streaming (several TLS records and uWS writes per answer).
import { comparatorVariants, LOAD_COLUMNS } from '../measure.js';
import { LARGE_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';

export const get64k: Scenario = {
  id: 'get-64k',
  title: 'GET 64 KiB',
  about: 'A 64 KiB response body: the cost of moving bytes (TLS decrypt from the upstream, copy, write to the client).',
  columns: LOAD_COLUMNS,
  headline: 'rps',
  subject: 'guard',
  variants: (ctx) => comparatorVariants(ctx, LARGE_PATH, 'GET', 0),
};
