// The contract's "Policy" section, one test per rule: shape and validation
// (parsePolicy) and first-match evaluation (evaluatePolicy). Fixtures are files in
// test/fixtures/policies/, one problem per broken file.

import { readdirSync, readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import fc from 'fast-check';
import t from 'tap';
import { GuardError } from '../../shared/errors.js';
import {
  evaluatePolicy,
  evaluateShadow,
  matchesCall,
  MAX_POLICY_BYTES,
  MAX_POLICY_RULES,
  NO_POLICY_DECISION,
  parsePolicy,
  POLICY_LIMITS,
  STORED_POLICY_LIMITS,
} from '../../shared/policy/index.js';
import { normalizePolicyPath, parseTarget } from '../../shared/target.js';
import type { CompiledPolicy } from '../../shared/policy/index.js';
import { forgetCompiledPolicies, memoWeightOf, oneWildcardMatcher, pathGlobMatcher, pathGlobToRegExp } from '../../shared/policy/parse-policy.js';
import { matchGlob } from '../../shared/policy/evaluate-policy.js';
import { mcpRequestDecision } from '../../shared/mcp.js';

const FIXTURES = new URL('../fixtures/policies/', import.meta.url);

function fixture(name: string): string {
  return readFileSync(new URL(name, FIXTURES), 'utf8');
}

/** The GuardError parsePolicy throws for `text`; fails the test when it accepts it. */
function refusal(text: string, limits = POLICY_LIMITS): GuardError {
  try {
    parsePolicy(text, limits);
  } catch (err) {
    if (err instanceof GuardError) return err;
    throw err;
  }
  throw new Error('parsePolicy accepted a policy that should be refused');
}

/** A policy from rule lines (YAML flow mappings), default allow unless given. */
function policyOf(rules: string[], defaultDecision?: 'allow' | 'deny'): CompiledPolicy {
  const lines = ['version: "1"'];
  if (defaultDecision) lines.push(`default: ${defaultDecision}`);
  lines.push('rules:', ...rules.map((rule) => `  - ${rule}`));
  return parsePolicy(lines.join('\n'));
}

function decide(policy: CompiledPolicy | null, tool: string, action: string, path = '/'): string {
  const result = evaluatePolicy(policy, tool, action, path);
  return `${result.decision} ${result.ruleMatched}`;
}

t.test('rules are tried in order and the first match decides', async (t) => {
  const policy = policyOf([
    '{name: read-github, tool: api.github.com, action: GET, decision: allow}',
    '{name: no-github, tool: api.github.com, action: "*", decision: deny}',
    '{name: read-anything, tool: "*", action: GET, decision: deny}',
  ]);
  t.equal(decide(policy, 'api.github.com', 'GET'), 'allow read-github');
  t.equal(decide(policy, 'api.github.com', 'POST'), 'deny no-github');
  t.equal(decide(policy, 'example.com', 'GET'), 'deny read-anything');
});

t.test('no matching rule falls to the default, allow unless set, reported as "default"', async (t) => {
  const rule = '{tool: api.github.com, action: DELETE, decision: deny}';
  const allowByDefault = evaluatePolicy(policyOf([rule]), 'example.com', 'GET', '/');
  t.strictSame(allowByDefault, { decision: 'allow', ruleMatched: 'default', message: 'No rule matched; the default is allow.', approvalTimeoutS: 0 });

  const denyByDefault = evaluatePolicy(policyOf([rule], 'deny'), 'example.com', 'GET', '/');
  t.strictSame(denyByDefault, { decision: 'deny', ruleMatched: 'default', message: 'No rule matched; the default is deny.', approvalTimeoutS: 0 });

  const noRules = parsePolicy(fixture('valid-minimal.yaml'));
  t.equal(decide(noRules, 'anything.example', 'DELETE'), 'allow default');
});

t.test('no policy set allows everything, reported as "default"', async (t) => {
  t.strictSame(evaluatePolicy(null, 'api.github.com', 'DELETE', '/repos/x'), {
    decision: 'allow',
    ruleMatched: 'default',
    message: 'No policy is set; the default is allow.',
    approvalTimeoutS: 0,
  });
  t.equal(evaluatePolicy(null, 'a', 'GET', '/'), NO_POLICY_DECISION);
});

t.test('a rule without a name is reported as rule-<n>, its 1-based position', async (t) => {
  const policy = policyOf([
    '{name: named, tool: a.example, action: GET, decision: allow}',
    '{tool: b.example, action: GET, decision: deny}',
    '{tool: c.example, action: GET, decision: allow}',
  ]);
  t.strictSame(policy.rules.map((rule) => rule.name), ['named', 'rule-2', 'rule-3']);
  t.strictSame(evaluatePolicy(policy, 'b.example', 'GET', '/'), { decision: 'deny', ruleMatched: 'rule-2', message: "Denied by rule 'rule-2'.", approvalTimeoutS: 0 });
  t.strictSame(evaluatePolicy(policy, 'c.example', 'GET', '/'), { decision: 'allow', ruleMatched: 'rule-3', message: "Allowed by rule 'rule-3'.", approvalTimeoutS: 0 });
});

t.test('the message names the rule and its decision, or is the rule\'s own message', async (t) => {
  const policy = parsePolicy(fixture('valid-full.yaml'));
  t.strictSame(evaluatePolicy(policy, 'api.github.com', 'DELETE', '/repos/x'), {
    decision: 'deny',
    ruleMatched: 'no-deletes',
    message: 'Deletes need a human; ask in #ops.',
    approvalTimeoutS: 0,
  });
  t.strictSame(evaluatePolicy(policy, 'api.github.com', 'GET', '/repos/x/issues'), {
    decision: 'allow',
    ruleMatched: 'github-issues',
    message: "Allowed by rule 'github-issues'.",
    approvalTimeoutS: 0,
  });
  t.strictSame(evaluatePolicy(policy, 'api.github.com', 'GET', '/admin/users'), {
    decision: 'deny',
    ruleMatched: 'rule-3',
    message: "Denied by rule 'rule-3'.",
    approvalTimeoutS: 0,
  });
  t.equal(decide(policy, 'api.example.com', 'GET'), 'allow rule-4');
  t.equal(decide(policy, 'unknown.example', 'GET'), 'deny default');
});

t.test('a decision is precomputed and frozen: the same object for every matching call', async (t) => {
  const policy = policyOf(['{name: r, tool: "*", action: "*", decision: deny}']);
  const first = evaluatePolicy(policy, 'a.example', 'GET', '/x');
  const second = evaluatePolicy(policy, 'b.example', 'post', '/y');
  t.equal(first, second);
  t.ok(Object.isFrozen(first));
  t.equal(evaluatePolicy(policy, 'c', 'GET', '/'), policy.rules[0]!.result);
  t.ok(Object.isFrozen(policy) && Object.isFrozen(policy.rules) && Object.isFrozen(policy.defaultResult));
});

t.test('tool "*" matches any tool', async (t) => {
  const policy = policyOf(['{tool: "*", action: GET, decision: deny}']);
  t.equal(decide(policy, 'api.github.com', 'GET'), 'deny rule-1');
  t.equal(decide(policy, 'localhost', 'GET'), 'deny rule-1');
  t.equal(decide(policy, 'api.github.com', 'POST'), 'allow default');
});

t.test('tool "*.github.com" matches subdomains, not github.com itself', async (t) => {
  const policy = policyOf(['{tool: "*.github.com", action: "*", decision: deny}']);
  t.equal(decide(policy, 'api.github.com', 'GET'), 'deny rule-1');
  t.equal(decide(policy, 'uploads.api.github.com', 'GET'), 'deny rule-1');
  t.equal(decide(policy, 'github.com', 'GET'), 'allow default');
  t.equal(decide(policy, 'evilgithub.com', 'GET'), 'allow default');
  t.equal(decide(policy, 'api.github.com.evil.io', 'GET'), 'allow default');
});

t.test('an exact tool matches only that tool', async (t) => {
  const policy = policyOf(['{tool: api.github.com, action: "*", decision: deny}']);
  t.equal(decide(policy, 'api.github.com', 'GET'), 'deny rule-1');
  t.equal(decide(policy, 'api.github.co', 'GET'), 'allow default');
  t.equal(decide(policy, 'xapi.github.com', 'GET'), 'allow default');
  t.equal(decide(policy, 'api.github.com.', 'GET'), 'allow default');
});

t.test('a rule\'s tool is read as the proxy names a call\'s: canonical hostname, so no spelling of it fails open', async (t) => {
  // Each exact tool, as the proxy names a call to it (parseTarget's hostname).
  for (const [written, target] of <Array<[string, string]>>[
    ['api.github.com.', 'api.github.com'], ['API.GitHub.com', 'api.github.com'], ['[::1]', '[::1]'],
    ['2001:db8:0:0::1', '[2001:db8::1]'], ['127.1', '127.1'], ['bücher.example', 'xn--bcher-kva.example'],
  ]) {
    const policy = policyOf([`{tool: "${written}", action: "*", decision: deny}`]);
    const tool = parseTarget(`${target}/`)!.hostname;
    t.equal(decide(policy, tool, 'GET'), 'deny rule-1', `${written} meets a call to ${target} (tool ${tool})`);
  }
  t.equal(decide(policyOf(['{tool: "*.github.com.", action: "*", decision: deny}']), 'api.github.com', 'GET'), 'deny rule-1', 'a glob\'s trailing dot too');
  t.equal(decide(policyOf(['{tool: "*.bücher.example", action: "*", decision: deny}']), 'a.xn--bcher-kva.example', 'GET'), 'deny rule-1', 'a glob\'s IDN label as punycode');
  t.equal(decide(policyOf(['{tool: "2001:db8::*", action: "*", decision: deny}']), '2001:db8::1', 'GET'), 'deny rule-1', 'an IPv6 pattern keeps its colons');
  // And what a URL's host parser would cut or rewrite into another host (a?.x was the host a, ab%41.x aba.x, a tab dropped), or a glob no hostname matches.
  for (const tool of ['api.example.com:8443', '[::1]:8443', 'api.example.com/v1', 'foo bar', '*.example.com/x', '[*]', '*.example.com:8443', 'bü*.example',
    'a?.upstream.test', 'upstream.test#prod', 'api.upstream.test\\\\x', 'evil.upstream.test?.github.com', 'ab%41.upstream.test', 'a\tb.com', 'bü?.example', '*.{a,b}.upstream.test', '*.a%2e.com', '* .x.com', '*.bü?x.example', '*.bü%41.example', '*.b\tü.example', '*.bü＊x.example']) {
    const err = refusal(`version: "1"\nrules:\n  - {tool: "${tool}", action: "*", decision: deny}\n`);
    t.match(err.message, /'tool'/, `${tool}: refused, naming the field (${err.message})`);
  }
  // Saved before: kept as written (it never matched), not a policy that fails every call.
  const stored = parsePolicy('version: "1"\nrules:\n  - {tool: "api.example.com:8443", action: "*", decision: deny}\n', STORED_POLICY_LIMITS);
  t.equal(decide(stored, 'api.example.com', 'GET'), 'allow default', 'a stored policy with a port in a tool still compiles');
});

t.test('a rule\'s path is read as the proxy reads a call\'s: escapes, raw characters and slashes alike', async (t) => {
  for (const [glob, sent] of <Array<[string, string]>>[
    ['/api/v4/projects/acme%2Fapp/**', '/api/v4/projects/acme%2Fapp/repository'],
    ['/files/a%3ab', '/files/a%3Ab'], ['/files/a%3Ab', '/files/a%3ab'], ['/files/a:b', '/files/a%3ab'], ['/files/a%3Ab', '/files/a:b'],
    ['/@acme/**', '/%40acme/pkg'], ['/%40acme/**', '/@acme/pkg'], ['/v1/users/me:delete', '/v1/users/me%3Adelete'],
    ['/files/%2A', '/files/*'], ['/files/%2a', '/files/%2A'], ['/files/*', '/files/%2A'],
    ['/%7Euser/**', '/~user/x'], ['/~user/**', '/%7Euser/x'],
    ['/a//b', '/a/b'], ['/a/b', '/a//b'],
    ['/docs/my report.pdf', '/docs/my%20report.pdf'], ['/docs/my%20report.pdf', '/docs/my report.pdf'],
    ['/wiki/Zürich/*', '/wiki/Z%C3%BCrich/edit'],
  ]) {
    const policy = policyOf([`{tool: "*", action: "*", path: "${glob}", decision: deny}`]);
    t.equal(decide(policy, 'h', 'GET', normalizePolicyPath(sent)!), 'deny rule-1', `${glob} meets ${sent}`);
  }
  for (const glob of ['/a/../admin', '/a/./b', '/x/..;/y', '/a\\\\b']) {
    const err = refusal(`version: "1"\nrules:\n  - {tool: "*", action: "*", path: "${glob}", decision: deny}\n`);
    t.match(err.message, /'path' never matches/, `${glob}: refused (${err.message})`);
  }
});

t.test('a tool glob with * inside matches any run of characters there', async (t) => {
  const policy = policyOf(['{tool: "api-*.example.com", action: "*", decision: deny}']);
  t.equal(decide(policy, 'api-eu.example.com', 'GET'), 'deny rule-1');
  t.equal(decide(policy, 'api-eu.west.example.com', 'GET'), 'deny rule-1');
  t.equal(decide(policy, 'api.example.com', 'GET'), 'allow default');
  t.equal(decide(policy, 'api-eu.example.com.evil.io', 'GET'), 'allow default');
});

t.test('tool matching is case-insensitive', async (t) => {
  const policy = policyOf([
    '{name: exact, tool: API.GitHub.com, action: "*", decision: deny}',
    '{name: suffix, tool: "*.Example.COM", action: "*", decision: deny}',
    '{name: pattern, tool: "Api-*.Test", action: "*", decision: deny}',
  ]);
  t.equal(decide(policy, 'api.github.com', 'GET'), 'deny exact');
  t.equal(decide(policy, 'API.GITHUB.COM', 'GET'), 'deny exact');
  t.equal(decide(policy, 'WWW.example.Com', 'GET'), 'deny suffix');
  t.equal(decide(policy, 'API-EU.TEST', 'GET'), 'deny pattern');
  t.equal(decide(policy, 'api.gitlab.com', 'GET'), 'allow default');
});

t.test('action is case-insensitive on both sides', async (t) => {
  const policy = policyOf(['{tool: "*", action: delete, decision: deny}']);
  t.equal(decide(policy, 'a.example', 'DELETE'), 'deny rule-1');
  t.equal(decide(policy, 'a.example', 'delete'), 'deny rule-1');
  t.equal(decide(policy, 'a.example', 'Delete'), 'deny rule-1');
  t.equal(decide(policy, 'a.example', 'DELETES'), 'allow default');
  t.equal(decide(policy, 'a.example', 'GET'), 'allow default');
  t.equal(policy.rules[0]!.action, 'DELETE');
});

t.test('action "*" matches any method', async (t) => {
  const policy = policyOf(['{tool: a.example, action: "*", decision: deny}']);
  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS', 'PROPFIND']) {
    t.equal(decide(policy, 'a.example', method), 'deny rule-1', method);
  }
  t.equal(decide(policy, 'b.example', 'GET'), 'allow default');
});

