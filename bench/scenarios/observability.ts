// Metrics on and logs at their default (info: no line per call) against a second
// guard with both off (METRICS_ENABLED=false, LOG_LEVEL=error): what operability
// costs the hot path. The goal is within 3%.
import { GuardOrg, startGuard } from '../launch/guard.js';
import { LOAD_COLUMNS, loadVariant } from '../measure.js';
import { SMALL_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';

let quietKey: string | null = null;

export const observability: Scenario = {
  id: 'observability',
  title: 'Metrics and default logs on vs off (GET small JSON)',
  about: 'The same small GET through the guard (metrics on, LOG_LEVEL=info) and through a second guard started with METRICS_ENABLED=false and LOG_LEVEL=error, same policy, credential and log_outputs: hash.',
  columns: LOAD_COLUMNS,
  headline: 'rps',
  subject: 'guard',
  async prepare(ctx) {
    if (ctx.targets.has('guard-quiet')) return;
    const quiet = await startGuard(ctx.tmpDir, ctx.upstream.authority, { name: 'guard-quiet', env: { METRICS_ENABLED: 'false', LOG_LEVEL: 'error' } });
    ctx.targets.set('guard-quiet', quiet);
    const { agent } = await GuardOrg.withBenchAgent(quiet.origin, 'quiet', ctx.upstream.authority, ctx.bearer, 'bench-quiet', 'hash');
    quietKey = agent.apiKey;
  },
  variants: () => [
    loadVariant('guard', 'guard: metrics on, LOG_LEVEL=info', 'guard', (ctx, target) => ({
      paths: [target.pathFor(SMALL_PATH, ctx.keys.hash)], method: 'GET', bodyBytes: 0, expectStatus: 200,
    })),
    loadVariant('guard-quiet', 'guard: metrics off, LOG_LEVEL=error', 'guard-quiet', (_ctx, target) => ({
      paths: [target.pathFor(SMALL_PATH, quietKey!)], method: 'GET', bodyBytes: 0, expectStatus: 200,
    })),
  ],
};
