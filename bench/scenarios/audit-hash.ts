// log_outputs: hash (SHA-256 of every response body into the audit row) against
// log_outputs: none, on 64 KiB answers: what auditing the output costs.
import { LOAD_COLUMNS, loadVariant } from '../measure.js';
import { LARGE_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';

export const auditHash: Scenario = {
  id: 'audit-hash',
  title: 'log_outputs: hash vs none (GET 64 KiB)',
  about: 'The same 64 KiB GET through two agents of one org: one hashes every response body into its audit row, one records no output.',
  columns: LOAD_COLUMNS,
  headline: 'rps',
  subject: 'guard',
  variants: () => [
    loadVariant('guard', 'guard, agent with log_outputs: hash', 'guard', (ctx, target) => ({
      paths: [target.pathFor(LARGE_PATH, ctx.keys.hash)], method: 'GET', bodyBytes: 0, expectStatus: 200,
    })),
    loadVariant('guard-none', 'guard, agent with log_outputs: none', 'guard', (ctx, target) => ({
      paths: [target.pathFor(LARGE_PATH, ctx.keys.none)], method: 'GET', bodyBytes: 0, expectStatus: 200,
    })),
  ],
};
