// Parses, validates and compiles an agent's YAML policy, once per policy text.
// Every refusal is a GuardError 'invalid_policy' whose message starts with where
// the problem is ("line 3: ..." or "rule 2 (line 7): ...") and says what it is.
//
// The accepted document (the contract's "Policy" section):
//   version: "1"              required; see VERSION below for the unquoted 1
//   default: allow | deny     optional, default allow
//   rules:                    required list, may be empty
//     - name: no-deletes      optional string; default rule-<n> (1-based position)
//       tool: "*.github.com"  required glob over the tool name (a hostname)
//       action: DELETE        required HTTP method token, any case, or "*"
//       path: /repos/*/**     optional glob over the target path (no query string)
//       decision: deny        required: allow | deny | approve (held until a person decides)
//       approval_timeout: 600 optional, approve rules only: whole seconds 10-86400 (default 3600)
//       message: ...          optional string, reported instead of the generated one
//       mode: shadow          optional: enforce (default) or shadow (reported, never decides)
//       mcp_method: tools/call  optional glob over a JSON-RPC request's method
//       mcp_tool: delete_*    optional glob over its tool (params.name, or params.uri)
//   limits:                   optional list of rate limits
//     - name: writes          required, unique, printable ASCII (it is sent in headers)
//       tool: "*.github.com"  required glob, as in rules
//       action: POST          optional, as in rules (default "*")
//       path: /repos/**       optional, as in rules
//       rate: 100/hour        required: N/second, N/minute, N/hour or N/day, N >= 1
//       burst: 10             optional whole number >= 0 (default 0)
//       mcp_method, mcp_tool  optional, as in rules
// Unknown keys are errors (a misspelt `decison` must not silently drop a rule).

import { LRUCache } from 'lru-cache';
import { isAlias, isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, visit } from 'yaml';
import type { Alias, Document, Node, Pair, YAMLMap } from 'yaml';
import { isIPv6 } from 'node:net';
import { domainToASCII } from 'node:url';
import { GuardError } from '../errors.js';
import { normalizePolicyPath, parseTarget, REFUSED_PATH_PARTS } from '../target.js';
import { PathMatch, ToolMatch } from './types.js';
import { APPROVAL_TIMEOUT, LIMIT_RULE_PREFIX, PENDING_APPROVALS_LIMIT, RATE_PERIODS, TARGET_FORBIDDEN_RULE, UNINSPECTABLE_RULE } from './types.js';
import type { CallMatcher, CompiledLimit, CompiledPolicy, CompiledRule, PolicyDecision, PolicyVerdict, RatePeriod, RuleVerdict, TextTest } from './types.js';
import { INDEXOF_MAX_PART_CHARS, matchGlob } from './evaluate-policy.js';

/** The largest policy text accepted, in UTF-8 bytes (256 KiB). Checked before parsing. */
export const MAX_POLICY_BYTES = 256 * 1024;
/** The most rules one policy may hold. */
export const MAX_POLICY_RULES = 10_000;
/**
 * The most YAML aliases (`*name`) one policy may use. Aliases let a policy reuse a
 * message or a rule, but each alias the yaml library resolves scans the anchors
 * before it, and nested aliases are how "billion laughs" bombs are built; a policy
 * needs few, so more are refused before anything is expanded.
 */
export const MAX_POLICY_ALIASES = 100;
/**
 * The yaml library's `maxAliasCount` while resolving aliases: it weighs each alias
 * by the aliases nested inside what it points at and throws past this bound. The
 * library itself shares one object per anchor, but anything that later walks the
 * result (a deep compare, JSON.stringify) would expand a nested bomb exponentially,
 * so such a document is refused here, after a few hundred steps.
 */
const MAX_ALIAS_EXPANSION = 100;

/**
 * Path globs of two or more wildcards are matched by pathGlobMatcher in time of
 * the path's length × the glob's: at most this many wildcards in one glob, and
 * at most this many characters of such globs in one policy (each use counted, an
 * alias's too). One glob of 120,000 wildcards held the event loop ~11 s a check;
 * at these bounds a whole policy's worst (8 KiB paths of the worst letters) is
 * tens of ms, about what 10,000 one-wildcard rules cost (bench/micro/evaluate-policy.ts).
 */
export const MAX_PATH_GLOB_WILDCARDS = 16;
export const MAX_PATTERN_PATH_CHARS = 16_384;
/**
 * MCP globs with text between two wildcards (`*delete*`, `a*b*c`) one policy
 * may use, each use counted (an alias's too): each searches the whole method or
 * tool name of every request of a call (MCP_NAMES_MAX_CHARS). A glob with a
 * wildcard at one end or none (`delete_*`) compares its ends only, at any count.
 */
export const MAX_MCP_SCANNING_GLOBS = 256;
/**
 * The longest text between two wildcards of an MCP glob: what matchGlob searches
 * with V8's indexOf (INDEXOF_MAX_PART_CHARS). A longer piece of a policy saved
 * before this bound is searched by a slower linear search.
 */
export const MAX_MCP_SCANNED_PIECE_CHARS = INDEXOF_MAX_PART_CHARS;
/**
 * The characters of MCP globs one policy may hold, each use counted: each is
 * compared with every name (three spellings of a resource's URI) of every
 * request, so YAML aliases of one long glob multiplied that work (100 of a
 * 250 KB prefix: 52 ms a call). Text alone cannot pass it, only aliases.
 */
export const MAX_MCP_GLOB_CHARS = MAX_POLICY_BYTES;

/**
 * The most characters of methods and tool names (each resource URI in each of
 * its spellings) a body may hold, all its requests together, when the policy
 * has an MCP glob that searches them (`*delete*`, CompiledPolicy.scansMcpNames).
 * Each such glob searches each name: a 256 KiB policy of 3,900 rules `*a<n>*`
 * against a tool name of 1 MiB of `a` held the event loop 28 s a call. With
 * at most MAX_MCP_SCANNING_GLOBS of them, of MAX_MCP_SCANNED_PIECE_CHARS each, a call's worst is tens of ms
 * (policy.test.ts, "MCP globs that search names").
 */
export const MCP_NAMES_MAX_CHARS = 16 * 1024;

/**
 * A policy saved before the MCP globs' bounds (2026-11-29) may exceed them: its
 * names bound shrinks to keep a call's work at what the bounds allow
 * (CompiledPolicy.mcpNamesMaxChars). 3,500 searching globs against names of
 * 16 KiB held the event loop 0.4 s a call; their bound is 1,198 characters.
 */
function mcpNamesBound(scanningGlobs: number, globLengths: readonly number[]): number {
  let bound = scanningGlobs === 0 ? Infinity : Math.min(MCP_NAMES_MAX_CHARS, Math.floor((MCP_NAMES_MAX_CHARS * MAX_MCP_SCANNING_GLOBS) / scanningGlobs));
  // A glob compares its ends with a name in at most the shorter one's length:
  // past the bound on their characters, names are held to the longest N whose
  // Σ min(glob length, N) stays within it.
  let chars = 0;
  for (const length of globLengths) chars += length;
  if (chars > MAX_MCP_GLOB_CHARS) {
    const sorted = [...globLengths].sort((a, b) => a - b);
    let shorter = 0; // Σ of the globs shorter than N
    for (let k = 0; k < sorted.length; k++) {
      const n = Math.floor((MAX_MCP_GLOB_CHARS - shorter) / (sorted.length - k));
      if (n <= sorted[k]!) {
        bound = Math.min(bound, n);
        break;
      }
      shorter += sorted[k]!;
    }
  }
  return bound;
}

export interface PolicyLimits {
  readonly maxBytes: number;
  readonly maxRules: number;
  readonly maxAliases: number;
  readonly maxPathGlobWildcards: number;
  readonly maxPatternPathChars: number;
  readonly maxMcpScanningGlobs: number;
  readonly maxMcpScannedPieceChars: number;
  readonly maxMcpGlobChars: number;
  /** Refuse a tool or path that can never match a call (a port, dot segments); off for stored policies. */
  readonly refuseUnmatchable: boolean;
}

/** What a policy being set, checked or replayed must keep to. */
export const POLICY_LIMITS: PolicyLimits = Object.freeze({
  maxBytes: MAX_POLICY_BYTES,
  maxRules: MAX_POLICY_RULES,
  maxAliases: MAX_POLICY_ALIASES,
  maxPathGlobWildcards: MAX_PATH_GLOB_WILDCARDS,
  maxPatternPathChars: MAX_PATTERN_PATH_CHARS,
  maxMcpScanningGlobs: MAX_MCP_SCANNING_GLOBS,
  maxMcpScannedPieceChars: MAX_MCP_SCANNED_PIECE_CHARS,
  maxMcpGlobChars: MAX_MCP_GLOB_CHARS,
  refuseUnmatchable: true,
});

