// The compiled form of an agent's YAML policy. `parsePolicy` builds it once per
// policy text; `evaluatePolicy` reads it on every proxied request, so everything a
// decision needs (matchers, the frozen answer) is computed at compile time.

export type PolicyVerdict = 'allow' | 'deny';

/** The answer for one call. Instances are frozen and shared: never mutate one. */
export interface PolicyDecision {
  readonly decision: PolicyVerdict;
  /** The matching rule's name, or 'default' when no rule matched (or no policy is set). */
  readonly ruleMatched: string;
  /** The rule's own `message`, else a sentence naming the rule and its decision. */
  readonly message: string;
}

/** How a rule's `tool` glob is matched against the tool name (a hostname), case-insensitively. */
export const ToolMatch = {
  /** `*`: every tool. */
  Any: 0,
  /** No `*`: `toolText` equals the tool. */
  Exact: 1,
  /** `*` then no further `*` (e.g. `*.github.com`): the tool ends with `toolText`. */
  Suffix: 2,
  /** Any other glob: `toolRegExp` (`*` matches any run of characters, dots included). */
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
  /** Any other glob: `pathRegExp` (`*` within one segment, `**` across segments). */
  Pattern: 3,
} as const;
export type PathMatch = (typeof PathMatch)[keyof typeof PathMatch];

/**
 * One rule, flattened so every rule object has the same shape (one hidden class,
 * monomorphic property access on the hot path) and matching needs no closure.
 */
export interface CompiledRule {
  /** The reported name: the rule's `name`, else `rule-<n>` (1-based position). */
  readonly name: string;
  /** Upper-cased HTTP method token, or null for `*` (any method). */
  readonly action: string | null;
  readonly toolMatch: ToolMatch;
  /** Lower-cased exact tool (Exact) or suffix (Suffix); '' otherwise. */
  readonly toolText: string;
  readonly toolRegExp: RegExp | null;
  readonly pathMatch: PathMatch;
  /** The exact path (Exact) or subtree root without the trailing slash (Subtree); '' otherwise. */
  readonly pathText: string;
  /** The subtree root with its trailing slash (Subtree); '' otherwise. */
  readonly pathPrefix: string;
  readonly pathRegExp: RegExp | null;
  /** The frozen answer returned when this rule matches. */
  readonly result: PolicyDecision;
}

export interface CompiledPolicy {
  readonly version: '1';
  readonly defaultDecision: PolicyVerdict;
  /** In document order; the first rule that matches decides. */
  readonly rules: readonly CompiledRule[];
  /** The frozen answer when no rule matches (ruleMatched 'default'). */
  readonly defaultResult: PolicyDecision;
}
