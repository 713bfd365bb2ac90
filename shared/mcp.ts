// Reading an MCP call's body: the JSON-RPC 2.0 requests it holds (MCP's
// Streamable HTTP transport posts one request, or a batch), as the policy's
// `mcp_method` / `mcp_tool` see them. Used only for policies that name them.
import { isUtf8 } from 'node:buffer';
import { longerThan } from './text.js';
import { evaluatePolicy, MCP_NAMES_MAX_CHARS, UNINSPECTABLE_RULE, type CompiledPolicy, type McpCall, type PolicyDecision } from './policy/index.js';

/** The most body the proxy reads to decide an MCP-aware policy (1 MiB); a larger one cannot be inspected. */
export const MCP_INSPECT_MAX_BYTES = 1024 * 1024;

/**
 * The most elements a batch the proxy inspects may have. A 1 MiB body holds
 * ~350,000 (`{}`), each decided by the policy: one call held a process's event
 * loop for a third of a second, longer under a large policy. MCP clients batch
 * a handful at most (the 2025-06-18 revision of the protocol dropped batches).
 */
export const MCP_BATCH_MAX = 1000;

/**
 * The most different requests (method and tool) of a batch the policy decides:
 * each is tried against every rule, and 1,000 against a 256 KiB policy of
 * 4,200 rules held the event loop 180 ms a call (100: ~30 ms). Equal requests
 * are decided once, so a batch may repeat one up to MCP_BATCH_MAX times.
 */
export const MCP_BATCH_DISTINCT_MAX = 100;

/**
 * The longest method and tool name (a prompt's or tool's name, a resource's URI
 * as sent) of a request the proxy inspects, as POST /policy/check takes them.
 * The audit keeps the inspected request's names whole (CONTRACT.md): without a
 * bound, 300 entries of a megabyte's name made one GET /audit page 300 MB, which
 * held the event loop 1.7 s and the process 2 GB more.
 */
export const MCP_METHOD_MAX_CHARS = 1024;
export const MCP_TOOL_MAX_CHARS = 8192;

/** What a request with a longer name is (the proxy refuses it as uninspectable_body). */
export const MCP_NAME_TOO_LONG = `a request whose method is longer than ${MCP_METHOD_MAX_CHARS.toLocaleString('en-US')} characters or whose tool name or URI is longer than ${MCP_TOOL_MAX_CHARS.toLocaleString('en-US')}`;

/**
 * The policy searches MCP names (a rule, limit or shadow rule has a glob such
 * as `*delete*`) and `calls` name more than it may search (MCP_NAMES_MAX_CHARS, or
 * less for a policy saved before the bounds: CompiledPolicy.mcpNamesMaxChars). The proxy then
 * refuses the body when an enforced rule or limit searches, and shows shadow
 * rules the call's head alone; check and replay decide alike (mcpRequestDecision).
 */
export function mcpNamesUnsearched(policy: CompiledPolicy, calls: readonly (McpCall | null)[]): boolean {
  return (policy.scansMcpNames || policy.shadowScansMcpNames) && mcpNamesTooLong(calls, policy.mcpNamesMaxChars);
}

/** One request (a check's, a recorded call's) decided as the proxy decides a body of it alone. */
export function mcpRequestDecision(policy: CompiledPolicy | null, tool: string, action: string, path: string, mcp: McpCall | null): PolicyDecision {
  if (policy?.usesMcp === true && mcp !== null && mcpNameTooLong(mcp.method, mcp.tool)) return MCP_NAME_TOO_LONG_DECISION;
  if (policy?.scansMcpNames === true && mcp !== null && mcpNamesTooLong([mcp], policy.mcpNamesMaxChars)) return uninspectableDecision(mcpNamesTooLongText(policy));
  return evaluatePolicy(policy, tool, action, path, mcp);
}

/** A request the proxy does not inspect for the length of a name (MCP_TOOL_MAX_CHARS), in characters as POST /policy/check counts them. */
function mcpNameTooLong(method: string, tool: string | null): boolean {
  return longerThan(method, MCP_METHOD_MAX_CHARS) || (tool !== null && longerThan(tool, MCP_TOOL_MAX_CHARS));
}

/** Why a call under a policy that decides on its body is refused (rule_matched uninspectable_body), `what` being the body. */
export function uninspectableMessage(what: string): string {
  return `The policy decides on the JSON-RPC body, and ${what} cannot be inspected.`;
}

/** The proxy's refusal of such a body, as check and replay report it. */
function uninspectableDecision(what: string): PolicyDecision {
  return Object.freeze({ decision: 'deny', ruleMatched: UNINSPECTABLE_RULE, message: uninspectableMessage(what), approvalTimeoutS: 0 });
}

