// Decides one call against a compiled policy. This runs on every proxied request:
// rules are tried in order and the first match returns its precomputed, frozen
// PolicyDecision, so a decision allocates nothing (no upper-casing, no strings, no
// result object); only a `Pattern` glob runs a RegExp (`test`, no match array).
// A large policy is tried only over the rules whose tool glob matches the call's
// tool (rulesForTool): most of a large policy's rules name other tools.

import { PathMatch, ToolMatch } from './types.js';
import type { CallMatcher, CompiledLimit, CompiledPolicy, CompiledRule, McpCall, PolicyDecision } from './types.js';

/** The answer when an agent has no policy: everything is allowed (the contract). */
export const NO_POLICY_DECISION: PolicyDecision = Object.freeze({
  decision: 'allow',
  ruleMatched: 'default',
  message: 'No policy is set; the default is allow.',
  approvalTimeoutS: 0,
});

/**
 * `policy` null means none is set. `tool` is the tool name (for a proxied call the
 * target hostname without port), `action` the HTTP method in any case, `path` the
 * target path without its query string ('' when there is none, as for
 * POST /policy/check: then only rules without a `path` can match).
 */
export function evaluatePolicy(policy: CompiledPolicy | null, tool: string, action: string, path: string, mcp: McpCall | null = null): PolicyDecision {
  if (policy === null) return NO_POLICY_DECISION;
  let decision = decide(policy, tool, action, path, mcp, undefined);
  if (mcp?.readAs === undefined) return decision;
  // A resource URI the server reads otherwise than it was sent (`FILE:///secrets/x`,
  // `file:///public/../secrets/x`, `file:///public/..%2fsecrets/x`): decided on
  // every spelling, the strictest stands, so that no spelling steps around a deny
  // rule or out of an allow-list.
  for (const name of mcp.readAs) {
    const read = decide(policy, tool, action, path, mcp, name);
    if (STRICTNESS[read.decision] > STRICTNESS[decision.decision]) decision = read;
  }
  return decision;
}

const STRICTNESS: Readonly<Record<PolicyDecision['decision'], number>> = { allow: 0, approve: 1, deny: 2 };

function decide(policy: CompiledPolicy, tool: string, action: string, path: string, mcp: McpCall | null, readAs: string | undefined): PolicyDecision {
  const rules = policy.rules.length > TOOL_INDEX_MIN_RULES ? rulesForTool(policy, tool) : policy.rules;
  for (let i = 0; i < rules.length; i++) {
    const rule = rules[i]!;
    if (matchesCall(rule, tool, action, path, mcp, readAs)) return rule.result;
  }
  return policy.defaultResult;
}

/**
 * Policies of at most this many rules are tried rule by rule: 5 rules cost a
 * decision ~0.2–0.3 µs that way, and 100 rules 2.5 µs against 0.16 through the
 * index (bench/micro/evaluate-policy.ts). A threshold chosen between the two,
 * not measured at 16: the index pays where there are rules to skip.
 */
export const TOOL_INDEX_MIN_RULES = 16;

/**
 * Tool names a policy's index keeps at most, and rule references across their
 * lists (eight per rule, at least 4,096): an agent calling ever new hosts, or
 * rules that match every tool repeated in every list, must not grow it without
 * bound, and a cached small policy must stay small (the proxy caches up to
 * CACHE_MAX_ENTRIES of them). Full, it starts again empty.
 */
const TOOL_INDEX_MAX_TOOLS = 256;
const toolIndexMaxRefs = (rules: number) => Math.min(1 << 18, Math.max(4096, rules * 8));

/**
 * The enforced rules whose tool glob matches `tool`, in document order: the
 * rules a call to `tool` can match. Computed once per tool name (one pass of
 * the tool matchers, which depend on nothing else) and kept in the policy, so a
 * call to a tool that a few of 10,000 rules name tries those few, and a call to
 * a tool none names tries only the rules that match any tool. The result is
 * the same as trying every rule: the others fail on the tool.
 */
export function rulesForTool(policy: CompiledPolicy, tool: string): readonly CompiledRule[] {
  const index = policy.toolIndex;
  const known = index.byTool.get(tool);
  if (known !== undefined) return known;
  const all = policy.rules;
  const matching: CompiledRule[] = [];
  for (let i = 0; i < all.length; i++) if (matchesTool(all[i]!, tool)) matching.push(all[i]!);
  const rules = matching.length === all.length ? all : matching;
  const refs = rules === all ? 0 : rules.length;
  if (index.byTool.size >= TOOL_INDEX_MAX_TOOLS || index.refs + refs > toolIndexMaxRefs(all.length)) {
    index.byTool.clear();
    index.refs = 0;
  }
  index.byTool.set(tool, rules);
  index.refs += refs;
  return rules;
}