t.test('path "*" matches within one segment', async (t) => {
  const policy = policyOf(['{tool: "*", action: "*", path: "/repos/*/issues", decision: deny}']);
  t.equal(decide(policy, 'a', 'GET', '/repos/tool-call-guard/issues'), 'deny rule-1');
  t.equal(decide(policy, 'a', 'GET', '/repos/org/repo/issues'), 'allow default');
  t.equal(decide(policy, 'a', 'GET', '/repos/x/issues/1'), 'allow default');
  t.equal(decide(policy, 'a', 'GET', '/repos/x/Issues'), 'allow default');
});

t.test('path "**" matches across segments, including the subtree root', async (t) => {
  const policy = policyOf([
    '{name: admin, tool: "*", action: "*", path: "/admin/**", decision: deny}',
    '{name: deep, tool: "*", action: "*", path: "/a/**/b", decision: deny}',
    '{name: mixed, tool: "*", action: "*", path: "/repos/*/**/raw", decision: deny}',
  ]);
  t.equal(decide(policy, 'x', 'GET', '/admin'), 'deny admin');
  t.equal(decide(policy, 'x', 'GET', '/admin/'), 'deny admin');
  t.equal(decide(policy, 'x', 'GET', '/admin/users/1/keys'), 'deny admin');
  t.equal(decide(policy, 'x', 'GET', '/administrator'), 'allow default');
  t.equal(decide(policy, 'x', 'GET', '/x/admin/users'), 'allow default');
  t.equal(decide(policy, 'x', 'GET', '/a/b'), 'deny deep');
  t.equal(decide(policy, 'x', 'GET', '/a/x/y/b'), 'deny deep');
  t.equal(decide(policy, 'x', 'GET', '/a/xb'), 'allow default');
  t.equal(decide(policy, 'x', 'GET', '/repos/me/raw'), 'deny mixed');
  t.equal(decide(policy, 'x', 'GET', '/repos/me/main/src/raw'), 'deny mixed');
  t.equal(decide(policy, 'x', 'GET', '/repos/raw'), 'allow default');
});

