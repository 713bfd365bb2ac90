// MCP-aware rules read the request body; every other policy streams it
// untouched. The same 16 KiB JSON-RPC tools/call POST through two agents of one
// org: one under a policy with an mcp_tool rule (body read, parsed, matched),
// one under the plain bench policy.
import { LOAD_COLUMNS, loadVariant } from '../measure.js';
import { SINK_PATH } from '../routes.js';
import type { Scenario } from '../scenario.js';
import { POST_BODY_BYTES } from './post-16k.js';

/** A tools/call request padded to 16 KiB, as an agent's MCP client sends it. */
const envelope = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'search_code', arguments: { query: '' } } };
const MCP_BODY = JSON.stringify({ ...envelope, params: { ...envelope.params, arguments: { query: 'q'.repeat(POST_BODY_BYTES - JSON.stringify(envelope).length) } } });

export const mcpInspect: Scenario = {
  id: 'mcp-inspect',
  title: 'MCP-aware policy vs plain (POST 16 KiB JSON-RPC)',
  about: 'The same 16 KiB tools/call request through two agents: one whose policy names mcp_tool (the proxy reads and parses the body), one whose policy does not (the body streams untouched).',
  columns: LOAD_COLUMNS,
  headline: 'rps',
  subject: 'guard-mcp',
  variants: () => [
    loadVariant('guard-mcp', 'guard, MCP-aware policy (body read and matched)', 'guard', (ctx, target) => ({
      paths: [target.pathFor(SINK_PATH, ctx.keys.mcp)], method: 'POST', bodyBytes: MCP_BODY.length, jsonBody: MCP_BODY, expectStatus: 200,
    })),
    loadVariant('guard-plain', 'guard, policy without MCP fields (body streamed)', 'guard', (ctx, target) => ({
      paths: [target.pathFor(SINK_PATH, ctx.keys.none)], method: 'POST', bodyBytes: MCP_BODY.length, jsonBody: MCP_BODY, expectStatus: 200,
    })),
  ],
};