/**
 * The first `mode: shadow` rule (in list order) that matches the call (what it
 * would have decided), or null. `calls` are the requests of an MCP body (a
 * batch's elements): a rule matches when it matches any of them, as an
 * enforced one would deny the batch.
 */
export function evaluateShadow(policy: CompiledPolicy | null, tool: string, action: string, path: string, calls: readonly (McpCall | null)[] | null = null): CompiledRule | null {
  if (policy === null) return null;
  const rules = policy.shadowRules;
  for (let i = 0; i < rules.length; i++) {
    if (matchesAnyCall(rules[i]!, tool, action, path, calls)) return rules[i]!;
  }
  return null;
}

/** A rule or limit matches a call whose body holds `calls` (an MCP batch): one that names MCP fields when any request matches. */
export function matchesAnyCall(m: CallMatcher, tool: string, action: string, path: string, calls: readonly (McpCall | null)[] | null): boolean {
  if (!m.mcp || calls === null || calls.length === 0) return matchesCall(m, tool, action, path, null);
  for (let i = 0; i < calls.length; i++) if (matchesEither(m, tool, action, path, calls[i]!)) return true;
  return false;
}

/**
 * How many calls a limit counts in a call whose body holds `calls`: 1 when it
 * matches (0 when not); one that names MCP fields, each request of an MCP
 * batch it matches, so that a batch of 1,000 `tools/call send_email` is 1,000
 * calls to a limit on `send_email`, not one.
 */
export function countMatchingCalls(m: CallMatcher, tool: string, action: string, path: string, calls: readonly (McpCall | null)[] | null): number {
  if (!m.mcp || calls === null || calls.length === 0) return matchesCall(m, tool, action, path, null) ? 1 : 0;
  let count = 0;
  for (let i = 0; i < calls.length; i++) if (matchesEither(m, tool, action, path, calls[i]!)) count++;
  return count;
}

/** The policy's limits that count a call (tool, action and path as for evaluatePolicy), in document order. */
export function matchingLimits(policy: CompiledPolicy | null, tool: string, action: string, path: string, mcp: McpCall | null = null): CompiledLimit[] {
  if (policy === null) return [];
  return policy.limits.filter((limit) => matchesEither(limit, tool, action, path, mcp));
}

/** Limits and shadow rules count a resource read the way any spelling of its URI names it (McpCall.readAs). */
function matchesEither(m: CallMatcher, tool: string, action: string, path: string, mcp: McpCall | null): boolean {
  if (matchesCall(m, tool, action, path, mcp)) return true;
  if (mcp?.readAs === undefined) return false;
  for (const name of mcp.readAs) if (matchesCall(m, tool, action, path, mcp, name)) return true;
  return false;
}

/**
 * A rule or limit matches the call. One that names `mcp_method` or `mcp_tool`
 * matches only a JSON-RPC request (`mcp`), and `mcp_tool` only one that names a tool.
 */
export function matchesCall(m: CallMatcher, tool: string, action: string, path: string, mcp: McpCall | null = null, readAs?: string): boolean {
  if (m.action !== null && !equalsUpperCased(action, m.action)) return false;
  if (!matchesTool(m, tool) || !matchesPath(m, path)) return false;
  return !m.mcp || matchesMcp(m, mcp, readAs);
}

/** `readAs`: the tool is this spelling of the URI (one of McpCall.readAs), not the one sent. */
function matchesMcp(m: CallMatcher, mcp: McpCall | null, readAs: string | undefined): boolean {
  if (mcp === null) return false;
  if (m.mcpMethodGlob !== null && !matchGlob(m.mcpMethodGlob, mcp.method)) return false;
  const name = readAs ?? mcp.tool;
  if (m.mcpToolGlob === null) return true;
  if (name === null) return false;
  // A resource's URI: the glob as written, or with what a URL percent-encodes encoded (CallMatcher.mcpToolGlobEncoded).
  return matchGlob(m.mcpToolGlob, name) || (m.mcpToolGlobEncoded !== null && mcp.method === 'resources/read' && matchGlob(m.mcpToolGlobEncoded, name));
}

/**
 * The longest middle part searched with `indexOf`. V8's skips ahead by the last
 * 250 characters of what it seeks; past that it compares in time of the part's
 * length × the text's where they agree (100 uses of a 6,000-character part
 * against 16 KiB of `a` took 1.2 s). A longer part, which only a policy saved
 * before the bound on it can hold (MAX_MCP_SCANNED_PIECE_CHARS), is searched
 * by Knuth-Morris-Pratt instead: linear in the text (policy.test.ts).
 */
