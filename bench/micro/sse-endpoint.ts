// The endpoint-event watch over an event stream through the proxy
// (proxy/sse-endpoint.ts): a chunk of whole events with no line ending in
// `endpoint` (an MCP answer, progress notifications; LF or CRLF) goes on after
// one native search; events split across chunks are read line by line; an
// endpoint event is rewritten. `node dist/bench/micro/sse-endpoint.js`.
import { SseEndpointRewriter } from '../../proxy/sse-endpoint.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

export const measureSseEndpoint: MicroCases = () => {
  const rewriter = new SseEndpointRewriter('https://tools.example.com/mcp/sse', '/proxy/agk_KEY/tools.example.com');
  const answer = Buffer.from('event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}\n\n');
  const crlf = Buffer.from('event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}\r\n\r\n');
  const progress = Buffer.from('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n'.repeat(100));
  const endpoint = Buffer.from('event: endpoint\ndata: /messages?sessionId=5f1c0e2a-2d4b-4a8e-9a43-5b7f0e6f2a11\n\n');
  const half = answer.length >> 1;
  const first = answer.subarray(0, half);
  const second = answer.subarray(half);
  return [
    measure('SSE chunk: one MCP answer event (whole, LF)', () => rewriter.feed(answer)),
    measure('SSE chunk: the same with CRLF', () => rewriter.feed(crlf)),
    measure('SSE chunk: the same split across two chunks (read line by line)', () => rewriter.feed(first).length + rewriter.feed(second).length),
    measure('SSE chunk: 100 progress events (9.8 KB)', () => rewriter.feed(progress)),
    measure('SSE chunk: an endpoint event, rewritten', () => rewriter.feed(endpoint)),
  ];
};

runWhenMain(import.meta.url, measureSseEndpoint);
