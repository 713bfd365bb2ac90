// 10,000 agents (quick: 1,000) in one org, a random key on every request, against
// one key of the same org: the key → agent, policy and credential caches under a
// realistic spread of callers. The agents are made through the admin API first,
// 16 requests at a time (not measured).
import { GuardOrg, inParallel } from '../launch/guard.js';
import { LOAD_COLUMNS, loadVariant } from '../measure.js';
import { SMALL_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';

const CREATE_CONCURRENCY = 16;
let keys: string[] = [];

export const manyAgents: Scenario = {
  id: 'many-agents',
  title: 'Many agents, random keys (GET small JSON)',
  about: 'Every request names a key drawn at random from all the agents of one org (no policy, log_outputs: none); the baseline sends one key of the same org. Shows the cost of a cache that holds every agent (and of refills when entries expire, CACHE_TTL_MS).',
  columns: LOAD_COLUMNS,
  headline: 'rps',
  subject: 'guard',
  async prepare(ctx) {
    const started = performance.now();
    const org = await GuardOrg.signup(ctx.guard.origin, 'many');
    ctx.orgs.push(org);
    await org.createBearerCredential(ctx.upstream.authority, ctx.bearer);
    const count = ctx.options.agents;
    keys = new Array<string>(count);
    await inParallel(count, CREATE_CONCURRENCY, async (i) => {
      keys[i] = (await org.createAgent(`many-${i}`, 'none')).apiKey;
    }, (done) => ctx.progress(`  many-agents: ${done}/${count} agents created`));
    ctx.progress(`  many-agents: ${count} agents created in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  },
  variants: (ctx) => [
    loadVariant('guard', `guard, a random key of ${ctx.options.agents} agents per request`, 'guard', (_ctx, target) => ({
      paths: keys.map((key) => target.pathFor(SMALL_PATH, key)), method: 'GET', bodyBytes: 0, expectStatus: 200,
    })),
    loadVariant('guard-one-key', 'guard, one key of the same org', 'guard', (_ctx, target) => ({
      paths: [target.pathFor(SMALL_PATH, keys[0]!)], method: 'GET', bodyBytes: 0, expectStatus: 200,
    })),
  ],
};