/**
 * A policy read back from the store: one saved before the path-glob bounds
 * (2026-11-27) or the MCP globs' (2026-11-29) may exceed them, and it keeps
 * deciding as it did (refusing it would fail every call of its agent with 500)
 * until it is set again; past the MCP ones, on shorter names (mcpNamesBound).
 * Every other bound was checked when it was saved.
 */
export const STORED_POLICY_LIMITS: PolicyLimits = Object.freeze({
  ...POLICY_LIMITS,
  maxPathGlobWildcards: Infinity,
  maxPatternPathChars: Infinity,
  maxMcpScanningGlobs: Infinity,
  maxMcpScannedPieceChars: Infinity,
  maxMcpGlobChars: Infinity,
  refuseUnmatchable: false,
});

/** The most limits one policy may hold: every proxied call of the agent is tested against each. */
export const MAX_POLICY_LIMITS = 100;
/** The largest N of a rate and the largest burst: counts stay exact in 32-bit slots. */
const MAX_RATE_COUNT = 1_000_000_000;

/** rule_matched values the proxy writes itself (and LIMIT_RULE_PREFIX before a limit's name). */
const PROXY_RULE_NAMES: ReadonlySet<string> = new Set([TARGET_FORBIDDEN_RULE, UNINSPECTABLE_RULE]);

const TOP_LEVEL_KEYS = ['version', 'default', 'rules', 'limits'] as const;
const LIMIT_KEYS = ['name', 'tool', 'action', 'path', 'mcp_method', 'mcp_tool', 'rate', 'burst'] as const;
type LimitKey = (typeof LIMIT_KEYS)[number];
const RATE = /^([1-9][0-9]{0,9})\/(second|minute|hour|day)$/;
/** A limit's name goes into the RateLimit headers as a structured-field string: printable ASCII. */
const LIMIT_NAME = /^[\x20-\x7e]{1,100}$/;
const RULE_KEYS = ['name', 'tool', 'action', 'path', 'mcp_method', 'mcp_tool', 'decision', 'approval_timeout', 'message', 'mode'] as const;
type RuleKey = (typeof RULE_KEYS)[number];

