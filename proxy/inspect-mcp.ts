// Stage: for a policy that names mcp_method or mcp_tool (CONTRACT.md "MCP-aware
// rules"), read the request body (up to 1 MiB, into memory, then forwarded as
// read), find its JSON-RPC requests, and decide: a batch element by element,
// denied when any element is. A body that cannot be inspected is refused (fail
// closed), and so are Mcp-Method / Mcp-Name headers that disagree with it; one
// that needs approval holds the whole batch (hold.ts). When
// only shadow rules name MCP fields, nothing is refused for the body: it is read
// when it can be (identity, a known length up to 1 MiB, JSON) so that those
// rules can match. Any other policy decided in authorize.ts; nothing here.
import { MCP_BATCH_DISTINCT_MAX, MCP_BATCH_MAX, MCP_INSPECT_MAX_BYTES, MCP_NAME_TOO_LONG, mcpNamesTooLongText, mcpNamesUnsearched, readJsonRpc, uninspectableMessage } from '../shared/mcp.js';
import { evaluatePolicy, UNINSPECTABLE_RULE, type CompiledPolicy, type McpCall, type PolicyDecision } from '../shared/policy/index.js';
import { applyDecision, decideOnHead, recordShadow } from './authorize.js';
import type { ProxyExchange, Stage } from './exchange.js';


export function createInspectMcp(): Stage {
  return (ex) => {
    const policy = ex.policy;
    if (policy === null || !(policy.usesMcp || policy.shadowUsesMcp)) return undefined;
    // Only shadow rules name MCP fields: read the body when that is cheap and safe, never refuse for it.
    const enforcing = policy.usesMcp;
    const body = ex.body;
    if (body === null) return decide(ex, policy, null, enforcing);
    const encoding = ex.contentEncoding?.trim().toLowerCase();
    if (encoding !== undefined && encoding !== '' && encoding !== 'identity') {
      return notInspected(ex, policy, enforcing, `a body with Content-Encoding: ${ex.contentEncoding!.slice(0, 40)}`);
    }
    if (ex.contentType !== null && (ex.contentTypeRepeated || !readsAsUtf8(ex.contentType))) {
      // A charset the server decodes by (body-parser and the MCP SDK honour
      // utf-7): `+AGQ-elete_repo` is `delete_repo` to it, and no tool name to the policy.
      return notInspected(ex, policy, enforcing, ex.contentTypeRepeated ? 'a body with two Content-Types' : `a body in another charset than UTF-8 (Content-Type: ${ex.contentType.slice(0, 60)})`);
    }
    if (ex.contentLength > MCP_INSPECT_MAX_BYTES) return notInspected(ex, policy, enforcing, 'a body over 1 MiB');
    // A chunked body could outgrow the cap after part of it was read: only a rule that decides may refuse it.
    if (!enforcing && ex.contentLength < 0) return decideOnHead(ex, policy);
    return body.collect(MCP_INSPECT_MAX_BYTES).then((bytes) => {
      if (ex.finished) return false;
      return bytes === null ? uninspectable(ex, 'a body over 1 MiB') : decide(ex, policy, bytes, enforcing);
    });
  };
}

/**
 * Whether a Content-Type leaves the body UTF-8: no charset parameter (JSON's
 * only encoding), or charset utf-8, quoted or not, in any case. Two Content-Type
 * lines (joined with a comma) are not: servers differ on which one counts.
 */
export function readsAsUtf8(contentType: string): boolean {
  if (contentType.includes(',')) return false;
  const params = contentType.split(';');
  for (let i = 1; i < params.length; i++) {
    const param = params[i]!;
    const eq = param.indexOf('=');
    if (eq === -1 || param.slice(0, eq).trim().toLowerCase() !== 'charset') continue;
    const value = param.slice(eq + 1).trim().replace(/^"(.*)"$/, '$1').toLowerCase();
    if (value !== 'utf-8' && value !== 'utf8') return false;
  }
  return true;
}

// The refusals for the body, before the policy could decide, still record the
// shadow rule ("every shadow rule is tried"), on the head alone: one naming MCP
// fields cannot match a body that was not read, nor one the policy did not decide on.
/** Mcp-Method or Mcp-Name that the body (read, so audited by `call`: a batch's first element) contradicts: 400. */
function refuseHeaders(ex: ProxyExchange, call: McpCall | null, message: string): false {
  ex.mcpCall = call;
  recordShadow(ex, ex.policy, null);
  return ex.answerError('invalid_request', message);
}

