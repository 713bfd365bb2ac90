// The compiled form of an agent's YAML policy. `parsePolicy` builds it once per
// policy text; `evaluatePolicy` reads it on every proxied request, so everything a
// decision needs (matchers, the frozen answer) is computed at compile time.

/** What the policy's default may say. */
export type PolicyVerdict = 'allow' | 'deny';
/** What a rule may say: `approve` holds the call until a person decides (CONTRACT.md "Held calls"). */
export type RuleVerdict = PolicyVerdict | 'approve';

/** `approval_timeout` of an `approve` rule: whole seconds, this range, this default. */
export const APPROVAL_TIMEOUT = { min: 10, max: 86_400, fallback: 3600 } as const;

/** The `limit` of the 429 an agent gets at APPROVAL_MAX_PENDING pending approvals; a policy's limit may not take the name. */
export const PENDING_APPROVALS_LIMIT = 'pending_approvals';

/** `rule_matched` of the proxy's own refusals, which no policy rule may be named (parse-policy.ts): a target it does not reach, a body it cannot inspect, a limit (`limit:<name>`). */
export const TARGET_FORBIDDEN_RULE = 'target_forbidden';
export const UNINSPECTABLE_RULE = 'uninspectable_body';
export const LIMIT_RULE_PREFIX = 'limit:';

/** One JSON-RPC 2.0 request of an MCP call's body: its method, and the tool (params.name of tools/call and prompts/get, params.uri of resources/read). */
export interface McpCall {
  readonly method: string;
  /** The tool as the request names it (`params.name`; `params.uri` as sent for resources/read). */
  readonly tool: string | null;
  /**
   * resources/read: the URI's other spellings as servers may read it, those that
   * differ from `tool` (shared/mcp.ts mcpCallReading): WHATWG-normalised, as the
   * MCP SDKs look a resource up, and with its percent-escapes decoded before
   * that, as a server that decodes the path (a file server) resolves it. The
   * policy decides on every spelling and the strictest decision stands; limits
   * and shadow rules match any.
   */
  readonly readAs?: readonly string[];
}

/** The answer for one call. Instances are frozen and shared: never mutate one. */
export interface PolicyDecision {
  readonly decision: RuleVerdict;
  /** The matching rule's name, or 'default' when no rule matched (or no policy is set). */
  readonly ruleMatched: string;
  /** The rule's own `message`, else a sentence naming the rule and its decision. */
  readonly message: string;
  /** An `approve` rule's approval_timeout in seconds; 0 for every other answer. */
  readonly approvalTimeoutS: number;
}

/** How a rule's `tool` glob is matched against the tool name (a hostname), case-insensitively. */
export const ToolMatch = {
  /** `*`: every tool. */
  Any: 0,
  /** No `*`: `toolText` equals the tool. */
  Exact: 1,
  /** `*` then no further `*` (e.g. `*.github.com`): the tool ends with `toolText`. */
  Suffix: 2,
  /** Any other glob: `toolRegExp` (`*` matches any run of characters, dots included; linear in the tool). */
  Pattern: 3,
} as const;
export type ToolMatch = (typeof ToolMatch)[keyof typeof ToolMatch];

/** How a rule's `path` glob is matched against the target path (case-sensitive). */
export const PathMatch = {
  /** No `path` key, or `*` / `**`: every path. */
  Any: 0,
  /** No `*`: `pathText` equals the path. */
  Exact: 1,
  /** `<base>/**` with no `*` in base: the path is `pathText` or starts with `pathPrefix` (`<base>/`). */
  Subtree: 2,
  /** Any other glob: `pathRegExp` (`*` within one segment, `**` across segments; linear-bounded in the path). */
  Pattern: 3,
} as const;
export type PathMatch = (typeof PathMatch)[keyof typeof PathMatch];

/**
 * A compiled glob: a RegExp where backtracking is bounded (one wildcard), else a
 * matcher whose time is linear in the text (a tool) or in text × glob (a path).
 * A backtracking RegExp of several wildcards took seconds on a 60-character tool
 * (`a*a*a*a*a*a*b`): any org could have stopped the process with one policy check.
 */
export interface TextTest {
  test(text: string): boolean;
}

/**
 * What a rule or a limit matches (tool, action, path), flattened so every such
 * object has the same fields (monomorphic property access on the hot path) and
 * matching needs no closure.
 */