/** The proxy's answer to a request with a name too long to inspect, under an enforced MCP rule or limit. */
const MCP_NAME_TOO_LONG_DECISION = uninspectableDecision(MCP_NAME_TOO_LONG);

/** `calls` name more than `max` characters: methods and tool names, every spelling of a resource's URI included. */
function mcpNamesTooLong(calls: readonly (McpCall | null)[], max: number): boolean {
  let chars = 0;
  for (const call of calls) {
    if (call === null) continue;
    chars += call.method.length + (call.tool?.length ?? 0);
    if (call.readAs !== undefined) for (const name of call.readAs) chars += name.length;
  }
  return chars > max;
}

/** What a body whose names are too long for `policy` to search is (the proxy refuses it as uninspectable_body). */
export function mcpNamesTooLongText(policy: CompiledPolicy): string {
  const max = policy.mcpNamesMaxChars;
  if (max === MCP_NAMES_MAX_CHARS) return `a body whose methods and tool names come to more than ${MCP_NAMES_MAX_CHARS / 1024} KiB`;
  return `a body whose methods and tool names come to more than ${max.toLocaleString('en-US')} characters (the bound of a policy saved before the MCP globs' bounds that exceeds them; set it again to lift it to ${MCP_NAMES_MAX_CHARS / 1024} KiB)`;
}

/** The methods whose request names a tool (a prompt's or tool's name, a resource's URI); any other has none. */
export const MCP_TOOL_METHODS: ReadonlySet<string> = new Set(['tools/call', 'prompts/get', 'resources/read']);

export interface JsonRpcBody {
  /** The body is a JSON array (a batch), even of one element. */
  batch: boolean;
  /** Each element: the request it is, or null when it is not a JSON-RPC request (a response, anything else). Empty: no body. */
  calls: (McpCall | null)[];
}

/**
 * The body's requests; 'not_json' when it is not JSON (or not UTF-8),
 * 'ambiguous' when servers could read it otherwise than this does (below),
 * 'too_many' past MCP_BATCH_MAX and 'too_long' when a name is (MCP_TOOL_MAX_CHARS):
 * the policy cannot inspect it.
 */
export function readJsonRpc(body: Buffer | null): JsonRpcBody | 'not_json' | 'ambiguous' | 'too_many' | 'too_long' {
  if (body === null || body.length === 0) return { batch: false, calls: [] };
  // isUtf8 is native and toString then cannot substitute U+FFFD: cheaper than a fatal TextDecoder.
  if (!isUtf8(body)) return 'not_json';
  const text = body.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return 'not_json';
  }
  if (Array.isArray(value) && value.length > MCP_BATCH_MAX) return 'too_many';
  if (ambiguousKeys(text)) return 'ambiguous';
  const calls = Array.isArray(value) ? value.map(requestOf) : [requestOf(value)];
  if (calls.some((call) => call === 'ambiguous')) return 'ambiguous';
  if (calls.some((call) => call === 'too_long')) return 'too_long';
  return { batch: Array.isArray(value), calls: calls as (McpCall | null)[] };
}

function requestOf(value: unknown): McpCall | null | 'ambiguous' | 'too_long' {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const message = value as { jsonrpc?: unknown; method?: unknown; params?: unknown };
  if (message.jsonrpc !== '2.0' || typeof message.method !== 'string') return null;
  const params = typeof message.params === 'object' && message.params !== null ? (message.params as { name?: unknown; uri?: unknown }) : {};
  const tool: unknown = MCP_TOOL_METHODS.has(message.method) ? (message.method === 'resources/read' ? params.uri : params.name) : null;
  // An empty method or tool name is kept by the audit as none (null), so a replay
  // could not decide it as the live call was: such a call is not inspected.
  if (message.method === '' || tool === '') return 'ambiguous';
  // Before a URI is parsed (twice, decoded): a megabyte's took that for nothing.
  if (mcpNameTooLong(message.method, typeof tool === 'string' ? tool : null)) return 'too_long';
  if (typeof tool !== 'string') return { method: message.method, tool: null };
  if (message.method !== 'resources/read') return { method: message.method, tool };
  return resourceReading(tool) ?? 'ambiguous';
}

/**
 * An MCP request as the policy reads it: a resources/read URI also as the
 * servers read it (McpCall.readAs) when that differs; null when the URI does not
 * parse (those servers refuse it; the proxy does not inspect it). Used alike by
 * the proxy, POST /policy/check and a replay of recorded calls.
 */
export function mcpCallReading(method: string, tool: string | null): McpCall | null {
  // A name too long to inspect is not read (the proxy refuses it before; a replay decides one recorded before the bound as such).
  if (method !== 'resources/read' || tool === null || mcpNameTooLong(method, tool)) return { method, tool };
  return resourceReading(tool);
}

