// Stage 3: the agent's policy decides (tool = target hostname, action = method,
// path = target path) before any byte goes upstream.
import { evaluatePolicy, type CompiledPolicy } from '../shared/policy/index.js';
import { NONE, type ProxyCaches } from './caches.js';
import type { ProxyExchange, StageResult } from './exchange.js';

export function authorize(ex: ProxyExchange, caches: ProxyCaches): StageResult {
  const agentId = ex.agent!.id;
  const hit = caches.policies.get(agentId);
  if (hit !== undefined) {
    caches.stats.policies.hits++;
    return decide(ex, hit);
  }
  caches.stats.policies.misses++;
  return caches.policies.fetch(agentId).then((policy) => decide(ex, policy ?? NONE));
}

function decide(ex: ProxyExchange, policy: CompiledPolicy | typeof NONE): undefined | false {
  const target = ex.target!;
  const decision = evaluatePolicy(policy === NONE ? null : policy, target.hostname, ex.method, ex.policyPath);
  ex.decision = decision;
  ex.ruleMatched = decision.ruleMatched;
  if (decision.decision === 'deny') {
    return ex.answerError('policy_denied', decision.message, { rule_matched: decision.ruleMatched });
  }
  return undefined;
}
