// A call the policy denies: the guard answers 403 itself, nothing goes upstream.
// Compared with the guard's own allowed path (same agent, same policy).
import { LOAD_COLUMNS, loadVariant } from '../measure.js';
import { DENIED_PATH, SMALL_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';

export const policyDenied: Scenario = {
  id: 'policy-denied',
  title: 'Policy-denied call (403)',
  about: 'The guard refuses the call after key lookup and policy evaluation, with no upstream round-trip; the ratio to the allowed small GET shows what the upstream leg costs.',
  columns: LOAD_COLUMNS,
  headline: 'rps',
  subject: 'guard',
  variants: () => [
    loadVariant('guard', `guard: GET ${DENIED_PATH}, denied by the policy (403)`, 'guard', (ctx, target) => ({
      paths: [target.pathFor(DENIED_PATH, ctx.keys.none)], method: 'GET', bodyBytes: 0, expectStatus: 403,
    })),
    loadVariant('guard-allowed', `guard: GET ${SMALL_PATH}, allowed and proxied`, 'guard', (ctx, target) => ({
      paths: [target.pathFor(SMALL_PATH, ctx.keys.none)], method: 'GET', bodyBytes: 0, expectStatus: 200,
    })),
  ],
};
