// Stage: the policy's rate limits, checked when the call is about to be
// forwarded (after the rules allowed it and the target passed the guard), so
// that only calls that would reach the upstream are counted. A policy without
// `limits` costs one property read.
import type { Metrics } from '../shared/metrics.js';
import { LIMIT_RULE_PREFIX } from '../shared/policy/index.js';
import type { ProxyExchange, Stage } from './exchange.js';
import type { RateLimiter } from './rate-limiter.js';

export function createLimit(deps: { limiter: RateLimiter; metrics: Metrics | null }): Stage {
  const { limiter, metrics } = deps;
  return (ex: ProxyExchange) => {
    const policy = ex.policy;
    if (policy === null || policy.limits.length === 0) return undefined;
    const agentId = ex.agent!.id;
    const verdict = limiter.decide(agentId, policy.limits, ex.target!.hostname, ex.method, ex.policyPath, ex.mcpCalls);
    if (verdict === null) return undefined;
    const refused = verdict.refused;
    if (refused === null) {
      ex.addAnswerHeader('ratelimit-policy', verdict.policyHeader);
      ex.addAnswerHeader('ratelimit', verdict.stateHeader);
      // An approved retry may still lose its approval at the claim (a race, an expiry): then it is taken back.
      if (ex.approved) ex.rateCharge = limiter.lastCharge();
      return undefined;
    }
    const retryAfter = verdict.retryAfter;
    ex.ruleMatched = `${LIMIT_RULE_PREFIX}${refused.name}`;
    ex.addAnswerHeader('retry-after', String(retryAfter));
    ex.addAnswerHeader('ratelimit-policy', verdict.policyHeader);
    ex.addAnswerHeader('ratelimit', verdict.stateHeader);
    metrics?.recordRateLimited(refused.name, agentId);
    const burst = refused.burst > 0 ? ` with a burst of ${refused.burst}` : '';
    const never = verdict.neverFits;
    const message = never === null
      ? `Rate limit '${refused.name}' (${refused.rate}${burst}) is used up; retry in ${retryAfter} s.`
      : `Rate limit '${refused.name}' (${refused.rate}${burst}) counts ${never.calls} requests of this MCP batch, more than the ${never.most} it lets through${never.most < refused.quota ? ' on this proxy' : ''}; split the batch.`;
    return ex.answerError('rate_limited', message, {
      limit: refused.name,
      retry_after: retryAfter,
    });
  };
}