/** RFC 9110 §9.1 / §5.6.2: a method is a token; `*` is excluded so it only means "any". */
const METHOD_TOKEN = /^[!#$%&'+.^_`|~0-9A-Za-z-]+$/;

/**
 * Policies compiled under POLICY_LIMITS or STORED_POLICY_LIMITS, by their text.
 * The yaml library parses ~1.5 MB/s here: a policy of 256 KiB held the event loop
 * 150–290 ms, and a proxy read each agent's policy again every CACHE_TTL_MS, the
 * admin's check, replay and PUT each time; in all-in-one all of it stalled the
 * proxied calls. A text seen again is now a lookup. The limits only refuse (a
 * policy that passes the strict bounds compiles the same under the stored ones),
 * so an entry compiled under POLICY_LIMITS answers both, and one compiled under
 * STORED_POLICY_LIMITS answers only that. A compiled policy is shared and frozen;
 * each caller gets it with a tool index of its own (withOwnToolIndex), the
 * bounded cache of lookups that evaluate-policy.ts fills per tool, so the memo's
 * copy never grows. Bounded by what the compiled policies weigh (compiledWeight):
 * about 32 MB that the proxy's policy cache does not hold already.
 */
const memo = new LRUCache<string, { policy: CompiledPolicy; strict: boolean; weight: number }>({
  maxSize: 32 * 1024 * 1024,
  sizeCalculation: (entry) => entry.weight,
});

/**
 * What the policy being compiled holds, in about bytes, at least: its text, each
 * rule and limit, and each distinct glob's compiled form once (compiling).
 * A test measures the heap of the worst shapes against it (policy.test.ts).
 * YAML aliases repeat a rule without its text: weighed by text, 250 policies of
 * one 20,000-character glob used 100 times held 400 MB; weighed by each use,
 * with each use compiled apart, the pieces of `mcp_tool` globs still held 4–11
 * times their weight.
 */
let compiledWeight = 0;
/** A policy's own objects and its memo entry (a policy of 17 rules held ~11 KB in all). */
const POLICY_WEIGHT = 4096;
/** A rule or limit's own objects: the frozen rule, its answer, its name and message (measured ~0.5 KB). */
const RULE_WEIGHT = 640;
/** A compiled glob's matcher and strings beside its text (measured ~0.1–0.4 KB)... */
const GLOB_WEIGHT = 256;
/** ...and beside that, a pattern's RegExp, closure or tokens (measured ~0.2–0.4 KB)... */
const PATTERN_WEIGHT = 256;
/** ...each character of a path pattern (a RegExp's code, once run, ~25 B a character)... */
const PATH_PATTERN_CHAR_WEIGHT = 32;
/** ...and each piece of a tool or MCP glob split at its wildcards: a string of up to 8 bytes and its slot (32 B; its characters are its text's). */
const PIECE_WEIGHT = 32;

/** `text`'s characters' bytes in V8's heap: one each, or two each once any is past U+00FF. */
function textWeight(text: string): number {
  return NOT_LATIN1.test(text) ? 2 * text.length : text.length;
}
const NOT_LATIN1 = /[^\u0000-\u00ff]/;

/**
 * The policy being compiled (parsing is synchronous: set at its start, emptied
 * at its end): its bounds, what is left of its budgets, and its globs compiled
 * so far. Each glob is compiled once: rules repeated by YAML aliases (or naming
 * one glob) share its compiled form, weighed once; its characters still count
 * against the budgets at each use, since each use is matched at each call.
 */
const compiling = {
  limits: POLICY_LIMITS,
  /** Characters left of path globs of two or more wildcards (maxPatternPathChars). */
  pathGlobChars: 0,
  /** MCP globs that search names so far (maxMcpScanningGlobs), each use counted. */
  mcpScanningGlobs: 0,
  /** Characters of MCP globs so far (maxMcpGlobChars), each use counted... */
  mcpGlobChars: 0,
  /** ...and each use's. */
  mcpGlobLengths: [] as number[],
  tools: new Map<string, ToolMatcher>(),
  paths: new Map<string, CompiledPathGlob>(),
  mcp: new Map<string, readonly string[] | null>(),
  start(limits: PolicyLimits): void {
    this.limits = limits;
    this.pathGlobChars = limits.maxPatternPathChars;
    this.mcpScanningGlobs = 0;
    this.mcpGlobChars = 0;
    this.mcpGlobLengths = [];
  },
  end(): void {
    this.mcpGlobLengths = [];
    this.tools.clear();
    this.paths.clear();
    this.mcp.clear();
  },
};

/** `policy` with an empty tool index of its own: the memo's copy never fills one, and agents do not share one. */
function withOwnToolIndex(policy: CompiledPolicy): CompiledPolicy {
  return Object.freeze({ ...policy, toolIndex: { byTool: new Map(), refs: 0 } });
}

/** The memo's weight of `text`'s compiled policy, if it holds one (for tests). */
export function memoWeightOf(text: string): number | undefined {
  return memo.get(text)?.weight;
}

/** Empties the memo (for tests that measure what its entries hold). */
export function forgetCompiledPolicies(): void {
  memo.clear();
}

/**
 * Parses, validates and compiles a policy. Throws GuardError('invalid_policy') with a
 * message naming the line (and rule number) and the problem. `limits` exists so tests
 * can reach one bound without tripping another; callers use the default. A text
 * compiled before under these limits (or stricter ones) is not compiled again.
 */
export function parsePolicy(yamlText: string, limits: PolicyLimits = POLICY_LIMITS): CompiledPolicy {
  if (limits !== POLICY_LIMITS && limits !== STORED_POLICY_LIMITS) return compiled(limits, () => compileDocument(yamlText, limits).policy);
  return knownPolicy(yamlText, limits) ?? memoize(yamlText, limits, () => compileDocument(yamlText, limits).policy);
}

/** The memo's compiled policy of `yamlText` under `limits` (POLICY_LIMITS or STORED_POLICY_LIMITS), if it holds one. */
export function knownPolicy(yamlText: string, limits: PolicyLimits): CompiledPolicy | undefined {
  const known = memo.get(yamlText);
  return known !== undefined && (known.strict || limits !== POLICY_LIMITS) ? withOwnToolIndex(known.policy) : undefined;
}

/**
 * Reads and validates a policy as parsePolicy does, without compiling what it
 * would keep: what a worker thread hands back (policy-reader.ts), so the yaml
 * library's parse (most of a large policy's cost) runs off the event loop.
 * Throws as parsePolicy throws, the same first problem.
 */
export function readPolicy(yamlText: string, limits: PolicyLimits): PolicyForm {
  return compiled(limits, () => compileDocument(yamlText, limits).form);
}

/** The policy `form` (readPolicy's, of `yamlText` under `limits`) compiled and kept in the memo, as parsePolicy would have. */
export function compileReadPolicy(yamlText: string, form: PolicyForm, limits: PolicyLimits): CompiledPolicy {
  return knownPolicy(yamlText, limits) ?? memoize(yamlText, limits, () => compileForm(form));
}

function memoize(yamlText: string, limits: PolicyLimits, compile: () => CompiledPolicy): CompiledPolicy {
  compiledWeight = POLICY_WEIGHT + textWeight(yamlText);
  const policy = compiled(limits, compile);
  memo.set(yamlText, { policy, strict: limits === POLICY_LIMITS, weight: compiledWeight });
  return withOwnToolIndex(policy);
}

function compiled<T>(limits: PolicyLimits, compile: () => T): T {
  compiling.start(limits);
  try {
    return compile();
  } finally {
    compiling.end();
  }
}

/**
 * A policy as read from its YAML, every value checked, before its globs are
 * compiled: plain data, so a worker can hand it over. Each place is where a
 * message names it ("rule 3 (line 9)").
 */
export interface PolicyForm {
  readonly version: '1';
  readonly defaultDecision: PolicyVerdict;
  readonly rules: readonly RuleForm[];
  readonly limits: readonly LimitForm[];
}

interface RuleForm {
  readonly n: number;
  readonly where: string;
  readonly fields: Partial<Record<RuleKey, string>> & { tool: string; action: string };
  readonly fieldWhere: Partial<Record<RuleKey, string>>;
  readonly decision: RuleVerdict;
  readonly approvalTimeout: { seconds: number; where: string } | undefined;
  readonly shadow: boolean;
}

interface LimitForm {
  readonly n: number;
  readonly where: string;
  readonly fields: Partial<Record<Exclude<LimitKey, 'burst'>, string>> & { name: string; tool: string; rate: string };
  readonly fieldWhere: Partial<Record<LimitKey, string>>;
  readonly burst: number;
}

/**
 * A PolicyForm to post to another thread: each field's text as its index in
 * `texts`, which holds each text once. Posting copies strings, so a 250 KB
 * message that 100 YAML aliases repeat would arrive as 25 MB, each rule its own
 * copy, and stay so in the compiled policy; as the YAML holds it, it is one string.
 */
export interface PackedPolicyForm {
  readonly texts: readonly string[];
  readonly form: Omit<PolicyForm, 'rules' | 'limits'> & {
    readonly rules: readonly (Omit<RuleForm, 'fields'> & { fields: Record<string, number> })[];
    readonly limits: readonly (Omit<LimitForm, 'fields'> & { fields: Record<string, number> })[];
  };
}

export function packPolicyForm(form: PolicyForm): PackedPolicyForm {
  const texts: string[] = [];
  const indexOf = new Map<string, number>();
  const pack = (fields: Readonly<Record<string, string | undefined>>): Record<string, number> => {
    const packed: Record<string, number> = {};
    for (const [key, text] of Object.entries(fields)) {
      if (text === undefined) continue;
      let index = indexOf.get(text);
      if (index === undefined) indexOf.set(text, (index = texts.push(text) - 1));
      packed[key] = index;
    }
    return packed;
  };
  return {
    texts,
    form: { ...form, rules: form.rules.map((rule) => ({ ...rule, fields: pack(rule.fields) })), limits: form.limits.map((limit) => ({ ...limit, fields: pack(limit.fields) })) },
  };
}

export function unpackPolicyForm({ texts, form }: PackedPolicyForm): PolicyForm {
  const unpack = <T>(fields: Record<string, number>): T => {
    const unpacked: Record<string, string> = {};
    for (const [key, index] of Object.entries(fields)) unpacked[key] = texts[index]!;
    return unpacked as T;
  };
  return {
    ...form,
    rules: form.rules.map((rule) => ({ ...rule, fields: unpack<RuleForm['fields']>(rule.fields) })),
    limits: form.limits.map((limit) => ({ ...limit, fields: unpack<LimitForm['fields']>(limit.fields) })),
  };
}

/** Compiles a read policy; it cannot fail where compileDocument did not, under the same limits. */
function compileForm(form: PolicyForm): CompiledPolicy {
  const ruleNames = new Map<string, number>();
  const limitNames = new Map<string, number>();
  return assemble(form, form.rules.map((rule) => compileRule(rule, ruleNames)), form.limits.map((limit) => compileLimit(limit, limitNames)));
}

/**
 * Reads, validates and compiles the document, each rule and limit compiled as
 * it is read (so the first problem in the text is the one named), and keeps
 * what it read.
 */
function compileDocument(yamlText: string, limits: PolicyLimits): { policy: CompiledPolicy; form: PolicyForm } {
  // A UTF-16 code unit is at least one UTF-8 byte, so a long string is refused
  // before its bytes are counted.
  if (yamlText.length > limits.maxBytes || Buffer.byteLength(yamlText, 'utf8') > limits.maxBytes) {
    fail(`the policy is larger than ${formatKiB(limits.maxBytes)} (${formatCount(limits.maxBytes)} bytes), the most allowed`);
  }

  // uniqueKeys is off because the yaml library checks it pairwise: a 190 KB mapping
  // of 20,000 keys took 1.7 s with it and 0.26 s without (yaml 2.9.1, Node 20). The
  // walk below refuses duplicate keys itself; every map it does not walk is refused
  // anyway (it sits under an unknown key or where a string belongs).
  const lines = new LineCounter();
  const doc = parseDocument(yamlText, { lineCounter: lines, prettyErrors: false, uniqueKeys: false, strict: true });
  const at = (node: { range?: readonly number[] | null | undefined } | null | undefined): number =>
    node?.range ? lines.linePos(node.range[0]!).line : 1;

  const syntaxError = doc.errors[0] ?? doc.warnings[0];
  if (syntaxError) {
    const { line, col } = lines.linePos(syntaxError.pos[0]);
    fail(`line ${line}, column ${col}: not valid YAML: ${describeYamlError(syntaxError.code, syntaxError.message)}`);
  }

  const aliasTargets = resolveAliases(doc, limits.maxAliases, at);

  const contents = doc.contents === null ? null : deref(doc.contents as Node, aliasTargets);
  if (contents === null || (isScalar(contents) && contents.value === null)) {
    fail(`line 1: the policy is empty; it must be a mapping with 'version' and 'rules'`);
  }
  if (!isMap(contents)) {
    fail(`line ${at(contents)}: the policy must be a mapping with 'version' and 'rules', not ${describeNode(contents)}`);
  }

  let version: '1' | undefined;
  let defaultDecision: PolicyVerdict = 'allow';
  let rules: CompiledRule[] | undefined;
  let compiledLimits: CompiledLimit[] = [];
  const ruleForms: RuleForm[] = [];
  const limitForms: LimitForm[] = [];
  const seenKeys = new Set<string>();

  for (const pair of (contents as YAMLMap).items) {
    const where = `line ${at(pair.key as Node)}`;
    const key = keyOf(pair, where);
    if (seenKeys.has(key)) fail(`${where}: the key ${quoted(key)} appears twice at the top level`);
    seenKeys.add(key);
    const value = pair.value as Node | null;
    switch (key) {
      case 'version':
        version = readVersion(value, aliasTargets, where);
        break;
      case 'default':
        defaultDecision = readVerdict(value, aliasTargets, where, 'default');
        break;
      case 'rules':
        rules = compileList(value, aliasTargets, at, where, RULES, (rule, n, ruleWhere, names) => {
          const form = readRule(rule, n, ruleWhere, aliasTargets, at);
          ruleForms.push(form);
          return compileRule(form, names);
        }, limits.maxRules);
        break;
      case 'limits':
        compiledLimits = compileList(value, aliasTargets, at, where, LIMITS, (limit, n, limitWhere, names) => {
          const form = readLimit(limit, n, limitWhere, aliasTargets, at);
          limitForms.push(form);
          return compileLimit(form, names);
        }, MAX_POLICY_LIMITS);
        break;
      default:
        fail(`${where}: unknown key ${quoted(key)} at the top level${suggest(key, TOP_LEVEL_KEYS)}; expected ${TOP_LEVEL_KEYS.join(', ')}`);
    }
  }
  const mapLine = `line ${at(contents)}`;
  if (version === undefined) fail(`${mapLine}: missing key 'version' (write version: "1")`);
  if (rules === undefined) fail(`${mapLine}: missing key 'rules' (a list; rules: [] for none)`);
  const form: PolicyForm = { version, defaultDecision, rules: ruleForms, limits: limitForms };
  return { policy: assemble(form, rules, compiledLimits), form };
}

/** The compiled policy of `form`'s rules and limits, compiled in this `compiling` pass. */
function assemble({ version, defaultDecision }: PolicyForm, rules: readonly CompiledRule[], compiledLimits: readonly CompiledLimit[]): CompiledPolicy {
  // Past the bound on their characters (only a stored policy), every MCP glob costs each name's length.
  const searches = compiling.mcpGlobChars > MAX_MCP_GLOB_CHARS ? (m: CallMatcher) => m.mcp : scansMcpNames;

  return Object.freeze({
    version,
    defaultDecision,
    rules: Object.freeze(rules.filter((rule) => !rule.shadow)),
    toolIndex: { byTool: new Map(), refs: 0 },
    shadowRules: Object.freeze(rules.filter((rule) => rule.shadow)),
    defaultResult: Object.freeze({
      decision: defaultDecision,
      ruleMatched: 'default',
      message: `No rule matched; the default is ${defaultDecision}.`,
      approvalTimeoutS: 0,
    }) satisfies PolicyDecision,
    limits: Object.freeze(compiledLimits),
    usesMcp: rules.some((rule) => rule.mcp && !rule.shadow) || compiledLimits.some((limit) => limit.mcp),
    shadowUsesMcp: rules.some((rule) => rule.mcp && rule.shadow),
    scansMcpNames: rules.some((rule) => searches(rule) && !rule.shadow) || compiledLimits.some(searches),
    shadowScansMcpNames: rules.some((rule) => searches(rule) && rule.shadow),
    mcpNamesMaxChars: mcpNamesBound(compiling.mcpScanningGlobs, compiling.mcpGlobLengths),
  });
}

/** What a list of rules or of limits is called in messages. */
interface ListSpec {
  noun: 'rule' | 'limit';
  /** The list's key and what is wrong when it is not a list: "'rules' must be a list of rules (rules: [] for none)". */
  notAList: string;
  /** The keys each entry must have, as the "a rule must be a mapping with ..." message names them. */
  shape: string;
}

const RULES: ListSpec = { noun: 'rule', notAList: "'rules' must be a list of rules (rules: [] for none)", shape: 'tool, action and decision' };
const LIMITS: ListSpec = { noun: 'limit', notAList: "'limits' must be a list of limits", shape: 'name, tool and rate' };

/**
 * The entries of `rules` or `limits` (at most `max`), each compiled by
 * `compileOne` with its 1-based position, where it is ("rule 3 (line 9)") and
 * the names taken so far.
 */
function compileList<T>(
  node: Node | null,
  aliasTargets: ReadonlyMap<Alias, Node>,
  at: (node: Node | null | undefined) => number,
  where: string,
  spec: ListSpec,
  compileOne: (entry: YAMLMap, n: number, entryWhere: string, positionByName: Map<string, number>) => T,
  max: number,
): T[] {
  const list = node === null ? null : deref(node, aliasTargets);
  if (!isSeq(list)) fail(`${where}: ${spec.notAList}, not ${describeNode(list)}`);
  if (list.items.length > max) {
    fail(`${where}: the policy has ${formatCount(list.items.length)} ${spec.noun}s; at most ${formatCount(max)} are allowed`);
  }
  const compiled: T[] = [];
  const positionByName = new Map<string, number>();
  list.items.forEach((item, index) => {
    const n = index + 1;
    const entryNode = item as Node | null;
    const entryWhere = `${spec.noun} ${n} (line ${at(entryNode ?? list)})`;
    const entry = entryNode === null ? null : deref(entryNode, aliasTargets);
    if (!isMap(entry)) fail(`${entryWhere}: a ${spec.noun} must be a mapping with ${spec.shape}, not ${describeNode(entry)}`);
    compiled.push(compileOne(entry, n, entryWhere, positionByName));
  });
  return compiled;
}

/** Calls `read` for each key of a rule or limit, refusing a repeated key and any key not in `keys`. */
function forEachKey(
  entry: YAMLMap,
  noun: ListSpec['noun'],
  n: number,
  at: (node: Node | null | undefined) => number,
  keys: readonly string[],
  read: (key: string, value: Node | null, keyWhere: string) => void,
): void {
  const seenKeys = new Set<string>();
  for (const pair of entry.items) {
    const keyWhere = `${noun} ${n} (line ${at(pair.key as Node)})`;
    const key = keyOf(pair, keyWhere);
    if (seenKeys.has(key)) fail(`${keyWhere}: the key ${quoted(key)} appears twice in this ${noun}`);
    seenKeys.add(key);
    if (!keys.includes(key)) fail(`${keyWhere}: unknown key ${quoted(key)}${suggest(key, keys)}; a ${noun} has ${keys.join(', ')}`);
    read(key, pair.value as Node | null, keyWhere);
  }
}

/** Names are unique within rules, and within limits. */
function claimName(positionByName: Map<string, number>, name: string, n: number, noun: ListSpec['noun'], where: string): void {
  const earlier = positionByName.get(name);
  if (earlier !== undefined) fail(`${where}: duplicate ${noun} name ${quoted(name)} (${noun} ${earlier} has it); ${noun} names must be unique`);
  positionByName.set(name, n);
}

/** The fields of a rule or limit that say which calls it matches (CallMatcher). `action` absent: any method. */
function compileMatcher(
  fields: { action?: string; tool: string; path?: string; mcp_method?: string; mcp_tool?: string },
  fieldWhere: Partial<Record<string, string>>,
  where: string,
): CallMatcher {
  const tool = toolGlobOf(fields.tool, fieldWhere.tool ?? where);
  const path = fields.path === undefined ? ANY_PATH : pathGlobOf(fields.path, fieldWhere.path ?? where);
  compiledWeight += RULE_WEIGHT;
  for (const key of ['mcp_method', 'mcp_tool'] as const) {
    const text = fields[key];
    if (text === undefined) continue;
    const keyWhere = fieldWhere[key] ?? where;
    compiling.mcpGlobLengths.push(text.length);
    compiling.mcpGlobChars += text.length;
    if (compiling.mcpGlobChars > compiling.limits.maxMcpGlobChars) {
      fail(`${keyWhere}: the policy's MCP globs come to more than ${formatCount(compiling.limits.maxMcpGlobChars)} characters, each use of a YAML alias counted (each is compared with every name of every request)`);
    }
    if (SCANNING_GLOB.test(text) && ++compiling.mcpScanningGlobs > compiling.limits.maxMcpScanningGlobs) {
      fail(`${keyWhere}: the policy may use at most ${formatCount(compiling.limits.maxMcpScanningGlobs)} MCP globs with text between two wildcards, such as "*delete*" (each searches every name of every request; "delete_*" compares its start only)`);
    }
  }
  return {
    action: fields.action === undefined ? null : compileAction(fields.action, fieldWhere.action ?? where),
    toolMatch: tool.match,
    toolText: tool.text,
    toolRegExp: tool.regExp,
    pathMatch: path.match,
    pathText: path.text,
    pathPrefix: path.prefix,
    pathRegExp: path.regExp,
    // `mcp_method` / `mcp_tool`: case-sensitive (JSON-RPC method names and MCP tool
    // names are), `*` any run of characters (slashes included); nothing else is special.
    mcp: fields.mcp_method !== undefined || fields.mcp_tool !== undefined,
    mcpMethodGlob: fields.mcp_method === undefined ? null : mcpGlobOf(fields.mcp_method, false, fieldWhere.mcp_method ?? where),
    mcpToolGlob: fields.mcp_tool === undefined ? null : mcpGlobOf(fields.mcp_tool, false, fieldWhere.mcp_tool ?? where),
    mcpToolGlobEncoded: fields.mcp_tool === undefined ? null : mcpGlobOf(fields.mcp_tool, true, fieldWhere.mcp_tool ?? where),
  };
}

function toolGlobOf(glob: string, where: string): ToolMatcher {
  let matcher = compiling.tools.get(glob);
  if (matcher === undefined) {
    matcher = compileToolGlob(glob, where);
    compiling.tools.set(glob, matcher);
    compiledWeight += GLOB_WEIGHT + 2 * textWeight(glob) + (matcher.match === ToolMatch.Pattern ? PATTERN_WEIGHT + PIECE_WEIGHT * glob.split('*').length : 0);
  }
  return matcher;
}

function pathGlobOf(glob: string, where: string): PathMatcher {
  let known = compiling.paths.get(glob);
  if (known === undefined) {
    known = compilePathGlob(glob, where);
    compiling.paths.set(glob, known);
    const chars = textWeight(known.compiled);
    compiledWeight += GLOB_WEIGHT + (known.matcher.match === PathMatch.Pattern ? PATTERN_WEIGHT + PATH_PATTERN_CHAR_WEIGHT * chars : 3 * chars);
  }
  compiling.pathGlobChars -= known.budgetChars;
  if (compiling.pathGlobChars < 0) {
    fail(`${where}: the policy's path globs of two or more wildcards come to more than ${formatCount(compiling.limits.maxPatternPathChars)} characters, the most allowed`);
  }
  return known.matcher;
}

/** A glob with text between two wildcards: matching it searches the name (matchGlob's middle parts). */
const SCANNING_GLOB = /\*[^*]+\*/;

/** The rule or limit has such an MCP glob. */
function scansMcpNames(m: CallMatcher): boolean {
  return (m.mcpMethodGlob?.length ?? 0) > 2 || (m.mcpToolGlob?.length ?? 0) > 2;
}

/**
 * An `mcp_method` or `mcp_tool` glob split at its wildcards (`mcp_tool: "*"`
 * still needs a tool: a request without one, tools/list, does not match it).
 * `encoded`: the glob as the URL parser writes a resource URI, or null when
 * that is the glob itself.
 */
function mcpGlobOf(text: string, encoded: boolean, where: string): readonly string[] | null {
  const key = encoded ? `%${text}` : `=${text}`;
  if (compiling.mcp.has(key)) return compiling.mcp.get(key)!;
  const glob = encoded ? encodeAsUrl(text) : text;
  const pieces = encoded && glob === text ? null : Object.freeze(glob.split(/\*+/));
  if (pieces !== null && pieces.slice(1, -1).some((piece) => piece.length > compiling.limits.maxMcpScannedPieceChars)) {
    fail(`${where}: an MCP glob may hold at most ${formatCount(compiling.limits.maxMcpScannedPieceChars)} characters between two wildcards${encoded ? ', as a resource URI percent-encodes them (é is 6)' : ''} (a longer text is searched in time of its length × the name's)`);
  }
  compiling.mcp.set(key, pieces);
  if (pieces !== null) compiledWeight += GLOB_WEIGHT + 2 * textWeight(glob) + PIECE_WEIGHT * pieces.length;
  return pieces;
}

/** What the WHATWG URL parser percent-encodes in a path, query or fragment: C0 controls, space, `"<>\`{}`, DEL and non-ASCII. */
const URL_ENCODES_ALL = /[\u0000-\u0020"<>`{}\u007f-\u{10ffff}]/gu;

/** `text` with those characters percent-encoded as the URL parser writes them (UTF-8, upper-case hex). */
function encodeAsUrl(text: string): string {
  return text.replace(URL_ENCODES_ALL, (c) => [...Buffer.from(c, 'utf8')].map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join(''));
}

function readLimit(
  limit: YAMLMap,
  n: number,
  where: string,
  aliasTargets: ReadonlyMap<Alias, Node>,
  at: (node: Node | null | undefined) => number,
): LimitForm {
  const fields: Partial<Record<Exclude<LimitKey, 'burst'>, string>> = {};
  const fieldWhere: Partial<Record<LimitKey, string>> = {};
  let burst = 0;
  forEachKey(limit, 'limit', n, at, LIMIT_KEYS, (key, value, keyWhere) => {
    if (key === 'burst') burst = readWholeNumber(value, aliasTargets, keyWhere, 'burst');
    else fields[key as Exclude<LimitKey, 'burst'>] = readString(value, aliasTargets, keyWhere, key);
    fieldWhere[key as LimitKey] = keyWhere;
  });
  if (fields.name === undefined) fail(`${where}: missing key 'name' (limits are reported by name)`);
  if (fields.tool === undefined) fail(`${where}: missing key 'tool' (a hostname glob such as "*" or "*.github.com")`);
  if (fields.rate === undefined) fail(`${where}: missing key 'rate' (such as 100/hour)`);
  return { n, where, fields: { ...fields, name: fields.name, tool: fields.tool, rate: fields.rate }, fieldWhere, burst };
}

function compileLimit({ n, where, fields, fieldWhere, burst }: LimitForm, positionByName: Map<string, number>): CompiledLimit {
  const name = fields.name;
  const nameWhere = fieldWhere.name ?? where;
  if (!LIMIT_NAME.test(name)) {
    fail(`${nameWhere}: a limit's name must be 1 to 100 printable ASCII characters (it is sent in the RateLimit headers), not ${quoted(name)}`);
  }
  if (name === PENDING_APPROVALS_LIMIT) {
    fail(`${nameWhere}: the limit name '${PENDING_APPROVALS_LIMIT}' is reserved for the bound on an agent's pending approvals; choose another`);
  }
  claimName(positionByName, name, n, 'limit', nameWhere);

  const rate = RATE.exec(fields.rate);
  const rateWhere = fieldWhere.rate ?? where;
  if (rate === null) {
    fail(`${rateWhere}: 'rate' must be N/second, N/minute, N/hour or N/day with N a whole number of at least 1, not ${quoted(fields.rate)}`);
  }
  const perWindow = Number(rate[1]);
  if (perWindow > MAX_RATE_COUNT) fail(`${rateWhere}: 'rate' allows at most ${formatCount(MAX_RATE_COUNT)} calls per period`);
  if (burst > MAX_RATE_COUNT) fail(`${fieldWhere.burst ?? where}: 'burst' must be at most ${formatCount(MAX_RATE_COUNT)}`);
  const windowMs = RATE_PERIODS[rate[2] as RatePeriod];

  const headerName = `"${name.replace(/[\\"]/g, '\\$&')}"`;
  const quota = perWindow + burst;
  return Object.freeze({
    name,
    ...compileMatcher(fields, fieldWhere, where),
    rate: fields.rate,
    perWindow,
    burst,
    quota,
    windowMs,
    key: `${name}\u0000${perWindow}/${windowMs}+${burst}`,
    policyHeader: `${headerName};q=${quota};w=${windowMs / 1000}`,
    headerName,
  });
}

function readRule(
  rule: YAMLMap,
  n: number,
  where: string,
  aliasTargets: ReadonlyMap<Alias, Node>,
  at: (node: Node | null | undefined) => number,
): RuleForm {
  const fields: Partial<Record<RuleKey, string>> = {};
  const fieldWhere: Partial<Record<RuleKey, string>> = {};
  let decision: RuleVerdict | undefined;
  let approvalTimeout: { seconds: number; where: string } | undefined;
  let shadow = false;
  forEachKey(rule, 'rule', n, at, RULE_KEYS, (key, value, keyWhere) => {
    if (key === 'decision') {
      decision = readVerdict(value, aliasTargets, keyWhere, 'decision', true);
    } else if (key === 'approval_timeout') {
      approvalTimeout = { seconds: readApprovalTimeout(value, aliasTargets, keyWhere), where: keyWhere };
    } else if (key === 'mode') {
      const mode = readString(value, aliasTargets, keyWhere, 'mode');
      if (mode !== 'enforce' && mode !== 'shadow') fail(`${keyWhere}: 'mode' must be enforce or shadow, not ${quoted(mode)}`);
      shadow = mode === 'shadow';
    } else {
      fields[key as RuleKey] = readString(value, aliasTargets, keyWhere, key);
      fieldWhere[key as RuleKey] = keyWhere;
    }
  });

  if (fields.tool === undefined) fail(`${where}: missing key 'tool' (a hostname glob such as "*" or "*.github.com")`);
  if (fields.action === undefined) fail(`${where}: missing key 'action' (an HTTP method such as DELETE, or "*")`);
  if (decision === undefined) fail(`${where}: missing key 'decision' (allow, deny or approve)`);
  if (approvalTimeout !== undefined && decision !== 'approve') {
    fail(`${approvalTimeout.where}: 'approval_timeout' applies only to a rule with decision: approve`);
  }
  return { n, where, fields: { ...fields, tool: fields.tool, action: fields.action }, fieldWhere, decision, approvalTimeout, shadow };
}

function compileRule({ n, where, fields, fieldWhere, decision, approvalTimeout, shadow }: RuleForm, positionByName: Map<string, number>): CompiledRule {
  const name = fields.name ?? `rule-${n}`;
  if (name === 'default') {
    fail(`${fieldWhere.name ?? where}: the rule name 'default' is reserved for "no rule matched"; choose another`);
  }
  // The proxy's own refusals are audited under these: a rule of that name would read as one.
  if (compiling.limits.refuseUnmatchable && (PROXY_RULE_NAMES.has(name) || name.startsWith(LIMIT_RULE_PREFIX))) {
    fail(`${fieldWhere.name ?? where}: the rule name ${quoted(name)} is reserved for the proxy's own refusals (${[...PROXY_RULE_NAMES].join(', ')}, ${LIMIT_RULE_PREFIX}<name>); choose another`);
  }
  claimName(positionByName, name, n, 'rule', fieldWhere.name ?? where);
  const verb = decision === 'allow' ? 'Allowed' : decision === 'deny' ? 'Denied' : 'Held for approval';

  return Object.freeze({
    name,
    shadow,
    ...compileMatcher(fields, fieldWhere, where),
    result: Object.freeze({
      decision,
      ruleMatched: name,
      message: fields.message ?? `${verb} by rule '${name}'.`,
      approvalTimeoutS: decision === 'approve' ? approvalTimeout?.seconds ?? APPROVAL_TIMEOUT.fallback : 0,
    }),
  });
}

// --- values ------------------------------------------------------------------

/**
 * The contract makes `version` the string "1". An unquoted `version: 1` is accepted
 * too: it is unambiguous and the commonest way to write it (compose files taught
 * everyone to). Any other number (1.0, 0x1, 2) or string is refused.
 */
function readVersion(node: Node | null, aliasTargets: ReadonlyMap<Alias, Node>, where: string): '1' {
  const value = node === null ? null : deref(node, aliasTargets);
  if (isScalar(value)) {
    if (value.value === '1') return '1';
    if (typeof value.value === 'number' && value.type === 'PLAIN' && value.source === '1') return '1';
    if (typeof value.value === 'string' || typeof value.value === 'number') {
      fail(`${where}: unsupported version ${quoted(value.source ?? String(value.value))}; the only version is "1"`);
    }
  }
  fail(`${where}: 'version' must be the string "1", not ${describeNode(value)}`);
}

function readVerdict(node: Node | null, aliasTargets: ReadonlyMap<Alias, Node>, where: string, field: string): PolicyVerdict;
function readVerdict(node: Node | null, aliasTargets: ReadonlyMap<Alias, Node>, where: string, field: string, orApprove: true): RuleVerdict;
function readVerdict(node: Node | null, aliasTargets: ReadonlyMap<Alias, Node>, where: string, field: string, orApprove = false): RuleVerdict {
  const value = node === null ? null : deref(node, aliasTargets);
  if (isScalar(value) && (value.value === 'allow' || value.value === 'deny' || (orApprove && value.value === 'approve'))) return value.value;
  const shown = isScalar(value) && (typeof value.value === 'string' || typeof value.value === 'number' || typeof value.value === 'boolean')
    ? quoted(String(value.value))
    : describeNode(value);
  const hint = !orApprove && isScalar(value) && value.value === 'approve' ? ' (approve is a rule\'s decision; the default cannot hold calls)' : '';
  fail(`${where}: '${field}' must be ${orApprove ? 'allow, deny or approve' : 'allow or deny'}, not ${shown}${hint}`);
}

/** `approval_timeout`: whole seconds within APPROVAL_TIMEOUT. */
function readApprovalTimeout(node: Node | null, aliasTargets: ReadonlyMap<Alias, Node>, where: string): number {
  const value = node === null ? null : deref(node, aliasTargets);
  const { min, max } = APPROVAL_TIMEOUT;
  if (isScalar(value) && typeof value.value === 'number' && Number.isSafeInteger(value.value) && value.value >= min && value.value <= max) return value.value;
  fail(`${where}: 'approval_timeout' must be a whole number of seconds from ${min} to ${max}, not ${describeNode(value)}`);
}

function readWholeNumber(node: Node | null, aliasTargets: ReadonlyMap<Alias, Node>, where: string, field: string): number {
  const value = node === null ? null : deref(node, aliasTargets);
  if (isScalar(value) && typeof value.value === 'number' && Number.isSafeInteger(value.value) && value.value >= 0) return value.value;
  fail(`${where}: '${field}' must be a whole number of at least 0, not ${describeNode(value)}`);
}

function readString(node: Node | null, aliasTargets: ReadonlyMap<Alias, Node>, where: string, field: string): string {
  const value = node === null ? null : deref(node, aliasTargets);
  if (isScalar(value) && typeof value.value === 'string') {
    if (value.value.length === 0) fail(`${where}: '${field}' must not be empty`);
    return flat(value.value);
  }
  const hint = isScalar(value) && (typeof value.value === 'number' || typeof value.value === 'boolean') ? ' (quote it to make it a string)' : '';
  fail(`${where}: '${field}' must be a string, not ${describeNode(value)}${hint}`);
}

/**
 * `text` as one flat string. The yaml library builds a double-quoted scalar a
 * character at a time, and V8 keeps such a string as the tree of its pieces, ~30
 * bytes a character: 800 messages of 220 characters held 7 MB of a compiled
 * policy weighed at 0.7 MB (policy.test.ts). A JSON round trip copies it flat, lone
 * surrogates included.
 */
function flat(text: string): string {
  return JSON.parse(JSON.stringify(text)) as string;
}

function keyOf(pair: Pair, where: string): string {
  const key = pair.key as Node | null;
  if (isScalar(key) && typeof key.value === 'string') return key.value;
  fail(`${where}: a key must be a plain string, not ${describeNode(key)}`);
}

// --- globs -------------------------------------------------------------------

interface ToolMatcher {
  match: ToolMatch;
  text: string;
  regExp: TextTest | null;
}

interface PathMatcher {
  match: PathMatch;
  text: string;
  prefix: string;
  regExp: TextTest | null;
}

const ANY_PATH: PathMatcher = { match: PathMatch.Any, text: '', prefix: '', regExp: null };

/** `*` or the upper-cased method token; evaluation compares case-insensitively. */
function compileAction(action: string, where: string): string | null {
  if (action === '*') return null;
  if (!METHOD_TOKEN.test(action)) {
    fail(`${where}: 'action' must be an HTTP method such as GET or DELETE, or "*", not ${quoted(action)}`);
  }
  return action.toUpperCase();
}

/** A character toLowerCase could change. */
const NOT_LOWER = /[A-Z\u0080-\uffff]/;

/**
 * Tool globs are case-insensitive (hostnames are, RFC 4343) and `*` matches any run
 * of characters, dots included: `*.github.com` matches api.github.com and
 * a.b.github.com but not github.com. No other character is special.
 */

function compileToolGlob(glob: string, where: string): ToolMatcher {
  if (glob.includes('://')) {
    fail(`${where}: 'tool' is a hostname glob such as api.github.com or "*.github.com", not a URL (${quoted(glob)})`);
  }
  const lower = toolText(glob, where);
  const firstStar = lower.indexOf('*');
  if (firstStar === -1) return { match: ToolMatch.Exact, text: lower, regExp: null };
  if (/^\*+$/.test(lower)) return { match: ToolMatch.Any, text: '', regExp: null };
  if (firstStar === 0) {
    const rest = lower.replace(/^\*+/, '');
    if (!rest.includes('*')) return { match: ToolMatch.Suffix, text: rest, regExp: null };
  }
  // Matched part by part (matchGlob: one indexOf each), not by a RegExp of several `.*`.
  const parts = lower.split(/\*+/);
  // Tools reach here lower-cased (canonicalHostname): the fold is done only for one that is not.
  return { match: ToolMatch.Pattern, text: '', regExp: { test: (tool) => matchGlob(parts, NOT_LOWER.test(tool) ? tool.toLowerCase() : tool) } };
}

/**
 * A tool as the proxy names a call's: the hostname, canonical (lower case, no
 * trailing dot, IPv4 shorthand and IPv6 written out as the proxy writes them,
 * an IDN as its A-label). Without that, `api.github.com.`, `[::1]` or `127.1`
 * was a rule that never matched (a deny failing open). A port, a path or a
 * bracket cannot match a hostname: refused, as is an exact tool that is no
 * host name; a stored policy keeps such a rule as written (it never matched).
 */
function toolText(glob: string, where: string): string {
  if (!glob.includes('*')) {
    const namesPort = glob.startsWith('[') ? glob.includes(']:') : !isIPv6(glob) && glob.includes(':');
    const target = namesPort || glob.includes('/')
      ? null
      : (parseTarget(`${isIPv6(glob) ? `[${glob}]` : glob}/`) ?? (IDN_CANDIDATE.test(glob) ? parseTarget(`${domainToASCII(glob) || glob}/`) : null));
    if (target !== null) return target.hostname;
    if (compiling.limits.refuseUnmatchable) {
      fail(namesPort
        ? `${where}: 'tool' is matched against the hostname alone: it cannot name a port (${quoted(glob)})`
        : `${where}: 'tool' must be a hostname, an IP address or a glob such as "*.github.com", not ${quoted(glob)}`);
    }
    return glob.toLowerCase();
  }
  // One ':' is a port (an IPv6 pattern has two or more).
  if (/[/[\]]/.test(glob) || glob.split(':').length === 2) {
    if (compiling.limits.refuseUnmatchable) fail(`${where}: 'tool' is matched against the hostname alone: no port, path or brackets (${quoted(glob)})`);
    return glob.toLowerCase();
  }
  // A trailing dot names the same host, and the proxy's tools have none; a
  // non-ASCII label is matched as its punycode A-label, as the proxy names it.
  const labels = glob.toLowerCase().replace(/\.+$/, '').split('.');
  for (let i = 0; i < labels.length; i++) {
    if (!/[^\x00-\x7f]/.test(labels[i]!)) continue;
    // Not through domainToASCII when it would rewrite the label ('?', '%41', a tab): refused below, never matched.
    let ascii = labels[i]!.includes('*') || !IDN_CANDIDATE.test(labels[i]!) ? '' : domainToASCII(labels[i]!);
    // A full-width '＊' comes out of it a '*': a wildcard nobody wrote.
    if (!/^[a-z0-9\-_]*$/.test(ascii)) ascii = '';
    if (ascii !== '') labels[i] = ascii;
    else if (compiling.limits.refuseUnmatchable) {
      fail(labels[i]!.includes('*')
        ? `${where}: 'tool' may not hold a non-ASCII label with a wildcard: write its punycode (xn--) form (${quoted(glob)})`
        : notAToolGlob(where, glob));
    }
  }
  const written = labels.join('.');
  // A character no hostname has (`{a,b}`, `?`, `%`, a space): the glob never matched a call.
  if (NOT_IN_TOOL_GLOB.test(written) && compiling.limits.refuseUnmatchable) {
    fail(notAToolGlob(where, glob));
  }
  return written;
}

function notAToolGlob(where: string, glob: string): string {
  return `${where}: 'tool' globs hold letters, digits, '-', '_', '.', ':' and '*' only (no braces, '?', '%' or spaces): ${quoted(glob)} matches no hostname`;
}

/**
 * A non-ASCII name to write as its A-label (domainToASCII). Not one holding
 * what a URL's host parser cuts at or rewrites: `a?.github.com` was read as the
 * host `a`, `ab%41.x` as `aba.x`, a tab dropped: a rule naming one host matched another.
 */
const IDN_CANDIDATE = /^(?=.*[^\x00-\x7f])[^?#/\\%@\s]+$/u;
const NOT_IN_TOOL_GLOB = /[^a-z0-9\-_.*:]/;

/** A path glob compiled: its matcher, the glob as compiled (normalized), and its characters that count against the policy's budget (MAX_PATTERN_PATH_CHARS). */
interface CompiledPathGlob {
  matcher: PathMatcher;
  compiled: string;
  budgetChars: number;
}

// Path globs are case-sensitive (RFC 3986 §6.2.2.1) and match the path without its
// query string. `*` matches within one segment (no `/`); `**` matches across
// segments: `/admin/**` matches /admin, /admin/ and everything below it (a deny on a
// subtree should cover its root), and `/a/**/b` matches /a/b and /a/x/y/b. A lone
// `*` or `**` matches every path.
function compilePathGlob(glob: string, where: string): CompiledPathGlob {
  if (glob[0] !== '/' && glob[0] !== '*') {
    fail(`${where}: 'path' must start with '/' (for example /repos/*/issues), not ${quoted(glob)}`);
  }
  if (glob.includes('?') || glob.includes('#')) {
    fail(`${where}: 'path' is matched against the path only, without a query string or fragment (${quoted(glob)})`);
  }
  if (/^\*+$/.test(glob)) return { matcher: ANY_PATH, compiled: glob, budgetChars: 0 };
  // As the proxy reads a call's path (normalizePolicyPath): escapes of
  // pchar characters but '*' and of '/' decoded, others upper-cased, characters a
  // client must escape escaped, runs of '/' collapsed. `/projects/acme%2Fapp/**`
  // or `/docs/my report.pdf` was a rule no call met.
  const normalized = normalizePolicyPath(glob, true);
  if (normalized === null) {
    if (compiling.limits.refuseUnmatchable) fail(`${where}: 'path' never matches a call: the proxy refuses paths with ${REFUSED_PATH_PARTS} (${quoted(glob)})`);
  } else {
    glob = normalized;
  }
  const firstStar = glob.indexOf('*');
  if (firstStar === -1) return { matcher: { match: PathMatch.Exact, text: glob, prefix: '', regExp: null }, compiled: glob, budgetChars: 0 };
  if (glob.endsWith('/**') && firstStar === glob.length - 2) {
    const base = glob.slice(0, -3);
    return { matcher: { match: PathMatch.Subtree, text: base, prefix: `${base}/`, regExp: null }, compiled: glob, budgetChars: 0 };
  }
  // One wildcard: a RegExp, whose backtracking is then bounded by the path's length. More: pathGlobMatcher.
  const wildcards = glob.match(/\*+/g)!.length;
  if (wildcards === 1) {
    // A RegExp of a very long glob is more than V8 compiles (~32,000 characters of
    // source): every call of the agent was a 500. Such a glob is matched by its two
    // ends, in time linear in the path.
    const regExp = glob.length > ONE_WILDCARD_REGEXP_MAX_CHARS ? oneWildcardMatcher(glob) : pathGlobToRegExp(glob);
    return { matcher: { match: PathMatch.Pattern, text: '', prefix: '', regExp }, compiled: glob, budgetChars: 0 };
  }
  if (wildcards > compiling.limits.maxPathGlobWildcards) fail(`${where}: 'path' may hold at most ${compiling.limits.maxPathGlobWildcards} wildcards (this one has ${formatCount(wildcards)})`);
  return { matcher: { match: PathMatch.Pattern, text: '', prefix: '', regExp: pathGlobMatcher(glob) }, compiled: glob, budgetChars: glob.length };
}

/** One-wildcard globs longer than this are matched by oneWildcardMatcher, not a RegExp. */
const ONE_WILDCARD_REGEXP_MAX_CHARS = 8192;
/** What `.` does not match in a RegExp without the `s` flag, as `**` (any, segments, subtree) compiles. */
const LINE_TERMINATOR = /[\n\r\u2028\u2029]/;

/**
 * A glob of one wildcard as pathGlobToRegExp matches it: the text before the
 * wildcard, the text after it, and what is between them (one way to split a
 * path, there being one variable part) as the wildcard's pattern takes it.
 */
export function oneWildcardMatcher(glob: string): TextTest {
  const tokens = pathTokens(glob);
  const at = tokens.findIndex((token) => token.kind !== 'text');
  const before = at > 0 ? (tokens[0] as { text: string }).text : '';
  const after = at < tokens.length - 1 ? (tokens[at + 1] as { text: string }).text : '';
  const kind = tokens[at]!.kind;
  return {
    test(path) {
      if (path.length < before.length + after.length || !path.startsWith(before) || !path.endsWith(after)) return false;
      const middle = path.slice(before.length, path.length - after.length);
      switch (kind) {
        case 'segment': // [^/]*
          return !middle.includes('/');
        case 'any': // .*
          return !LINE_TERMINATOR.test(middle);
        case 'segments': // (?:.*/)?
          return middle === '' || (middle.endsWith('/') && !LINE_TERMINATOR.test(middle));
        default: // subtree: (?:/.*)?
          return middle === '' || (middle.startsWith('/') && !LINE_TERMINATOR.test(middle));
      }
    },
  };
}

/** pathGlobMatcher's two rows, reused (it never runs re-entrantly). */
let rowA = new Uint8Array(256);
let rowB = new Uint8Array(256);

/** The pieces of a path glob: what pathGlobToRegExp and pathGlobMatcher both match. */
type PathToken =
  | { kind: 'text'; text: string }
  /** `*`: a run of characters without `/`. */
  | { kind: 'segment' }
  /** `**` within a segment: any run. */
  | { kind: 'any' }
  /** `**` between slashes, after the first (emitted): nothing, or any run ending with `/` (zero or more whole segments). */
  | { kind: 'segments' }
  /** A trailing `/**`: the end, or `/` and anything. */
  | { kind: 'subtree' };

function pathTokens(glob: string): PathToken[] {
  const tokens: PathToken[] = [];
  const text = (t: string) => {
    const last = tokens[tokens.length - 1];
    if (last?.kind === 'text') last.text += t;
    else tokens.push({ kind: 'text', text: t });
  };
  let i = 0;
  while (i < glob.length) {
    if (glob[i] !== '*') {
      // The run up to the next wildcard in one piece: appended a character at a time, a
      // 20,000-character run was a rope of 20,000 nodes (~640 KB) that matchers kept.
      const star = glob.indexOf('*', i);
      const end = star === -1 ? glob.length : star;
      text(glob.slice(i, end));
      i = end;
      continue;
    }
    let end = i;
    while (glob[end] === '*') end++;
    if (end - i === 1) {
      tokens.push({ kind: 'segment' });
    } else {
      const segmentStart = i > 0 && glob[i - 1] === '/';
      const segmentEnd = end === glob.length || glob[end] === '/';
      if (segmentStart && segmentEnd && end < glob.length) {
        tokens.push({ kind: 'segments' });
        end++;
      } else if (segmentStart && segmentEnd && tokens[tokens.length - 1]?.kind === 'text') {
        const last = tokens[tokens.length - 1] as { kind: 'text'; text: string };
        last.text = last.text.slice(0, -1); // the slash is the subtree's
        if (last.text === '') tokens.pop();
        tokens.push({ kind: 'subtree' });
      } else {
        // Within a segment, or a trailing `**` right after a `/**/` (whose slash it took): any run.
        tokens.push({ kind: 'any' });
      }
    }
    i = end;
  }
  return tokens;
}

/**
 * The glob as its RegExp would match it, by dynamic programming from the
 * end: whether tokens k.. match the path from i, one row of the path per token.
 * Time grows with path length × glob length, never exponentially.
 */
export function pathGlobMatcher(glob: string): TextTest {
  const tokens = pathTokens(glob);
  // Literal text before the first wildcard and after the last (not a trailing
  // `/**`, whose slash is optional): most paths a rule passes over fail these.
  const prefix = glob.slice(0, glob.indexOf('*'));
  const suffix = tokens[tokens.length - 1]!.kind === 'subtree' ? '' : glob.slice(glob.lastIndexOf('*') + 1);
  return {
    test(path) {
      if (!path.startsWith(prefix) || !path.endsWith(suffix)) return false;
      const n = path.length;
      if (rowA.length <= n) {
        rowA = new Uint8Array(n + 1);
        rowB = new Uint8Array(n + 1);
      }
      let next = rowA;
      let row = rowB;
      next.fill(0, 0, n);
      next[n] = 1; // past the last token: only the path's end
      for (let k = tokens.length - 1; k >= 0; k--) {
        const token = tokens[k]!;
        switch (token.kind) {
          case 'text':
            for (let i = 0; i <= n; i++) row[i] = next[i + token.text.length] === 1 && path.startsWith(token.text, i) ? 1 : 0;
            break;
          case 'segment':
            row[n] = next[n]!;
            for (let i = n - 1; i >= 0; i--) row[i] = next[i] === 1 || (path.charCodeAt(i) !== 0x2f && row[i + 1] === 1) ? 1 : 0;
            break;
          case 'any':
            row[n] = next[n]!;
            for (let i = n - 1; i >= 0; i--) row[i] = next[i] === 1 || row[i + 1] === 1 ? 1 : 0;
            break;
          case 'segments': {
            row[n] = next[n]!;
            let later = 0; // some '/' at j >= i with next[j + 1]
            for (let i = n - 1; i >= 0; i--) {
              if (path.charCodeAt(i) === 0x2f && next[i + 1] === 1) later = 1;
              row[i] = next[i] === 1 || later === 1 ? 1 : 0;
            }
            break;
          }
          case 'subtree':
            for (let i = 0; i <= n; i++) row[i] = i === n || path.charCodeAt(i) === 0x2f ? 1 : 0;
            break;
        }
        // No position left from which the rest matches: the path cannot match.
        // (The rows may be longer than this path: a 1 past n is a longer path's.)
        const first = row.indexOf(1);
        if (first === -1 || first > n) return false;
        [next, row] = [row, next];
      }
      return next[0] === 1;
    },
  };
}

/** The glob as one RegExp, from the same pieces (used for a glob of one wildcard, where backtracking is bounded). */
export function pathGlobToRegExp(glob: string): RegExp {
  const source = pathTokens(glob).map((token) => (token.kind === 'text' ? escapeRegExp(token.text) : WILDCARD_SOURCE[token.kind])).join('');
  return new RegExp(`^${source}$`);
}

const WILDCARD_SOURCE: Readonly<Record<Exclude<PathToken['kind'], 'text'>, string>> = {
  segment: '[^/]*',
  any: '.*',
  segments: '(?:.*/)?',
  subtree: '(?:/.*)?',
};

// '/' is left as it is: `new RegExp` needs no escape for it.
function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// --- aliases -----------------------------------------------------------------

/**
 * Maps every alias to the node it names (the last anchor of that name before it,
 * YAML 1.2 §3.2.2.2) in one document-order pass, refusing undefined anchors and
 * more than `maxAliases` aliases; then lets the yaml library resolve the document
 * with `maxAliasCount`, which refuses nested alias bombs.
 */
function resolveAliases(doc: Document, maxAliases: number, at: (node: Node | null | undefined) => number): ReadonlyMap<Alias, Node> {
  const anchors = new Map<string, Node>();
  const targets = new Map<Alias, Node>();
  let firstAlias: Alias | undefined;
  visit(doc, {
    Node(_key, node) {
      if (isAlias(node)) {
        firstAlias ??= node;
        const target = anchors.get(node.source);
        if (target === undefined) {
          fail(`line ${at(node)}: '*${node.source}' is read as a YAML alias, but no anchor '&${node.source}' comes before it; a value starting with * must be quoted, e.g. "*${node.source}"`);
        }
        if (targets.size >= maxAliases) {
          fail(`line ${at(node)}: the policy uses more than ${maxAliases} YAML aliases; alias bombs are refused, so write the values out`);
        }
        targets.set(node, target);
      } else if (!isPair(node) && node.anchor) {
        anchors.set(node.anchor, node);
      }
    },
  });
  if (firstAlias !== undefined) {
    try {
      doc.toJS({ maxAliasCount: MAX_ALIAS_EXPANSION });
    } catch (err) {
      if (err instanceof ReferenceError) {
        fail(`line ${at(firstAlias)}: the YAML aliases expand too much (an alias bomb); refused`);
      }
      throw err;
    }
  }
  return targets;
}

function deref(node: Node, aliasTargets: ReadonlyMap<Alias, Node>): Node {
  // A chain of aliases cannot loop: each names an anchor defined before it.
  let current = node;
  while (isAlias(current)) current = aliasTargets.get(current)!;
  return current;
}

// --- messages ----------------------------------------------------------------

function describeNode(node: Node | null | undefined): string {
  if (node === null || node === undefined) return 'an empty value';
  if (isAlias(node)) return 'an alias';
  if (isMap(node)) return 'a mapping';
  if (isSeq(node)) return 'a list';
  if (isScalar(node)) {
    const value = node.value;
    if (value === null) return 'an empty value';
    if (typeof value === 'string') return `the string ${quoted(value)}`;
    if (typeof value === 'number' || typeof value === 'bigint') return `the number ${String(value)}`;
    if (typeof value === 'boolean') return `the boolean ${String(value)}`;
  }
  return 'an unsupported YAML value';
}

function describeYamlError(code: string, message: string): string {
  switch (code) {
    case 'BAD_ALIAS':
      return `${message} (a bare * starts a YAML alias; quote it: "*")`;
    case 'MULTIPLE_DOCS':
      return 'the policy must be a single YAML document (found a second "---")';
    default:
      // The yaml library catches its own stack overflow on deep nesting.
      return message.includes('call stack') ? 'the YAML is nested too deeply' : message;
  }
}

/** " (did you mean 'decision'?)" when a known key is within two edits of `key`. */
function suggest(key: string, known: readonly string[]): string {
  let best: string | undefined;
  let bestDistance = 3;
  for (const candidate of known) {
    const distance = editDistance(key.toLowerCase(), candidate);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best === undefined ? '' : ` (did you mean '${best}'?)`;
}

function editDistance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 2) return 3;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1);
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, substitution);
    }
    previous = current;
  }
  return previous[b.length]!;
}

/** A value from the policy, quoted for a message and cut short: messages echo user text. */
function quoted(text: string): string {
  return text.length > 80 ? `'${text.slice(0, 80)}...'` : `'${text}'`;
}

function formatCount(n: number): string {
  return n.toLocaleString('en-US');
}

function formatKiB(bytes: number): string {
  return `${bytes / 1024} KiB`;
}

function fail(message: string): never {
  throw new GuardError('invalid_policy', message);
}
