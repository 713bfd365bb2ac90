// An MCP-aware policy's read of a call's body (shared/mcp.ts): the 16 KiB
// tools/call of the bench's mcp-inspect scenario, JSON.parse alone beside it,
// and the scan for keys that parsers read differently (ambiguousKeys), which
// skips strings with indexOf: a character at a time it took ~48 µs here.
// `node dist/bench/micro/mcp-body.js`.
import { ambiguousKeys, readJsonRpc } from '../../shared/mcp.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

const TEXT = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'search_code', arguments: { query: 'x'.repeat(16 * 1024 - 100) } } });
const BODY = Buffer.from(TEXT);

export const measureMcpBody: MicroCases = () => [
  measure('readJsonRpc (16 KiB tools/call, the scan included)', () => readJsonRpc(BODY)),
  measure('JSON.parse of the same body', () => JSON.parse(TEXT)),
  measure('ambiguousKeys of the same body', () => ambiguousKeys(TEXT)),
];

runWhenMain(import.meta.url, measureMcpBody);