t.test('path matching is case-sensitive and exact paths match exactly', async (t) => {
  const policy = policyOf([
    '{name: exact, tool: "*", action: "*", path: /user, decision: deny}',
    '{name: admin, tool: "*", action: "*", path: "/admin/**", decision: deny}',
  ]);
  t.equal(decide(policy, 'x', 'GET', '/user'), 'deny exact');
  t.equal(decide(policy, 'x', 'GET', '/user/'), 'allow default');
  t.equal(decide(policy, 'x', 'GET', '/User'), 'allow default');
  t.equal(decide(policy, 'x', 'GET', '/Admin/users'), 'allow default');
});

t.test('a rule without a path (or path "*" / "**") matches any path', async (t) => {
  const policy = policyOf([
    '{name: no-path, tool: a.example, action: GET, decision: deny}',
    '{name: star, tool: b.example, action: GET, path: "*", decision: deny}',
    '{name: globstar, tool: c.example, action: GET, path: "**", decision: deny}',
  ]);
  for (const path of ['/', '/x', '/x/y/z', '']) {
    t.equal(decide(policy, 'a.example', 'GET', path), 'deny no-path', `no path: ${path}`);
    t.equal(decide(policy, 'b.example', 'GET', path), 'deny star', `*: ${path}`);
    t.equal(decide(policy, 'c.example', 'GET', path), 'deny globstar', `**: ${path}`);
  }
});

t.test('a rule matches only when tool, action and path all match', async (t) => {
  const policy = policyOf(['{tool: api.github.com, action: POST, path: "/repos/*/issues", decision: deny}']);
  t.equal(decide(policy, 'api.github.com', 'POST', '/repos/x/issues'), 'deny rule-1');
  t.equal(decide(policy, 'api.gitlab.com', 'POST', '/repos/x/issues'), 'allow default');
  t.equal(decide(policy, 'api.github.com', 'GET', '/repos/x/issues'), 'allow default');
  t.equal(decide(policy, 'api.github.com', 'POST', '/repos/x/pulls'), 'allow default');
});

t.test('valid fixtures compile to the rules they state', async (t) => {
  const full = parsePolicy(fixture('valid-full.yaml'));
  t.equal(full.version, '1');
  t.equal(full.defaultDecision, 'deny');
  t.strictSame(full.rules.map((rule) => [rule.name, rule.action, rule.result.decision]), [
    ['no-deletes', 'DELETE', 'deny'],
    ['github-issues', null, 'allow'],
    ['rule-3', 'GET', 'deny'],
    ['rule-4', 'GET', 'allow'],
  ]);
  const minimal = parsePolicy(fixture('valid-minimal.yaml'));
  t.equal(minimal.rules.length, 0);
  t.equal(minimal.defaultDecision, 'allow');
  const anchored = parsePolicy(fixture('valid-anchors.yaml'));
  t.strictSame(anchored.rules.map((rule) => rule.result.message), ['Ask #ops first.', 'Ask #ops first.']);
});

t.test('version is the string "1"; an unquoted 1 is accepted as the same', async (t) => {
  t.equal(parsePolicy(fixture('valid-unquoted-version.yaml')).version, '1');
  t.equal(decide(parsePolicy(fixture('valid-unquoted-version.yaml')), 'a', 'GET'), 'allow rule-1');
});

