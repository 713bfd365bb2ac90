// evaluatePolicy (shared/policy/evaluate-policy.ts): the bench's own policy, and
// generated ones of 5, 100 and 10,000 rules.
// The compiled policy keeps its rules in document order and tries them one by
// one (no index by tool or method), so a call costs the rules it passes over:
// a call that matches late, or none (the default), is the honest number; one
// that matches the first rule is shown at 10,000 for contrast.
// `node dist/bench/micro/evaluate-policy.js`.
import { MAX_POLICY_RULES, POLICY_LIMITS, evaluatePolicy, parsePolicy, type CompiledPolicy } from '../../shared/policy/index.js';
import { BENCH_POLICY } from '../policy.js';
import { measure, runWhenMain, type MicroCases, type Result } from './measure.js';

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/**
 * Rule `n` (0-based) of a generated policy, one of five kinds in turn: a repo's
 * subtree on GitHub for one method, a deny over an org's issues (a path
 * pattern), a tenant's hosts (a tool suffix), a Slack webhook held for
 * approval, a report in a bucket (a tool pattern, an exact path).
 */
function ruleYaml(n: number): string {
  switch (n % 5) {
    case 0:
      return `  - name: repo-${n}\n    tool: api.github.com\n    action: ${METHODS[(n / 5) % METHODS.length]}\n    path: /repos/acme/repo-${n}/**\n    decision: allow\n`;
    case 1:
      return `  - name: issues-${n}\n    tool: api.github.com\n    action: "*"\n    path: /repos/org-${n}/*/issues/*\n    decision: deny\n`;
    case 2:
      return `  - name: tenant-${n}\n    tool: "*.tenant-${n}.example.com"\n    action: "*"\n    decision: allow\n`;
    case 3:
      return `  - name: webhook-${n}\n    tool: hooks.slack.com\n    action: POST\n    path: /services/T${n}/*\n    decision: approve\n    approval_timeout: 600\n`;
    default:
      return `  - name: report-${n}\n    tool: "bucket-${n}-*.s3.amazonaws.com"\n    action: GET\n    path: /reports/${n}.csv\n    decision: allow\n`;
  }
}

/** `count` rules: count - 1 generated ones, then the refunds rule the late call matches; the default denies. */
function policyText(count: number): string {
  let rules = '';
  for (let n = 0; n < count - 1; n++) rules += ruleYaml(n);
  rules += '  - name: refunds\n    tool: api.stripe.com\n    action: POST\n    path: /v1/refunds/**\n    decision: approve\n';
  return `version: "1"\ndefault: deny\nrules:\n${rules}`;
}

/**
 * The policy compiled as the proxy compiles it. 10,000 such rules (MAX_POLICY_RULES)
 * take ~1.2 MB of YAML, more than MAX_POLICY_BYTES (256 KiB, about 2,200 of
 * them) lets a policy be, and their path globs of two wildcards ~64,000
 * characters, more than MAX_PATTERN_PATH_CHARS (16,384): both bounds are raised
 * here, as the policy tests do, and the rule bound kept. What a decision costs
 * depends on the compiled rules, not on the text.
 */
function compiled(count: number): CompiledPolicy {
  const policy = parsePolicy(policyText(count), { ...POLICY_LIMITS, maxBytes: 8 * 1024 * 1024, maxPatternPathChars: 1024 * 1024 });
  if (policy.rules.length !== count) throw new Error(`${policy.rules.length} rules compiled, not ${count}`);
  return policy;
}

/** `name` must be what `evaluatePolicy` decides, so that a case measures the path it names. */
function decides(policy: CompiledPolicy, call: readonly [string, string, string], name: string): void {
  const got = evaluatePolicy(policy, ...call).ruleMatched;
  if (got !== name) throw new Error(`${call.join(' ')} matched ${got}, not ${name}`);
}

// A refund: the last rule. Every other rule is passed over, most at their method or tool.
const LATE_CALL = ['api.stripe.com', 'POST', '/v1/refunds/re_3QfX2b'] as const;
// A GitHub GET no rule matches, then the default: the most work per rule. Two
// rules in five name its tool, so their paths are tried (a RegExp for the issue
// rules), and the bucket rules (GET) try their tool pattern's RegExp.
const DEFAULT_CALL = ['api.github.com', 'GET', '/repos/acme/widgets/pulls/7'] as const;
const FIRST_CALL = ['api.github.com', 'GET', '/repos/acme/repo-0/contents/README.md'] as const;

export const measureEvaluatePolicy: MicroCases = () => {
  const benchPolicy = parsePolicy(BENCH_POLICY);
  const results: Result[] = [measure('evaluatePolicy (2 rules)', () => evaluatePolicy(benchPolicy, '127.0.0.1', 'GET', '/small'))];
  for (const count of [5, 100, MAX_POLICY_RULES]) {
    const policy = compiled(count);
    const rules = count.toLocaleString('en-US');
    decides(policy, LATE_CALL, 'refunds');
    decides(policy, DEFAULT_CALL, 'default');
    results.push(
      measure(`evaluatePolicy (${rules} rules, the last matches)`, () => evaluatePolicy(policy, ...LATE_CALL)),
      measure(`evaluatePolicy (${rules} rules, none matches: the default, the call's tool named by 2 in 5)`, () => evaluatePolicy(policy, ...DEFAULT_CALL)),
    );
    if (count === MAX_POLICY_RULES) {
      decides(policy, FIRST_CALL, 'repo-0');
      results.push(measure(`evaluatePolicy (${rules} rules, the first matches)`, () => evaluatePolicy(policy, ...FIRST_CALL)));
    }
  }
  return results;
};

runWhenMain(import.meta.url, measureEvaluatePolicy);