/** A body that cannot be inspected: refused when a rule or limit decides on it (`enforcing`), else the call is decided on its head (shadow rules alone name MCP fields). */
function notInspected(ex: ProxyExchange, policy: CompiledPolicy, enforcing: boolean, what: string): undefined | false {
  return enforcing ? uninspectable(ex, what) : decideOnHead(ex, policy);
}

function uninspectable(ex: ProxyExchange, what: string): false {
  recordShadow(ex, ex.policy, null);
  ex.ruleMatched = UNINSPECTABLE_RULE;
  return ex.answerError('policy_denied', uninspectableMessage(what), { rule_matched: UNINSPECTABLE_RULE });
}

function decide(ex: ProxyExchange, policy: CompiledPolicy, bytes: Buffer | null, enforcing: boolean): undefined | false {
  const read = readJsonRpc(bytes);
  if (read === 'not_json') return notInspected(ex, policy, enforcing, 'a body that is not JSON');
  if (read === 'too_many') return notInspected(ex, policy, enforcing, `a batch of more than ${MCP_BATCH_MAX} requests`);
  if (read === 'too_long') return notInspected(ex, policy, enforcing, MCP_NAME_TOO_LONG);
  if (read === 'ambiguous') {
    return notInspected(ex, policy, enforcing, 'a body that servers could read differently (a key repeated or spelled another way, an empty method or tool name, a resource URI that does not parse)');
  }
  const { batch, calls } = read;
  // Globs that search names (`*delete*`) cost each name's length: past the
  // bound, the body cannot be inspected for them, and shadow rules see the head.
  let shadowSeesBody = true;
  if (mcpNamesUnsearched(policy, calls)) {
    if (policy.scansMcpNames) return uninspectable(ex, mcpNamesTooLongText(policy));
    shadowSeesBody = false;
  }

  const methodHeader = ex.mcpMethodHeader;
  const nameHeader = ex.mcpNameHeader;
  if (enforcing && (methodHeader !== null || nameHeader !== null)) {
    const call = calls[0] ?? null;
    if (batch) return refuseHeaders(ex, call, 'Mcp-Method and Mcp-Name describe one request; a batch body cannot carry them.');
    if (methodHeader !== null && methodHeader !== call?.method) {
      return refuseHeaders(ex, call, `The Mcp-Method header (${quoted(methodHeader)}) does not match the body's method (${quoted(call?.method ?? null)}).`);
    }
    if (nameHeader !== null && nameHeader !== call?.tool) {
      return refuseHeaders(ex, call, `The Mcp-Name header (${quoted(nameHeader)}) does not match the body's tool (${quoted(call?.tool ?? null)}).`);
    }
  }

  // Equal elements decide alike: each distinct request is decided once (and
  // the shadow rules, which ask whether any element matches, see each once), in
  // the order it first appears. The limits get every element: a batch of 1,000
  // `tools/call send_email` is 1,000 calls to a limit on `send_email`, however
  // its arguments differ (countMatchingCalls).
  const distinct = batch && calls.length > 1 ? distinctCalls(calls) : calls;
  if (distinct.length > MCP_BATCH_DISTINCT_MAX) {
    return notInspected(ex, policy, enforcing, `a batch of more than ${MCP_BATCH_DISTINCT_MAX} different requests`);
  }
  ex.mcpCalls = calls;
  if (distinct.length === 0) return decideOnHead(ex, policy);
  const tool = ex.target!.hostname;
  let decision: PolicyDecision | null = null;
  let chosen: McpCall | null = null;
  // A batch is denied when any element is, else held when any element needs
  // approval; its audit names its first denied element, else its first (CONTRACT.md).
  for (let i = 0; i < distinct.length; i++) {
    const call = distinct[i]!;
    const element = evaluatePolicy(policy, tool, ex.method, ex.policyPath, call);
    if (i === 0 || element.decision === 'deny' || (element.decision === 'approve' && decision!.decision === 'allow')) decision = element;
    if (i === 0 || element.decision === 'deny') chosen = call;
    if (element.decision === 'deny') break;
  }
  ex.mcpCall = chosen;
  return applyDecision(ex, policy, decision!, shadowSeesBody ? distinct : null);
}

function distinctCalls(calls: readonly (McpCall | null)[]): (McpCall | null)[] {
  const seen = new Set<string>();
  const out: (McpCall | null)[] = [];
  for (const call of calls) {
    // Length-prefixed: no method and tool can spell another pair's key (both may hold any character).
    const key = call === null ? '' : call.tool === null ? `m${call.method}` : `t${call.method.length}:${call.method}${call.tool}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(call);
  }
  return out;
}

function quoted(text: string | null): string {
  return text === null ? 'none' : `'${text.length > 80 ? `${text.slice(0, 80)}...` : text}'`;
}
