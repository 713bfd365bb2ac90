// MCP through the guard, with the official TypeScript SDK as client and server
// (the server behind the proxy over HTTPS): a Streamable HTTP session end to
// end, with progress notifications arriving spaced out and every request audited
// under the session's id; and the older HTTP+SSE transport, whose endpoint
// event the proxy rewrites under the agent's /proxy/{key}/{host} prefix.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import t from 'tap';
import { eventually } from '../support/eventually.js';
import { api, createAgent, signup, startTestService, TLS_DIR } from '../support/service.js';

function mcpServer(): McpServer {
  const server = new McpServer({ name: 'guarded-tools', version: '1.0.0' });
  server.registerTool('ticks', { description: 'Three progress notifications 200 ms apart, then done.' }, async (extra) => {
    const token = extra._meta?.progressToken;
    for (let i = 1; i <= 3; i++) {
      await new Promise((r) => setTimeout(r, 200));
      if (token !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: 3 } });
    }
    return { content: [{ type: 'text', text: 'ticked' }] };
  });
  return server;
}

const streamable = new Map<string, StreamableHTTPServerTransport>();
const legacy = new Map<string, SSEServerTransport>();
const https: Server = createServer({ cert: readFileSync(`${TLS_DIR}server.crt`), key: readFileSync(`${TLS_DIR}server.key`) }, (req, res) => {
  const path = new URL(req.url!, 'https://x').pathname;
  void (async () => {
    if (path === '/mcp') {
      const id = req.headers['mcp-session-id'];
      let transport = typeof id === 'string' ? streamable.get(id) : undefined;
      if (transport === undefined) {
        transport = new StreamableHTTPServerTransport({ sessionIdGenerator: randomUUID, onsessioninitialized: (sid) => void streamable.set(sid, transport!) });
        await mcpServer().connect(transport);
      }
      await transport.handleRequest(req, res);
    } else if (path === '/sse') {
      const transport = new SSEServerTransport('/messages', res);
      legacy.set(transport.sessionId, transport);
      await mcpServer().connect(transport);
    } else if (path === '/messages') {
      const transport = legacy.get(new URL(req.url!, 'https://x').searchParams.get('sessionId') ?? '');
      if (transport === undefined) res.writeHead(404).end();
      else await transport.handlePostMessage(req, res);
    } else {
      res.writeHead(404).end();
    }
  })();
});
await new Promise<void>((resolve) => https.listen(0, '127.0.0.1', resolve));
const upstream = `127.0.0.1:${(https.address() as AddressInfo).port}`;

const service = await startTestService();
t.teardown(async () => {
  await service.close();
  https.closeAllConnections();
  await new Promise((resolve) => https.close(resolve));
});
const owner = await signup(service.url);
const agent = await createAgent(service.url, owner, 'mcp-agent', 'none');

t.test('Streamable HTTP: a session end to end, progress spaced out, each request audited under the session id', async (t) => {
  const client = new Client({ name: 'guard-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${service.url}/proxy/${agent.api_key}/${upstream}/mcp`));
  await client.connect(transport);
  const sessionId = transport.sessionId!;
  t.ok(sessionId, 'the server named a session');
  const tools = await client.listTools();
  t.strictSame(tools.tools.map((tool) => tool.name), ['ticks']);
  const arrivals: number[] = [];
  const started = performance.now();
  const result = await client.callTool({ name: 'ticks' }, undefined, { onprogress: () => void arrivals.push(performance.now() - started) });
  t.strictSame(result.content, [{ type: 'text', text: 'ticked' }]);
  t.equal(arrivals.length, 3, 'three progress notifications');
  t.ok(arrivals[0]! < arrivals[2]! - 250, `they arrived as sent, spaced out (${arrivals.map((a) => a.toFixed(0)).join(', ')} ms)`);
  await transport.terminateSession();
  await client.close();

  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${agent.id}&mcp_session_id=${sessionId}`)).json as any[];
    // The session's end (DELETE) is its last request: wait for it, not only for a count.
    return page.length >= 4 && page.some((r) => r.action === 'DELETE') ? page : undefined;
  });
  t.ok(rows.every((r) => r.mcp_session_id === sessionId), `${rows.length} requests of the session listed together`);
  t.ok(rows.some((r) => r.action === 'DELETE'), 'the session\'s end too');
  t.ok(rows.every((r) => r.status_code < 300), 'all answered');
});

t.test('the older HTTP+SSE transport works through the guard: its endpoint event is rewritten under the proxy prefix', async (t) => {
  const client = new Client({ name: 'guard-test-legacy', version: '1.0.0' });
  const transport = new SSEClientTransport(new URL(`${service.url}/proxy/${agent.api_key}/${upstream}/sse`));
  await client.connect(transport);
  const tools = await client.listTools();
  t.strictSame(tools.tools.map((tool) => tool.name), ['ticks'], 'messages POSTed to the rewritten endpoint reach the server');
  const result = await client.callTool({ name: 'ticks' });
  t.strictSame(result.content, [{ type: 'text', text: 'ticked' }]);
  await client.close();
  const posts = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${agent.id}&limit=1000`)).json as any[];
    const found = page.filter((r) => r.action === 'POST' && r.tool_url.includes('/messages?sessionId='));
    return found.length >= 3 ? found : undefined;
  });
  t.ok(posts.every((r) => r.status_code === 202), `${posts.length} messages POSTed through /proxy, each 202`);
});
