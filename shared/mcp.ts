// Reading an MCP call's body: the JSON-RPC 2.0 requests it holds (MCP's
// Streamable HTTP transport posts one request, or a batch), as the policy's
// `mcp_method` / `mcp_tool` see them. Used only for policies that name them.
import { isUtf8 } from 'node:buffer';
import type { McpCall } from './policy/index.js';

/** The most body the proxy reads to decide an MCP-aware policy (1 MiB); a larger one cannot be inspected. */
export const MCP_INSPECT_MAX_BYTES = 1024 * 1024;

export interface JsonRpcBody {
  /** The body is a JSON array (a batch), even of one element. */
  batch: boolean;
  /** Each element: the request it is, or null when it is not a JSON-RPC request (a response, anything else). Empty: no body. */
  calls: (McpCall | null)[];
}

/** The body's requests; 'not_json' when it is not JSON (or not UTF-8), which the policy cannot inspect. */
export function readJsonRpc(body: Buffer | null): JsonRpcBody | 'not_json' {
  if (body === null || body.length === 0) return { batch: false, calls: [] };
  // isUtf8 is native and toString then cannot substitute U+FFFD: cheaper than a fatal TextDecoder.
  if (!isUtf8(body)) return 'not_json';
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return 'not_json';
  }
  if (Array.isArray(value)) return { batch: true, calls: value.map(requestOf) };
  return { batch: false, calls: [requestOf(value)] };
}

function requestOf(value: unknown): McpCall | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const message = value as { jsonrpc?: unknown; method?: unknown; params?: unknown };
  if (message.jsonrpc !== '2.0' || typeof message.method !== 'string') return null;
  const params = typeof message.params === 'object' && message.params !== null ? (message.params as { name?: unknown; uri?: unknown }) : {};
  let tool: unknown = null;
  if (message.method === 'tools/call' || message.method === 'prompts/get') tool = params.name;
  else if (message.method === 'resources/read') tool = params.uri;
  return { method: message.method, tool: typeof tool === 'string' ? tool : null };
}
