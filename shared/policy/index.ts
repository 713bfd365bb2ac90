export { parsePolicy, MAX_POLICY_BYTES, MAX_POLICY_RULES, MAX_POLICY_ALIASES, POLICY_LIMITS } from './parse-policy.js';
export type { PolicyLimits } from './parse-policy.js';
export { evaluatePolicy, NO_POLICY_DECISION } from './evaluate-policy.js';
export { PathMatch, ToolMatch } from './types.js';
export type { CompiledPolicy, CompiledRule, PolicyDecision, PolicyVerdict } from './types.js';
