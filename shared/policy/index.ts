export { parsePolicy, MAX_POLICY_BYTES, MCP_NAMES_MAX_CHARS, MAX_POLICY_LIMITS, MAX_POLICY_RULES, MAX_POLICY_ALIASES, POLICY_LIMITS, STORED_POLICY_LIMITS } from './parse-policy.js';
export type { PolicyLimits } from './parse-policy.js';
export { countMatchingCalls, evaluatePolicy, evaluateShadow, matchesAnyCall, matchesCall, matchingLimits, NO_POLICY_DECISION } from './evaluate-policy.js';
export { APPROVAL_TIMEOUT, LIMIT_RULE_PREFIX, PathMatch, PENDING_APPROVALS_LIMIT, RATE_PERIODS, TARGET_FORBIDDEN_RULE, ToolMatch, UNINSPECTABLE_RULE } from './types.js';
export type { CallMatcher, CompiledLimit, CompiledPolicy, CompiledRule, McpCall, PolicyDecision, PolicyVerdict, RuleVerdict } from './types.js';