export interface CallMatcher {
  /** Upper-cased HTTP method token, or null for `*` (any method). */
  readonly action: string | null;
  readonly toolMatch: ToolMatch;
  /** Lower-cased exact tool (Exact) or suffix (Suffix); '' otherwise. */
  readonly toolText: string;
  readonly toolRegExp: TextTest | null;
  readonly pathMatch: PathMatch;
  /** The exact path (Exact) or subtree root without the trailing slash (Subtree); '' otherwise. */
  readonly pathText: string;
  /** The subtree root with its trailing slash (Subtree); '' otherwise. */
  readonly pathPrefix: string;
  readonly pathRegExp: TextTest | null;
  /** The rule names `mcp_method` or `mcp_tool`: it matches only a JSON-RPC request. */
  readonly mcp: boolean;
  /**
   * `mcp_method` / `mcp_tool` globs split at their `*`s (case-sensitive, `*` any
   * run of characters); null: any. Matched without a RegExp: a tool name comes
   * from the body and a batch of them may be a megabyte (matchGlob is linear in it).
   */
  readonly mcpMethodGlob: readonly string[] | null;
  readonly mcpToolGlob: readonly string[] | null;
  /**
   * `mcp_tool` with the characters a URL percent-encodes written so (a space as
   * `%20`, non-ASCII as its UTF-8 escapes), as a resources/read URI reaches the
   * server; null when that changes nothing. A resource's URI matches either
   * form: `file:///Tax Returns/*` also names `file:///Tax%20Returns/2025.pdf`.
   */
  readonly mcpToolGlobEncoded: readonly string[] | null;
}

export interface CompiledRule extends CallMatcher {
  /** The reported name: the rule's `name`, else `rule-<n>` (1-based position). */
  readonly name: string;
  /** `mode: shadow`: never decides; the first that matches is reported (shadowRules). */
  readonly shadow: boolean;
  /** The frozen answer returned when this rule matches. */
  readonly result: PolicyDecision;
}

/** The units of a limit's `rate`, and the window each stands for. */
export const RATE_PERIODS = { second: 1_000, minute: 60_000, hour: 3_600_000, day: 86_400_000 } as const;
export type RatePeriod = keyof typeof RATE_PERIODS;

/**
 * One entry of the policy's `limits`: at most `quota` (= rate + burst) of the
 * agent's allowed calls that it matches in any window of `windowMs`.
 */
export interface CompiledLimit extends CallMatcher {
  readonly name: string;
  /** The rate as written, e.g. `5/minute`. */
  readonly rate: string;
  /** N of `N/period`. */
  readonly perWindow: number;
  readonly burst: number;
  /** perWindow + burst: what the limit admits at once from rest, and in any window. */
  readonly quota: number;
  readonly windowMs: number;
  /**
   * Identifies the counter across policy versions and processes: the name with
   * the rate and burst, so that changing either starts a fresh count.
   */
  readonly key: string;
  /** The `RateLimit-Policy` list member: `"<name>";q=<quota>;w=<seconds>`. */
  readonly policyHeader: string;
  /** The name as a structured-field string (`"<name>"`), for the `RateLimit` member. */
  readonly headerName: string;
}

/**
 * A large policy's enforced rules by the tool name a call spelled (evaluate-policy.ts,
 * rulesForTool): those whose tool glob matches it, in document order. The only
 * mutable part of a compiled policy, a cache of what the rules imply.
 */
export interface ToolIndex {
  readonly byTool: Map<string, readonly CompiledRule[]>;
  /** Rule references held in byTool's lists (a list that is the whole rule list counts none). */
  refs: number;
}

export interface CompiledPolicy {
  readonly version: '1';
  readonly defaultDecision: PolicyVerdict;
  /** The enforced rules in document order; the first that matches decides. */
  readonly rules: readonly CompiledRule[];
  /** Filled as calls arrive; only a policy of more than TOOL_INDEX_MIN_RULES rules uses it. */
  readonly toolIndex: ToolIndex;
  /** The `mode: shadow` rules in document order: the first that matches is reported, never decides. Empty: shadowing costs nothing. */
  readonly shadowRules: readonly CompiledRule[];
  /** The frozen answer when no rule matches (ruleMatched 'default'). */
  readonly defaultResult: PolicyDecision;
  /** In document order; empty when the policy has none (then limiting costs nothing). */
  readonly limits: readonly CompiledLimit[];
  /** An enforced rule or a limit names `mcp_method` or `mcp_tool`: the proxy reads the request body to decide, failing closed (else it streams it untouched). */
  readonly usesMcp: boolean;
  /** Only shadow rules name them: the body is read when it can be, for the audit, and never refuses a call. */
  readonly shadowUsesMcp: boolean;
  /**
   * An enforced rule or a limit has an MCP glob with text between two wildcards
   * (`*delete*`): matching it searches the whole method or tool name, so a body
   * whose names come to more than mcpNamesMaxChars cannot be inspected. (For a
   * stored policy past the bound on its MCP globs' characters, any MCP glob.)
   */
  readonly scansMcpNames: boolean;
  /** A shadow rule has one: over that bound, shadow rules see the call's head alone. */
  readonly shadowScansMcpNames: boolean;
  /**
   * The most characters of names a body may hold for those globs to search them:
   * MCP_NAMES_MAX_CHARS, or less for a policy saved before the MCP globs' bounds
   * that exceeds them (mcpNamesBound); Infinity when nothing searches.
   */
  readonly mcpNamesMaxChars: number;
}