/** A resources/read request of the URI `tool`, with readAs (mcpCallReading); null when it does not parse. */
function resourceReading(tool: string): McpCall | null {
  const method = 'resources/read';
  const normalised = resourceUri(tool);
  if (normalised === null) return null;
  const readAs: string[] = [];
  if (normalised !== tool) readAs.push(normalised);
  const decoded = decodedResourceUri(normalised);
  if (decoded !== null && decoded !== tool && decoded !== normalised) readAs.push(decoded);
  return readAs.length === 0 ? { method, tool } : { method, tool, readAs };
}

/**
 * A normalised resource URI with its percent-escapes decoded, then normalised
 * again: how a server that decodes the URI's path before it resolves it reads
 * it (a file server given `file:///public/..%2fsecrets/key` opens
 * `/secrets/key`; `%c3%a9` and `%C3%A9` are both `é`). A run of escapes that
 * is no UTF-8 stays as written. Null when nothing is escaped, or when the
 * decoded URI does not parse.
 */
export function decodedResourceUri(normalised: string): string | null {
  if (!normalised.includes('%')) return null;
  const decoded = normalised.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run;
    }
  });
  return resourceUri(decoded);
}

/**
 * A `resources/read` URI as the servers read it: the MCP SDKs look a resource up
 * by its WHATWG-normalised form (TypeScript `new URL(uri).toString()`, Python
 * pydantic's `AnyUrl`, the same rules), so `file:///public/../secrets/key`,
 * `FILE:///secrets/key` and ` file:///sec\trets/key` all read
 * `file:///secrets/key`. Null when it does not parse.
 */
export function resourceUri(raw: string): string | null {
  try {
    return new URL(raw).href;
  } catch {
    return null;
  }
}

/** The keys a decision reads: of a message, and of its params. */
const MESSAGE_KEYS: ReadonlySet<string> = new Set(['jsonrpc', 'method', 'params']);
const PARAMS_KEYS: ReadonlySet<string> = new Set(['name', 'uri']);

/** A key as Go's encoding/json matches it (case-insensitive, with U+017F ſ as s and U+212A Kelvin as k). */
function folded(key: string): string {
  return key.toLowerCase().replace(/\u017f/g, 's');
}

type Frame = { keys: Set<string> | null; role: 'batch' | 'message' | 'params' | 'other'; expectKey: boolean; lastKey: string };

/**
 * Whether JSON parsers could disagree on what the (valid) JSON `text` says:
 * an object that repeats a key (JSON.parse keeps the last; some parsers the
 * first), or a message or its params that spell a key the policy reads another
 * way ("Method", "NAME", "ſ" for s), which a case-insensitive decoder such as
 * Go's (the MCP Go SDK's, mcp-go's) reads as that key while JSON.parse does not
 * (CVE-2026-27896). Linear in the body; runs on valid JSON only.
 */
export function ambiguousKeys(text: string): boolean {
  const stack: Frame[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      // The string's end: the next quote not escaped, found with indexOf (a
      // 16 KiB argument is skipped at memchr's speed, not a character at a time).
      const start = i;
      i = stringEnd(text, i);
      const top = stack[stack.length - 1];
      if (top === undefined || top.keys === null || !top.expectKey) continue;
      const raw = text.slice(start + 1, i);
      const key = raw.includes('\\') ? (JSON.parse(text.slice(start, i + 1)) as string) : raw;
      if (top.keys.has(key)) return true;
      top.keys.add(key);
      top.lastKey = key;
      const known = top.role === 'message' ? MESSAGE_KEYS : top.role === 'params' ? PARAMS_KEYS : null;
      if (known !== null && !known.has(key) && known.has(folded(key))) return true;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      const parent = stack[stack.length - 1];
      const role = parent === undefined
        ? (c === 0x5b ? 'batch' : 'message')
        : parent.role === 'batch' && c === 0x7b
          ? 'message'
          : parent.role === 'message' && parent.lastKey === 'params' && c === 0x7b
            ? 'params'
            : 'other';
      stack.push({ keys: c === 0x7b ? new Set() : null, role, expectKey: true, lastKey: '' });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top !== undefined) top.expectKey = true;
    } else if (c === 0x3a /* : */) {
      stack[stack.length - 1]!.expectKey = false;
    }
  }
  return false;
}

/** The index of the quote that ends the string opened at `open`, in valid JSON: the next one not preceded by an odd run of backslashes. */
function stringEnd(text: string, open: number): number {
  let end = text.indexOf('"', open + 1);
  for (;;) {
    let backslashes = 0;
    while (text.charCodeAt(end - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return end;
    end = text.indexOf('"', end + 1);
  }
}