export const INDEXOF_MAX_PART_CHARS = 200;

/**
 * `text` matches the glob whose literal parts (split at `*`) are `parts`: the
 * first is a prefix, the last a suffix, and the middle ones occur in order
 * between them. Taking each middle part at its first occurrence is enough
 * (any later match could use it too), so this is one search per part: linear
 * in the text, where a backtracking RegExp of several `.*` is not.
 */
export function matchGlob(parts: readonly string[], text: string): boolean {
  if (parts.length === 1) return text === parts[0];
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  if (text.length < first.length + last.length || !text.startsWith(first) || !text.endsWith(last)) return false;
  let at = first.length;
  const end = text.length - last.length;
  for (let i = 1; i < parts.length - 1; i++) {
    const part = parts[i]!;
    const found = part.length <= INDEXOF_MAX_PART_CHARS ? text.indexOf(part, at) : linearIndexOf(text, parts, i, at);
    if (found < 0 || found + part.length > end) return false;
    at = found + part.length;
  }
  return true;
}

/** Each long part's KMP failure table, by the parts array holding it (each glob's is compiled once and shared). */
const failureTables = new WeakMap<readonly string[], Int32Array[]>();

/** `text.indexOf(parts[i], from)`, by Knuth-Morris-Pratt: at most 2 × text.length comparisons. */
function linearIndexOf(text: string, parts: readonly string[], i: number, from: number): number {
  const part = parts[i]!;
  let tables = failureTables.get(parts);
  if (tables === undefined) failureTables.set(parts, (tables = []));
  const fail = (tables[i] ??= failureTable(part));
  let k = 0;
  for (let j = from; j < text.length; j++) {
    const c = text.charCodeAt(j);
    while (k > 0 && c !== part.charCodeAt(k)) k = fail[k - 1]!;
    if (c === part.charCodeAt(k) && ++k === part.length) return j - k + 1;
  }
  return -1;
}

/** fail[q]: the length of the longest proper prefix of part[0..q] that is also its suffix. */
function failureTable(part: string): Int32Array {
  const fail = new Int32Array(part.length);
  let k = 0;
  for (let q = 1; q < part.length; q++) {
    const c = part.charCodeAt(q);
    while (k > 0 && c !== part.charCodeAt(k)) k = fail[k - 1]!;
    if (c === part.charCodeAt(k)) k++;
    fail[q] = k;
  }
  return fail;
}

function matchesTool(rule: CallMatcher, tool: string): boolean {
  switch (rule.toolMatch) {
    case ToolMatch.Any:
      return true;
    case ToolMatch.Exact:
      return tool.length === rule.toolText.length && equalsLowerCasedAt(tool, 0, rule.toolText);
    case ToolMatch.Suffix:
      return tool.length >= rule.toolText.length && equalsLowerCasedAt(tool, tool.length - rule.toolText.length, rule.toolText);
    default:
      return rule.toolRegExp!.test(tool);
  }
}

function matchesPath(rule: CallMatcher, path: string): boolean {
  switch (rule.pathMatch) {
    case PathMatch.Any:
      return true;
    case PathMatch.Exact:
      return path === rule.pathText;
    case PathMatch.Subtree:
      return path === rule.pathText || path.startsWith(rule.pathPrefix);
    default:
      return rule.pathRegExp!.test(path);
  }
}

/** `method` equals `upper` (an upper-case ASCII token) ignoring ASCII case. */
function equalsUpperCased(method: string, upper: string): boolean {
  if (method === upper) return true;
  if (method.length !== upper.length) return false;
  for (let i = 0; i < upper.length; i++) {
    let c = method.charCodeAt(i);
    if (c >= 0x61 && c <= 0x7a) c -= 0x20;
    if (c !== upper.charCodeAt(i)) return false;
  }
  return true;
}

/**
 * `text` from `start` equals `lower` (already lower-cased) ignoring case. ASCII is
 * folded in place; a non-ASCII code unit that differs is lower-cased through a
 * one-character string (rare: hostnames reach us as ASCII or punycode).
 */
function equalsLowerCasedAt(text: string, start: number, lower: string): boolean {
  for (let i = 0; i < lower.length; i++) {
    let c = text.charCodeAt(start + i);
    const expected = lower.charCodeAt(i);
    if (c === expected) continue;
    if (c >= 0x41 && c <= 0x5a) c += 0x20;
    else if (c > 0x7f) c = String.fromCharCode(c).toLowerCase().charCodeAt(0);
    if (c !== expected) return false;
  }
  return true;
}
