// Stage: the agent's policy decides (tool = target hostname, action = method,
// path = the normalised target path) before any byte goes upstream; the first
// matching shadow rule (mode: shadow) is noted for the audit, and decides nothing.
import { evaluatePolicy, evaluateShadow, type CompiledPolicy } from '../shared/policy/index.js';
import { NONE, lookupCached, type ProxyCaches } from './caches.js';
import type { ProxyExchange, Stage } from './exchange.js';

export function createAuthorize(caches: ProxyCaches): Stage {
  return (ex) => lookupCached(caches.policies, ex.agent!.id, ex, decide);
}

function decide(ex: ProxyExchange, policy: CompiledPolicy | typeof NONE): undefined | false {
  const compiled = policy === NONE ? null : policy;
  ex.policy = compiled;
  const decision = evaluatePolicy(compiled, ex.target!.hostname, ex.method, ex.policyPath);
  ex.decision = decision;
  if (compiled !== null && compiled.shadowRules.length > 0) ex.shadowRule = evaluateShadow(compiled, ex.target!.hostname, ex.method, ex.policyPath);
  ex.ruleMatched = decision.ruleMatched;
  if (decision.decision === 'deny') {
    return ex.answerError('policy_denied', decision.message, { rule_matched: decision.ruleMatched });
  }
  return undefined;
}
