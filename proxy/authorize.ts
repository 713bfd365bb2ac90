// Stage: the agent's policy decides (tool = target hostname, action = method,
// path = the normalised target path) before any byte goes upstream; the first
// matching shadow rule (mode: shadow) is noted for the audit, and decides nothing.
// A policy that names mcp_method or mcp_tool needs the request body: the next
// stage (inspect-mcp.ts) reads it and decides; every other policy decides here,
// and the body streams untouched.
import { evaluatePolicy, evaluateShadow, type CompiledPolicy, type McpCall, type PolicyDecision } from '../shared/policy/index.js';
import { NONE, lookupCached, type AgentGone, type ProxyCaches } from './caches.js';
import type { ProxyExchange, Stage } from './exchange.js';

export function createAuthorize(caches: ProxyCaches): Stage {
  const decide = (ex: ProxyExchange, policy: CompiledPolicy | AgentGone | typeof NONE): undefined | false => {
    if (policy === NONE || !('agentGone' in policy)) {
      ex.policyEpoch = caches.policyChanges; // as the decision is made (hold.ts: not held under a policy changed since)
      return decideWith(ex, policy);
    }
    caches.agents.entries.delete(ex.keyHash); // its deletion, heard early
    return ex.answerError('invalid_api_key');
  };
  return (ex) => lookupCached(caches.policies, ex.agent!.id, ex, decide);
}

function decideWith(ex: ProxyExchange, policy: CompiledPolicy | typeof NONE): undefined | false {
  const compiled = policy === NONE ? null : policy;
  ex.policy = compiled;
  if (compiled !== null && (compiled.usesMcp || compiled.shadowUsesMcp)) return undefined;
  return decideOnHead(ex, compiled);
}

/** Decides on the head alone (tool, method, path): no MCP request to match. */
export function decideOnHead(ex: ProxyExchange, policy: CompiledPolicy | null): undefined | false {
  return applyDecision(ex, policy, evaluatePolicy(policy, ex.target!.hostname, ex.method, ex.policyPath), null);
}

/**
 * Records the policy's decision (and the shadow rule, tried on every request
 * of an MCP batch) on the exchange; answers 403 when it denies.
 */
export function applyDecision(ex: ProxyExchange, policy: CompiledPolicy | null, decision: PolicyDecision, mcp: readonly (McpCall | null)[] | null): undefined | false {
  ex.decision = decision;
  recordShadow(ex, policy, mcp);
  ex.ruleMatched = decision.ruleMatched;
  if (decision.decision === 'deny') {
    return ex.answerError('policy_denied', decision.message, { rule_matched: decision.ruleMatched });
  }
  return undefined;
}

/** The first shadow rule that matches the call (on every request of an MCP batch; on the head alone when `mcp` is null), for the audit. */
export function recordShadow(ex: ProxyExchange, policy: CompiledPolicy | null, mcp: readonly (McpCall | null)[] | null): void {
  if (policy !== null && policy.shadowRules.length > 0) ex.shadowRule = evaluateShadow(policy, ex.target!.hostname, ex.method, ex.policyPath, mcp);
}