// Every broken fixture, the start of the message it must produce (where, then what).
const BROKEN: ReadonlyArray<[file: string, message: RegExp]> = [
  ['not-yaml.yaml', /^line 4, column 1: not valid YAML: /],
  ['not-a-mapping.yaml', /^line 1: the policy must be a mapping with 'version' and 'rules', not a list$/],
  ['empty.yaml', /^line 1: the policy is empty/],
  ['multiple-documents.yaml', /^line 3, column 1: not valid YAML: the policy must be a single YAML document/],
  ['duplicate-key.yaml', /^rule 1 \(line 6\): the key 'decision' appears twice in this rule$/],
  ['duplicate-top-level-key.yaml', /^line 3: the key 'version' appears twice at the top level$/],
  ['tagged-value.yaml', /^line 3, column 11: not valid YAML: Unresolved tag: !hostname/],
  ['missing-version.yaml', /^line 1: missing key 'version'/],
  ['missing-rules.yaml', /^line 1: missing key 'rules'/],
  ['missing-tool.yaml', /^rule 2 \(line 6\): missing key 'tool'/],
  ['missing-action.yaml', /^rule 1 \(line 3\): missing key 'action'/],
  ['missing-decision.yaml', /^rule 1 \(line 3\): missing key 'decision'/],
  ['unknown-key.yaml', /^rule 2 \(line 7\): unknown key 'decison' \(did you mean 'decision'\?\)/],
  ['unknown-top-level-key.yaml', /^line 2: unknown key 'defualt' at the top level \(did you mean 'default'\?\)/],
  ['bad-decision.yaml', /^rule 1 \(line 5\): 'decision' must be allow, deny or approve, not 'block'$/],
  ['bad-default.yaml', /^line 2: 'default' must be allow or deny, not 'reject'$/],
  ['bad-version.yaml', /^line 1: unsupported version '2'; the only version is "1"$/],
  ['bad-version-float.yaml', /^line 1: unsupported version '1.0'; the only version is "1"$/],
  ['bad-action.yaml', /^rule 1 \(line 4\): 'action' must be an HTTP method .*not 'GET, POST'$/],
  ['bare-star-action.yaml', /^line 4, column 13: not valid YAML: .*quote it: "\*"/],
  ['unquoted-star-tool.yaml', /^line 3: '\*\.github\.com' is read as a YAML alias.*must be quoted, e\.g\. "\*\.github\.com"$/],
  ['rules-not-a-list.yaml', /^line 2: 'rules' must be a list of rules .*not a mapping$/],
  ['rule-not-a-mapping.yaml', /^rule 2 \(line 6\): a rule must be a mapping .*not the string 'deny everything else'$/],
  ['wrong-type-tool.yaml', /^rule 1 \(line 3\): 'tool' must be a string, not a list$/],
  ['wrong-type-name.yaml', /^rule 1 \(line 3\): 'name' must be a string, not the number 42 \(quote it/],
  ['empty-tool.yaml', /^rule 1 \(line 3\): 'tool' must not be empty$/],
  ['tool-is-url.yaml', /^rule 1 \(line 3\): 'tool' is a hostname glob .*not a URL/],
  ['bad-path.yaml', /^rule 1 \(line 5\): 'path' must start with '\/'/],
  ['path-with-query.yaml', /^rule 1 \(line 5\): 'path' is matched against the path only/],
  ['duplicate-name.yaml', /^rule 2 \(line 7\): duplicate rule name 'github' \(rule 1 has it\)/],
  ['duplicate-generated-name.yaml', /^rule 2 \(line 7\): duplicate rule name 'rule-2' \(rule 1 has it\)/],
  ['reserved-name.yaml', /^rule 1 \(line 3\): the rule name 'default' is reserved/],
  ['alias-bomb.yaml', /^line 4: the YAML aliases expand too much \(an alias bomb\)/],
  ['too-many-aliases.yaml', /^line 105: the policy uses more than 100 YAML aliases/],
];

t.test('every broken fixture is refused as invalid_policy naming the line and the problem', async (t) => {
  const brokenFiles = readdirSync(FIXTURES).filter((file) => file.endsWith('.yaml') && !file.startsWith('valid-'));
  t.strictSame(brokenFiles.sort(), BROKEN.map(([file]) => file).sort(), 'each broken fixture has an expected message');
  for (const [file, message] of BROKEN) {
    const err = refusal(fixture(file));
    t.equal(err.code, 'invalid_policy', file);
    t.equal(err.status, 400, file);
    t.match(err.message, message, file);
  }
});

t.test('more than 10,000 rules are refused', async (t) => {
  const rulesYaml = (count: number): string =>
    `version: "1"\nrules:\n${'  - {tool: a, action: GET, decision: deny}\n'.repeat(count)}`;
  // 10,001 rules take more than 256 KiB, so the size bound trips first in practice;
  // raise it to reach the rule bound itself.
  const roomy = { ...POLICY_LIMITS, maxBytes: 4 * MAX_POLICY_BYTES };
  t.equal(parsePolicy(rulesYaml(MAX_POLICY_RULES), roomy).rules.length, 10_000);
  t.equal(refusal(rulesYaml(MAX_POLICY_RULES + 1), roomy).message, "line 2: the policy has 10,001 rules; at most 10,000 are allowed");
  t.equal(refusal(rulesYaml(MAX_POLICY_RULES + 1)).code, 'invalid_policy');
});

t.test('a policy larger than 256 KiB is refused before it is parsed', async (t) => {
  const head = 'version: "1"\nrules: []\n';
  const padded = (bytes: number): string => `${head}#${' '.repeat(bytes - head.length - 1)}`;
  t.equal(MAX_POLICY_BYTES, 262_144);
  t.equal(Buffer.byteLength(padded(MAX_POLICY_BYTES)), MAX_POLICY_BYTES);
  t.equal(parsePolicy(padded(MAX_POLICY_BYTES)).rules.length, 0);
  t.equal(refusal(padded(MAX_POLICY_BYTES + 1)).message, 'the policy is larger than 256 KiB (262,144 bytes), the most allowed');
  // Counted in UTF-8 bytes, not characters: fewer characters than the limit, more bytes.
  const multibyte = head + `# ${'é'.repeat(MAX_POLICY_BYTES / 2)}`;
  t.ok(multibyte.length < MAX_POLICY_BYTES);
  t.match(refusal(multibyte).message, /^the policy is larger than 256 KiB/);
  // Not even parsed: text that is not YAML gets the size answer.
  t.match(refusal('['.repeat(MAX_POLICY_BYTES + 1)).message, /^the policy is larger than 256 KiB/);
});

t.test('an alias bomb is refused quickly', async (t) => {
  const text = fixture('alias-bomb.yaml');
  const started = performance.now();
  const err = refusal(text);
  const elapsedMs = performance.now() - started;
  t.match(err.message, /alias bomb/);
  t.ok(elapsedMs < 500, `refused in ${elapsedMs.toFixed(1)} ms`);
});

t.test('a path glob with * before a trailing /** compiles and matches (regression: it threw)', async (t) => {
  const policy = parsePolicy(`version: "1"
rules:
  - {name: issues, tool: "*", action: "*", path: "/repos/*/issues/**", decision: deny}
  - {name: nested, tool: "*", action: "*", path: "/a/**/b/**", decision: deny}
  - {name: versions, tool: "*", action: "*", path: "/v*/**", decision: deny}
`);
  t.equal(evaluatePolicy(policy, 'x', 'GET', '/repos/node/issues').ruleMatched, 'issues');
  t.equal(evaluatePolicy(policy, 'x', 'GET', '/repos/node/issues/12/comments').ruleMatched, 'issues');
  t.equal(evaluatePolicy(policy, 'x', 'GET', '/repos/node/pulls').ruleMatched, 'default');
  t.equal(evaluatePolicy(policy, 'x', 'GET', '/a/x/y/b/z').ruleMatched, 'nested');
  t.equal(evaluatePolicy(policy, 'x', 'GET', '/v2/things').ruleMatched, 'versions');
});

t.test('mode and MCP fields: shadow rules kept apart, globs compiled, typos refused', async (t) => {
  const policy = parsePolicy(`version: "1"
rules:
  - name: try
    tool: "*"
    action: POST
    mcp_tool: "delete_*"
    decision: deny
    mode: shadow
  - name: lists
    tool: "*"
    action: POST
    mcp_method: "tools/*"
    decision: allow
    mode: enforce
  - tool: "*"
    action: "*"
    decision: deny
`);
  t.strictSame(policy.rules.map((r) => r.name), ['lists', 'rule-3'], 'enforced rules, shadow ones apart (numbering counts them)');
  t.strictSame(policy.shadowRules.map((r) => r.name), ['try']);
  t.equal(policy.usesMcp, true);
  t.equal(evaluatePolicy(policy, 'h', 'POST', '/', { method: 'tools/list', tool: null }).ruleMatched, 'lists');
  t.equal(evaluatePolicy(policy, 'h', 'POST', '/', null).ruleMatched, 'rule-3', 'no JSON-RPC: an MCP rule never matches');
  t.equal(evaluatePolicy(policy, 'h', 'POST', '/', { method: 'Tools/list', tool: null }).ruleMatched, 'rule-3', 'MCP globs are case-sensitive');
  t.equal(evaluateShadow(policy, 'h', 'POST', '/', [{ method: 'tools/call', tool: 'delete_repo' }])?.name, 'try');
  t.equal(evaluateShadow(policy, 'h', 'POST', '/', [{ method: 'tools/list', tool: null }]), null, 'mcp_tool needs a tool');
  t.equal(parsePolicy('version: "1"\nrules: []\n').usesMcp, false);
  t.throws(() => parsePolicy('version: "1"\nrules:\n  - tool: "*"\n    action: GET\n    decision: deny\n    mcp_tol: x\n'), /unknown key 'mcp_tol' \(did you mean 'mcp_tool'\?\)/);
  t.throws(() => parsePolicy('version: "1"\nrules:\n  - tool: "*"\n    action: GET\n    decision: deny\n    mode: audit\n'), /'mode' must be enforce or shadow/);
});

t.test('MCP globs match a megabyte-long tool name in linear time (no backtracking RegExp)', async (t) => {
  const policy = parsePolicy('version: "1"\nrules:\n  - tool: "*"\n    action: POST\n    mcp_tool: "get_*_by_*_id"\n    decision: deny\n');
  const evil = `get_${'_by_'.repeat(256 * 1024)}`;
  const started = performance.now();
  const decision = evaluatePolicy(policy, 'h', 'POST', '/', { method: 'tools/call', tool: evil });
  const ms = performance.now() - started;
  t.equal(decision.ruleMatched, 'default');
  t.ok(ms < 200, `decided in ${ms.toFixed(1)} ms`);
  t.equal(evaluatePolicy(policy, 'h', 'POST', '/', { method: 'tools/call', tool: 'get_issue_by_repo_id' }).decision, 'deny');
  t.equal(evaluatePolicy(policy, 'h', 'POST', '/', { method: 'tools/call', tool: 'get_id' }).decision, 'allow', 'parts may not overlap');
});

t.test('tool and path globs of several wildcards match in bounded time (a backtracking RegExp took seconds)', async (t) => {
  const policy = parsePolicy([
    'version: "1"',
    'rules:',
    '  - {name: tool-stars, tool: "a*a*a*a*a*a*a*a*a*a*a*a*b", action: "*", decision: deny}',
    '  - {name: path-stars, tool: "*", action: "*", path: "/**a**a**a**a**b", decision: deny}',
    '  - {name: segment-stars, tool: "*", action: "*", path: "/*a*a*a*a*a*b/x", decision: deny}',
  ].join('\n'));
  const started = performance.now();
  t.equal(evaluatePolicy(policy, 'a'.repeat(63), 'GET', '/').ruleMatched, 'default', 'a 63-character tool');
  t.equal(evaluatePolicy(policy, 'h', 'GET', `/${'a'.repeat(4000)}`).ruleMatched, 'default', 'a 4,000-character path');
  t.equal(evaluatePolicy(policy, 'h', 'GET', `/${'a'.repeat(4000)}/x`).ruleMatched, 'default', 'a 4,000-character segment');
  const ms = performance.now() - started;
  t.ok(ms < 500, `decided in ${ms.toFixed(1)} ms`);
  t.equal(evaluatePolicy(policy, `${'a'.repeat(12)}b`, 'GET', '/').ruleMatched, 'tool-stars');
  t.equal(evaluatePolicy(policy, 'A1A2A3A4A5A6A7A8A9A0AAAB', 'GET', '/').ruleMatched, 'tool-stars', 'case-insensitive');
  t.equal(evaluatePolicy(policy, 'h', 'GET', '/x/aa/y/aab').ruleMatched, 'path-stars');
  t.equal(evaluatePolicy(policy, 'h', 'GET', '/aaaaab/x').ruleMatched, 'segment-stars');
  t.equal(evaluatePolicy(policy, 'h', 'GET', '/aaa/aab/x').ruleMatched, 'default', '* stays within a segment');
});

t.test('a check without a path (path \'\'): only rules whose path matches every path match (*, **, /**)', async (t) => {
  const policy = parsePolicy(['version: "1"', 'rules:',
    '  - {name: repos, tool: "*", action: "*", path: "/repos/**", decision: deny}',
    '  - {name: root-only, tool: "*", action: "*", path: "/", decision: deny}',
    '  - {name: every, tool: "*", action: "*", path: "/**", decision: deny}'].join('\n'));
  t.equal(evaluatePolicy(policy, 'h', 'GET', '').ruleMatched, 'every');
  for (const glob of ['*', '**']) {
    t.equal(evaluatePolicy(parsePolicy(`version: "1"\nrules:\n  - {name: any, tool: "*", action: "*", path: "${glob}", decision: deny}\n`), 'h', 'GET', '').ruleMatched, 'any', glob);
  }
});

t.test('path globs of several wildcards are bounded: 16 wildcards a glob, 16,384 characters of them a policy (aliases counted)', async (t) => {
  // One rule like this held the event loop ~11 s a check against an 8 KiB path.
  t.match(refusal(`version: "1"\nrules:\n  - {tool: "*", action: "*", decision: deny, path: "/${'*a'.repeat(120_000)}"}\n`).message,
    /rule 1 \(line 3\): 'path' may hold at most 16 wildcards \(this one has 120,000\)/);
  const glob = (chars: number) => `/*${'a'.repeat(chars - 4)}*b`; // two wildcards, `chars` long
  const rules = (n: number, chars: number) => Array.from({ length: n }, (_, i) => `  - {name: r${i}, tool: "*", action: "*", decision: deny, path: "${glob(chars)}"}`);
  t.doesNotThrow(() => parsePolicy(['version: "1"', 'rules:', ...rules(16, 1024)].join('\n')), 'exactly 16,384 characters');
  t.match(refusal(['version: "1"', 'rules:', ...rules(16, 1024), '  - {tool: "*", action: "*", decision: deny, path: "/*x*"}'].join('\n')).message,
    /rule 17 \(line 19\): the policy's path globs of two or more wildcards come to more than 16,384 characters/);
  const anchored = ['version: "1"', 'rules:', `  - {name: first, tool: "*", action: "*", decision: deny, path: &p "${glob(4000)}"}`,
    ...Array.from({ length: 4 }, (_, i) => `  - {name: again${i}, tool: "*", action: "*", decision: deny, path: *p}`)];
  t.match(refusal(anchored.join('\n')).message, /more than 16,384 characters/, 'each use of an alias counts');
  t.doesNotThrow(() => parsePolicy('version: "1"\nrules:\n  - {tool: "*", action: "*", decision: deny, path: "/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*/*"}\n'), '16 wildcards');

  // The worst a policy may hold: the budget filled with globs of 16 wildcards each, against 8 KiB paths of their letter.
  const worstGlob = `/${'*a'.repeat(15)}*${'a'.repeat(990)}b`;
  const worst = parsePolicy(['version: "1"', 'rules:', ...Array.from({ length: 16 }, (_, i) => `  - {name: w${i}, tool: "*", action: "*", decision: deny, path: "${worstGlob}"}`)].join('\n'));
  const started = performance.now();
  for (const path of [`/${'a'.repeat(8190)}`, `/${'a'.repeat(8189)}b`, `/${'a/'.repeat(4095)}`]) evaluatePolicy(worst, 'h', 'GET', path);
  const ms = (performance.now() - started) / 3;
  t.ok(ms < 250, `the worst policy decides in ${ms.toFixed(1)} ms a call`);
});

t.test('MCP globs are bounded: 256 uses of those that search names (`*delete*`), 200 characters between two wildcards, 256 KiB of them a policy (aliases, limits and shadow rules counted)', async (t) => {
  const rule = (i: number, glob: string, extra = '') => `  - {name: r${i}, tool: "*", action: "*", mcp_tool: "${glob}", decision: deny${extra}}`;
  const policy = (lines: string[]) => ['version: "1"', 'rules:', ...lines].join('\n');
  const full = Array.from({ length: 256 }, (_, i) => rule(i, `*a${i}*`));
  const compiled = parsePolicy(policy(full));
  t.ok(compiled.scansMcpNames && !compiled.shadowScansMcpNames, "exactly 256: accepted; the body's names are bounded");
  t.match(refusal(policy([...full, rule(256, 'x*y*z')])).message,
    /^rule 257 \(line 259\): the policy may use at most 256 MCP globs with text between two wildcards, such as "\*delete\*"/);
  t.match(refusal(policy([...full, rule(256, 'x', ', mode: shadow').replace('mcp_tool: "x"', 'mcp_method: "*call*"')])).message, /at most 256 MCP globs/, 'a shadow rule counts, mcp_method too');
  t.match(refusal(['version: "1"', 'rules:', ...full, 'limits:', '  - {name: l, tool: "*", mcp_tool: "*b*", rate: 1/second}'].join('\n')).message, /^limit 1 \(line 260\): .*at most 256 MCP globs/, 'a limit counts');
  const aliased = policy([`  - &r {tool: "*", action: "*", mcp_tool: "*delete*", decision: deny}`, ...Array.from({ length: 99 }, () => "  - *r"), ...full.slice(99)]);
  t.match(refusal(aliased).message, /at most 256 MCP globs/, 'each use of an alias counts');
  t.doesNotThrow(() => parsePolicy(aliased, STORED_POLICY_LIMITS), 'a stored policy (saved before the bound) keeps deciding');
  const ends = parsePolicy(policy(Array.from({ length: 3_000 }, (_, i) => rule(i, i % 2 ? `delete_${i}*` : `*_${i}`))));
  t.ok(!ends.scansMcpNames, 'globs that compare an end only: any number, and no bound on the names');
  t.ok(parsePolicy(policy([rule(0, '*delete*', ', mode: shadow')])).shadowScansMcpNames, 'a shadow rule that searches: flagged apart');

  // V8's indexOf compares a text of more than 250 characters in time of its length × the name's:
  // 142 uses of one of 6,000 held the loop 2.3 s a call against a name of 16 KiB.
  t.match(refusal(policy([rule(0, `*${'a'.repeat(5_000)}b${'a'.repeat(1_000)}*`)])).message,
    /^rule 1 \(line 3\): an MCP glob may hold at most 200 characters between two wildcards/);
  t.doesNotThrow(() => parsePolicy(policy([rule(0, `*${'a'.repeat(200)}*${'b'.repeat(5_000)}`)])), 'a longer end is compared, not searched');
  t.match(refusal(policy([rule(0, `*${'é'.repeat(40)}*`)])).message, /at most 200 characters between two wildcards, as a resource URI percent-encodes them/);
  // Aliases multiply the comparisons of a long glob: 100 uses of a 250 KB prefix held the loop 52 ms a call.
  t.match(refusal(policy([`  - &r {tool: "*", action: "*", mcp_tool: "${'a'.repeat(200_000)}*", decision: deny}`, '  - *r'])).message,
    /^rule 2 \(line 3\): the policy's MCP globs come to more than 262,144 characters, each use of a YAML alias counted/);

  // The worst a policy may hold, against names of the bound's length: tens of ms a call.
  const worst = parsePolicy(policy(Array.from({ length: 256 }, (_, i) => rule(i, '*aaaaaab*')))); // each searches the whole name
  const name = 'a'.repeat(16 * 1024 - 20);
  const started = performance.now();
  t.equal(evaluatePolicy(worst, 'h', 'POST', '/', { method: 'tools/call', tool: name }).ruleMatched, 'default');
  const ms = performance.now() - started;
  t.ok(ms < 250, `the worst policy decides in ${ms.toFixed(1)} ms a call`);
});

t.test('a policy saved before the MCP globs\' bounds that exceeds them: its names bound shrinks to keep a call\'s work at the bounds\'', async (t) => {
  const rule = (i: number, glob: string) => `  - {name: r${i}, tool: "*", action: "*", mcp_tool: "${glob}", decision: deny}`;
  const policy = (lines: string[]) => ['version: "1"', 'default: allow', 'rules:', ...lines].join('\n');
  const call = (tool: string) => ({ method: 'tools/call', tool });
  t.equal(parsePolicy(policy([rule(0, '*delete*')])).mcpNamesMaxChars, 16_384, 'within the bounds: 16 KiB');
  t.equal(parsePolicy(policy([rule(0, '*delete*')]), STORED_POLICY_LIMITS).mcpNamesMaxChars, 16_384, 'read back from the store alike');
  t.equal(parsePolicy(policy([rule(0, 'delete_*')])).mcpNamesMaxChars, Infinity, 'nothing searches: no bound');

  // 3,500 searching globs (the bound is 256) against names of 16 KiB of `a` held the loop 0.4 s a call.
  const many = parsePolicy(policy(Array.from({ length: 3_500 }, (_, i) => `  - {tool: "*", action: "*", mcp_tool: "*a${i}*", decision: deny}`)), STORED_POLICY_LIMITS);
  t.equal(many.mcpNamesMaxChars, Math.floor((16_384 * 256) / 3_500), '256 × 16 KiB of searching, spread over 3,500 globs');
  const over = mcpRequestDecision(many, 'h', 'POST', '/', call('a'.repeat(many.mcpNamesMaxChars - 9)));
  t.match(over, { decision: 'deny', ruleMatched: 'uninspectable_body', message: /names come to more than 1,198 characters \(the bound of a policy saved before the MCP globs' bounds/ }, 'past it: refused unsearched');
  const started = performance.now();
  t.match(mcpRequestDecision(many, 'h', 'POST', '/', call('a'.repeat(many.mcpNamesMaxChars - 10))), { decision: 'allow' }, 'at it: searched');
  t.match(mcpRequestDecision(many, 'h', 'POST', '/', call(`${'b'.repeat(1_000)}a3`)), { ruleMatched: 'rule-4' }, 'a name with `a3`: the rule of `*a3*`');
  const ms = (performance.now() - started) / 2;
  t.ok(ms < 250, `at the bound, ${ms.toFixed(1)} ms a call`);

  // Aliases of a long prefix (262,144 characters is the bound): each compares the name's length at most.
  const prefixed = parsePolicy(policy([`  - &r {tool: "*", action: "*", mcp_tool: "${'a'.repeat(200_000)}*", decision: deny}`, ...Array.from({ length: 99 }, () => '  - *r')]), STORED_POLICY_LIMITS);
  t.ok(prefixed.scansMcpNames, 'every MCP glob then counts as searching');
  t.equal(prefixed.mcpNamesMaxChars, Math.floor(262_144 / 100));
  t.match(mcpRequestDecision(prefixed, 'h', 'POST', '/', call('a'.repeat(2_700))), { ruleMatched: 'uninspectable_body', message: /more than 2,621 characters/ });
  t.match(mcpRequestDecision(prefixed, 'h', 'POST', '/', call('list_x')), { decision: 'allow' });
  // Short globs beside them cost their own length, not a name's: 1,000 of them lower the bound by what they hold.
  const short = Array.from({ length: 1_000 }, (_, i) => `t${i}_*`);
  const mixed = parsePolicy(policy([`  - &r {tool: "*", action: "*", mcp_tool: "${'a'.repeat(100_000)}*", decision: deny}`, ...Array.from({ length: 99 }, () => '  - *r'),
    ...short.map((glob) => `  - {tool: "*", action: "*", mcp_tool: "${glob}", decision: deny}`)]), STORED_POLICY_LIMITS);
  const shortChars = short.reduce((sum, glob) => sum + glob.length, 0);
  t.equal(mixed.mcpNamesMaxChars, Math.floor((262_144 - shortChars) / 100), `Σ min(glob, N) within 262,144: ${mixed.mcpNamesMaxChars} characters (was 262,144 ÷ 1,100 = 238)`);
});

t.test('a text between wildcards longer than indexOf searches well is searched in linear time, and finds what indexOf finds', async (t) => {
  // A policy saved before the 200-character bound: 40 uses of 6,000 characters (a..ab a..a) against 16 KiB
  // of `a` took ~480 ms a call with indexOf.
  const piece = `${'a'.repeat(3_000)}b${'a'.repeat(2_999)}`;
  const stored = parsePolicy(`version: "1"\ndefault: allow\nrules:\n  - &r {tool: "*", action: "*", mcp_tool: "*${piece}*", decision: deny}\n${'  - *r\n'.repeat(39)}`, STORED_POLICY_LIMITS);
  const name = 'a'.repeat(16 * 1024 - 20);
  evaluatePolicy(stored, 'h', 'POST', '/', { method: 'tools/call', tool: name });
  const started = performance.now();
  t.match(evaluatePolicy(stored, 'h', 'POST', '/', { method: 'tools/call', tool: name }), { decision: 'allow' });
  const ms = performance.now() - started;
  t.ok(ms < 150, `${ms.toFixed(1)} ms a call`);
  t.match(evaluatePolicy(stored, 'h', 'POST', '/', { method: 'tools/call', tool: `x${name.slice(0, 8_000)}b${name.slice(0, 8_000)}` }), { ruleMatched: 'rule-1' });

  // Against indexOf, on texts built to hold near misses of the part.
  const letters = fc.array(fc.constantFrom('a', 'b'), { minLength: 1, maxLength: 8 }).map((l) => l.join(''));
  const parts = fc.tuple(letters, fc.integer({ min: 201, max: 260 })).map(([unit, length]) => unit.repeat(Math.ceil(length / unit.length)).slice(0, length));
  const texts = (part: string) => fc.array(fc.oneof(fc.constant(part), fc.constant(part.slice(1)), fc.constant(part.slice(0, -1)), fc.integer({ min: 0, max: part.length - 1 }).map((at) => `${part.slice(0, at)}${part[at] === 'a' ? 'b' : 'a'}${part.slice(at + 1)}`), letters), { maxLength: 5 }).map((p) => p.join(''));
  fc.assert(fc.property(parts.chain((part) => fc.tuple(fc.constant(part), texts(part), letters)), ([part, text, prefix]) => {
    const glob = Object.freeze([prefix, part, '']);
    return matchGlob(glob, text) === (text.startsWith(prefix) && text.indexOf(part, prefix.length) >= 0);
  }), { numRuns: 3_000 });
  t.pass('3,000 random parts and texts agree');
});

t.test('path globs of several wildcards match as their RegExp form does, on random globs and paths', async (t) => {
  const piece = fc.constantFrom('/', 'a', 'b', '*', '**', '/**/', '/**');
  const globs = fc.array(piece, { minLength: 1, maxLength: 7 }).map((p) => `/${p.join('')}`).filter((g) => (g.match(/\*+/g)?.length ?? 0) >= 2 && !/\*\*\/\*/.test(g)); // (the RegExp form mis-reads a wildcard right after '/**/')
  const paths = fc.array(fc.constantFrom('/', 'a', 'b'), { maxLength: 10 }).map((p) => `/${p.join('')}`);
  fc.assert(fc.property(globs, paths, (glob, path) => pathGlobMatcher(glob).test(path) === pathGlobToRegExp(glob).test(path)), { numRuns: 5000 });
  t.pass('5,000 random glob and path pairs agree');
});

t.test('decision: approve holds the call, with approval_timeout (10 to 86400 s, default 3600); validation names the line', async (t) => {
  const policy = policyOf([
    '{name: pay, tool: "api.stripe.com", action: POST, decision: approve, approval_timeout: 900}',
    '{name: delete, tool: "*", action: DELETE, decision: approve}',
    '{name: read, tool: "*", action: GET, decision: allow}',
  ], 'deny');
  const pay = evaluatePolicy(policy, 'api.stripe.com', 'post', '/v1/charges');
  t.match(pay, { decision: 'approve', ruleMatched: 'pay', approvalTimeoutS: 900, message: "Held for approval by rule 'pay'." });
  t.equal(evaluatePolicy(policy, 'x', 'DELETE', '/').approvalTimeoutS, 3600, 'the default timeout');
  t.equal(evaluatePolicy(policy, 'x', 'GET', '/').approvalTimeoutS, 0, 'allow and deny carry no timeout');
  t.equal(evaluatePolicy(policy, 'x', 'PUT', '/').approvalTimeoutS, 0);
  t.equal(NO_POLICY_DECISION.approvalTimeoutS, 0);
  t.equal(evaluateShadow(policyOf(['{name: s, tool: "*", action: "*", decision: approve, mode: shadow}']), 'x', 'GET', '/')?.result.decision, 'approve', 'a shadow rule may say approve');

  const cases: [string, RegExp][] = [
    ['{tool: "*", action: POST, decision: approve, approval_timeout: 9}', /^rule 1 \(line 3\): 'approval_timeout' must be a whole number of seconds from 10 to 86400/],
    ['{tool: "*", action: POST, decision: approve, approval_timeout: 86401}', /from 10 to 86400/],
    ['{tool: "*", action: POST, decision: approve, approval_timeout: 60.5}', /from 10 to 86400/],
    ['{tool: "*", action: POST, decision: approve, approval_timeout: "60"}', /from 10 to 86400/],
    ['{tool: "*", action: POST, decision: allow, approval_timeout: 60}', /'approval_timeout' applies only to a rule with decision: approve/],
    ['{tool: "*", action: POST, decision: hold}', /'decision' must be allow, deny or approve, not 'hold'/],
  ];
  for (const [rule, expected] of cases) {
    const err = refusal(`version: "1"\nrules:\n  - ${rule}\n`);
    t.equal(err.code, 'invalid_policy');
    t.match(err.message, expected, rule);
  }
  t.match(refusal('version: "1"\ndefault: approve\nrules: []\n').message, /^line 2: 'default' must be allow or deny, not 'approve' \(approve is a rule's decision/);
});

t.test('rule names the proxy writes for its own refusals are reserved (an audit row could not be told from one)', async (t) => {
  for (const name of ['target_forbidden', 'uninspectable_body', 'limit:per-minute', 'limit:pending_approvals']) {
    const err = refusal(`version: "1"\nrules:\n  - {name: "${name}", tool: "*", action: "*", decision: deny}\n`);
    t.match(err.message, /is reserved for the proxy's own refusals/, `${name}: refused`);
  }
  t.ok(parsePolicy('version: "1"\nrules:\n  - {name: "target_forbidden", tool: "*", action: "*", decision: deny}\n', STORED_POLICY_LIMITS), 'a stored policy keeps compiling');
  t.ok(parsePolicy('version: "1"\nrules:\n  - {name: "limits-apply", tool: "*", action: "*", decision: deny}\n'), 'other names are free');
});

t.test('a one-wildcard path glob too long for a RegExp (V8 refused ~35,000 characters: every call a 500) is matched by its ends, as the RegExp would', async (t) => {
  // Escaped non-ASCII is up to 9 characters a character: a path of 2,800 CJK characters is ~25,000.
  const cjk = '中'.repeat(2800);
  const deny = policyOf([`{tool: "*", action: "*", path: "/files/${cjk}*", decision: deny}`]);
  t.equal(decide(deny, 'x.example.com', 'GET', normalizePolicyPath(`/files/${cjk}report.pdf`)!), 'deny rule-1', 'a stored deny of a long path still denies');
  t.equal(decide(deny, 'x.example.com', 'GET', normalizePolicyPath(`/files/${cjk}/report.pdf`)!), 'allow default', 'and `*` still stops at a slash');
  const long = '/' + 'a'.repeat(40_000);
  for (const [glob, path, expected] of <Array<[string, string, string]>>[
    [`${long}*`, `${long}bc`, 'deny rule-1'],
    [`${long}*`, `/${'a'.repeat(39_999)}`, 'allow default'],
    [`*${long}`, `/x${long}`, 'allow default'],
    [`/x/**${long}`, `/x/q/r${long}`, 'deny rule-1'],
    [`${long}/**`, `${long}/a/b`, 'deny rule-1'],
    [`${long}/**`, long, 'deny rule-1'],
  ]) {
    t.equal(decide(policyOf([`{tool: "*", action: "*", path: "${glob}", decision: deny}`]), 'x.example.com', 'GET', path), expected, `${glob.length}-character glob, ${path.length}-character path: ${expected}`);
  }
  // Against the RegExp itself, on globs short enough for one.
  const glob = fc.tuple(fc.string({ unit: fc.constantFrom('a', '/', '.', '\n'), maxLength: 6 }), fc.constantFrom('*', '**'), fc.string({ unit: fc.constantFrom('a', '/', '.', '\n'), maxLength: 6 }))
    .map(([before, stars, after]) => `/${before}${stars}${after}`)
    .filter((g) => g.match(/\*+/g)!.length === 1);
  fc.assert(fc.property(glob, fc.string({ unit: fc.constantFrom('a', '/', '.', '\n', '\u2028'), maxLength: 14 }), (g, rest) => {
    const path = `/${rest}`;
    return oneWildcardMatcher(g).test(path) === pathGlobToRegExp(g).test(path);
  }), { numRuns: 20_000 });
});

t.test('a policy text is compiled once, and never answers under bounds looser than it passed', async (t) => {
  const tag = `${process.pid}-${Date.now()}`;
  const rules = Array.from({ length: 2000 }, (_, i) => `  - {name: r${i}, tool: "api${i}.example.com", action: GET, path: "/v1/items/*", decision: allow}\n`);
  const text = `# ${tag}\nversion: "1"\ndefault: deny\nrules:\n${rules.join('')}`;
  let started = performance.now();
  const first = parsePolicy(text);
  const compileMs = performance.now() - started;
  const readBack = Buffer.from(text, 'utf8').toString('utf8'); // another string of the same text, as the store returns it
  started = performance.now();
  const again = parsePolicy(text);
  const stored = parsePolicy(readBack, STORED_POLICY_LIMITS);
  const againMs = performance.now() - started;
  t.equal(again.rules, first.rules, 'the same text again: the same compiled rules');
  t.equal(stored.rules, first.rules, 'the text read back from the store, under the stored bounds: the same');
  t.not(again.toolIndex, first.toolIndex, 'each caller fills a tool index of its own: the memo\'s copy never grows');
  t.ok(againMs < compileMs / 4, `read twice in ${againMs.toFixed(2)} ms, compiled in ${compileMs.toFixed(1)} ms`);
  t.not(parsePolicy(`${text}# changed\n`).rules, first.rules, 'another text is compiled');
  // Accepted under the stored bounds only: a later strict parse must still refuse it.
  const reserved = `# ${tag}\nversion: "1"\nrules:\n  - {name: "target_forbidden", tool: "*", action: "*", decision: deny}\n`;
  const loose = parsePolicy(reserved, STORED_POLICY_LIMITS);
  t.match(refusal(reserved).message, /is reserved for the proxy's own refusals/, 'a text compiled under the stored bounds is still refused under the strict ones');
  t.equal(parsePolicy(reserved, STORED_POLICY_LIMITS).rules, loose.rules, 'and is still the stored one');
  t.equal(evaluatePolicy(parsePolicy(text, POLICY_LIMITS), 'api7.example.com', 'GET', '/v1/items/x').ruleMatched, 'r7', 'a shared policy decides as its own');
});

t.test('the memo of compiled policies is bounded by what they hold, not by their text (YAML aliases repeat a rule without its text)', async (t) => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  // 8 KB of text, 100 rules of an 8,000-character glob each, a RegExp apiece: 300 such held ~300 MB.
  const aliased = (k: number) => `version: "1"\nrules:\n  - &r {tool: "*", action: "*", path: "/${'a.'.repeat(4_000)}${k}-${process.pid}*", decision: deny}\n${'  - *r\n'.repeat(99)}`;
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let k = 0; k < 300; k++) parsePolicy(aliased(k));
  gc();
  const grown = (process.memoryUsage().heapUsed - before) / 1e6;
  t.ok(grown < 64, `300 such policies checked: the heap grew ${grown.toFixed(1)} MB`);
});

t.test('rules repeated by YAML aliases share their compiled globs, and decide as each would alone', async (t) => {
  const text = `version: "1"\ndefault: allow\nrules:\n  - &r {tool: "api*.example.*", action: POST, path: "/v1/*/items/*", mcp_tool: "é_*", decision: deny}\n  - *r\n  - *r\n`;
  const policy = parsePolicy(text);
  const [first, , last] = policy.rules;
  for (const field of ['toolRegExp', 'pathRegExp', 'mcpToolGlob', 'mcpToolGlobEncoded'] as const) {
    t.ok(first![field] !== null && first![field] === last![field], `${field}: one compiled form`);
  }
  const call = (tool: string) => ({ method: 'tools/call', tool });
  t.equal(evaluatePolicy(policy, 'api2.example.com', 'POST', '/v1/a/items/b', call('é_x')).ruleMatched, 'rule-1');
  t.equal(evaluatePolicy(policy, 'api2.example.com', 'POST', '/v1/a/items/b', call('%C3%A9_x')).decision, 'allow', 'the encoded form is for resource URIs only');
  t.equal(evaluatePolicy(policy, 'api2.example.com', 'POST', '/v1/a/items/b', call('e_x')).ruleMatched, 'default');
  // Each use still counts against the budget of path-glob characters.
  const over = `version: "1"\nrules:\n  - &r {tool: "*", action: "*", path: "/${'a'.repeat(6_000)}/*/*", decision: deny}\n  - *r\n  - *r\n`;
  t.match(refusal(over).message, /^rule 3 \(line 3\): the policy's path globs of two or more wildcards come to more than 16,384 characters/);
});

t.test('the memo weighs each policy at least at what it holds, for the shapes that hold most for their text', async (t) => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const aliased = (fields: string) => `version: "1"\nrules:\n  - &r {tool: "*", action: "*", ${fields}, decision: deny}\n${'  - *r\n'.repeat(99)}`;
  const shapes: Record<string, (k: number) => string> = {
    // Before aliases shared their globs: 16 MB held each, weighed at 2.4 MB.
    'mcp_tool of 4,000 non-Latin-1 pieces, used 100 times': (k) => aliased(`mcp_tool: "${'é*'.repeat(4_000)}${k}-${process.pid}"`),
    'tool of 4,000 pieces, used 100 times': (k) => aliased(`tool: "${'a*'.repeat(4_000)}${k}-${process.pid}.com"`).replace('tool: "*", ', ''),
    'a one-wildcard path of 8,000 characters, run': (k) => aliased(`path: "/${'a.'.repeat(4_000)}${k}-${process.pid}*"`),
    // The yaml library builds a double-quoted scalar a character at a time: kept as built, 800 messages of 220 characters held 7 MB a policy, weighed at 0.7 MB.
    '800 rules of double-quoted messages': (k) => `version: "1"\nrules:\n${Array.from({ length: 800 }, (_, i) => `  - {name: r${i}, tool: a.com, action: GET, decision: deny, message: "m${i} ${'abcdefghij'.repeat(20)}"}\n`).join('')}# ${k}-${process.pid}\n`,
    '2,000 rules of their own globs': (k) => `version: "1"\nrules:\n${Array.from({ length: 2_000 }, (_, i) => `  - {tool: "a${i}*b*c", action: GET, path: "/v${i}/*", mcp_tool: "t${i}_*", decision: allow}\n`).join('')}# ${k}-${process.pid}\n`,
  };
  for (const [shape, make] of Object.entries(shapes)) {
    // Under the stored bounds: a policy saved before the MCP globs' (2026-11-29) may still hold these.
    const warm = parsePolicy(make(-1), STORED_POLICY_LIMITS);
    evaluatePolicy(warm, 'a1.example.com', 'GET', `/${'a.'.repeat(4_000)}x`);
    const texts = Array.from({ length: 10 }, (_, k) => make(k));
    forgetCompiledPolicies(); // what the memo frees as it takes these would offset what they hold
    gc();
    gc();
    const before = process.memoryUsage().heapUsed;
    let weighed = 0;
    const kept = texts.map((text) => {
      const policy = parsePolicy(text, STORED_POLICY_LIMITS);
      evaluatePolicy(policy, 'a1.example.com', 'GET', `/${'a.'.repeat(4_000)}x`);
      weighed += memoWeightOf(text) ?? NaN;
      return policy;
    });
    gc();
    const held = process.memoryUsage().heapUsed - before;
    t.equal(kept.length, texts.length);
    t.ok(weighed > 0 && held <= weighed, `${shape}: held ${(held / 1e6).toFixed(2)} MB, weighed ${(weighed / 1e6).toFixed(2)} MB`);
    kept.length = texts.length = 0; // freed before the next shape is measured, not during it
  }
});

t.test('policies whose aliases repeat an MCP glob of many pieces: the memo stays bounded', async (t) => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const aliased = (k: number) => `version: "1"\nrules:\n  - &r {tool: "*", action: "*", mcp_tool: "${'é*'.repeat(4_000)}${k}-${process.pid}", decision: deny}\n${'  - *r\n'.repeat(99)}`;
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let k = 0; k < 100; k++) parsePolicy(aliased(k), STORED_POLICY_LIMITS); // saved before the MCP globs' bounds
  gc();
  const grown = (process.memoryUsage().heapUsed - before) / 1e6;
  t.ok(grown < 64, `100 such policies checked: the heap grew ${grown.toFixed(1)} MB`);
});

t.test("the limit name 'pending_approvals' is reserved for the bound on pending approvals", async (t) => {
  const err = refusal('version: "1"\nrules: []\nlimits:\n  - {name: pending_approvals, tool: "*", rate: 1/minute}\n');
  t.match(err.message, /^limit 1 \(line 4\): the limit name 'pending_approvals' is reserved/);
});

t.test('a large policy decides as trying every rule in order does (its tool index changes no decision)', async (t) => {
  const tools = ['api.github.com', 'API.GitHub.com', 'hooks.slack.com', 'a.tenant.example.com', 'tenant.example.com', 'bucket-7-x.s3.amazonaws.com', 'api.stripe.com', 'other.example'];
  const toolGlobs = ['api.github.com', 'hooks.slack.com', '*.tenant.example.com', '*', 'bucket-*-x.s3.amazonaws.com', '*.COM', 'api.*.com'];
  const paths = ['/', '/repos/a/b', '/repos/a/b/issues/1', '/v1/refunds/9', ''];
  const pathGlobs = [null, '/repos/**', '/repos/*/b', '/v1/refunds/**', '/'];
  const rule = fc.record({
    tool: fc.constantFrom(...toolGlobs),
    action: fc.constantFrom('GET', 'POST', '*', 'delete'),
    path: fc.constantFrom(...pathGlobs),
    decision: fc.constantFrom('allow', 'deny', 'approve'),
  });
  const call = fc.tuple(fc.constantFrom(...tools), fc.constantFrom('GET', 'post', 'DELETE', 'PUT'), fc.constantFrom(...paths));
  fc.assert(
    fc.property(fc.array(rule, { minLength: 17, maxLength: 60 }), fc.array(call, { minLength: 1, maxLength: 30 }), (rules, calls) => {
      const policy = policyOf(rules.map((r, i) => `{ name: r${i}, tool: "${r.tool}", action: "${r.action}"${r.path === null ? '' : `, path: "${r.path}"`}, decision: ${r.decision} }`), 'deny');
      for (const [tool, action, path] of calls) {
        const linear = policy.rules.find((r) => matchesCall(r, tool, action, path))?.result ?? policy.defaultResult;
        if (evaluatePolicy(policy, tool, action, path) !== linear) return false;
      }
      return true;
    }),
    { seed: 1125, numRuns: 300 },
  );
});

t.test("a large policy's tool index stays bounded when calls name ever new tools", async (t) => {
  const rules = Array.from({ length: 40 }, (_, i) => `{ name: r${i}, tool: "t${i}.example.com", action: GET, decision: allow }`);
  rules.push('{ name: any, tool: "*", action: POST, decision: allow }');
  const policy = policyOf(rules, 'deny');
  let matched = 0;
  for (let i = 0; i < 5000; i++) if (evaluatePolicy(policy, `h${i}.example.org`, 'GET', '/').ruleMatched !== 'default') matched++;
  t.equal(matched, 0, 'no rule matches a host none names');
  t.ok(policy.toolIndex.byTool.size <= 256, `${policy.toolIndex.byTool.size} tools kept`);
  t.equal(evaluatePolicy(policy, 'T7.example.com', 'GET', '/').ruleMatched, 'r7');
  t.equal(evaluatePolicy(policy, 'h1.example.org', 'POST', '/').ruleMatched, 'any');
});
