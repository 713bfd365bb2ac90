// MCP through the guard, with the official TypeScript SDK as client and server
// (the server behind the proxy over HTTPS): a Streamable HTTP session end to
// end, with progress notifications arriving spaced out and every request audited
// under the session's id; and the older HTTP+SSE transport, whose endpoint
// event the proxy rewrites under the agent's /proxy/{key}/{host} prefix; and
// MCP-aware rules and limits (mcp_method, mcp_tool) against the same server and
// an echoing upstream: batches, fail-closed bodies, header checks, streaming.
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
import t, { type Test } from 'tap';
import { auditRecord } from '../support/audit-records.js';
import { eventually } from '../support/eventually.js';
import { rawRequest } from '../support/raw-http.js';
import { api, createAgent, signup, startTestService, TLS_DIR } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';
import { gzipSync } from 'node:zlib';
import pdfParse from 'pdf-parse/lib/pdf-parse.js';

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
  server.registerTool('list_repos', { description: 'Lists repositories.' }, async () => ({ content: [{ type: 'text', text: 'a, b' }] }));
  server.registerTool('delete_repo', { description: 'Deletes a repository.' }, async () => ({ content: [{ type: 'text', text: 'deleted' }] }));
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
const ownerOrg = (await service.store.findUserByEmail(owner.email))!.orgId;
const agent = await createAgent(service.url, owner, 'mcp-agent', 'none');

t.test('Streamable HTTP: a session end to end, progress spaced out, each request audited under the session id', async (t) => {
  const client = new Client({ name: 'guard-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${service.url}/proxy/${agent.api_key}/${upstream}/mcp`));
  await client.connect(transport);
  const sessionId = transport.sessionId!;
  t.ok(sessionId, 'the server named a session');
  const tools = await client.listTools();
  t.strictSame(tools.tools.map((tool) => tool.name), ['ticks', 'list_repos', 'delete_repo']);
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
  t.strictSame(tools.tools.map((tool) => tool.name), ['ticks', 'list_repos', 'delete_repo'], 'messages POSTed to the rewritten endpoint reach the server');
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

const MCP_POLICY = `version: "1"
default: deny
rules:
  - name: session
    tool: "*"
    action: "*"
    mcp_method: "notifications/*"
    decision: allow
  - name: handshake
    tool: "*"
    action: "*"
    mcp_method: initialize
    decision: allow
  - name: list-tools
    tool: "*"
    action: POST
    mcp_method: tools/list
    decision: allow
  - name: no-destructive
    tool: "*"
    action: POST
    mcp_method: tools/call
    mcp_tool: "delete_*"
    decision: deny
    message: Destructive tools need a person.
  - name: try-no-ticks
    tool: "*"
    action: POST
    mcp_tool: ticks
    decision: deny
    mode: shadow
  - name: tools
    tool: "*"
    action: POST
    mcp_method: tools/call
    decision: allow
  - name: stream-and-end
    tool: "*"
    action: "*"
    decision: allow
limits:
  - name: ticks
    tool: "*"
    mcp_tool: ticks
    rate: 2/minute
`;

t.test('MCP-aware rules through the SDK: read tools pass, a destructive one is denied and audited by name, SSE keeps streaming', async (t) => {
  const mcpAgent = await createAgent(service.url, owner, 'mcp-aware', 'none');
  const set = await api(service.url, owner, 'POST', `/agents/${mcpAgent.id}/policy`, { rules_yaml: MCP_POLICY });
  t.equal(set.status, 200, set.text);
  const client = new Client({ name: 'guard-test-aware', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${service.url}/proxy/${mcpAgent.api_key}/${upstream}/mcp`));
  await client.connect(transport);
  t.equal((await client.listTools()).tools.length, 3, 'tools/list allowed');
  t.strictSame((await client.callTool({ name: 'list_repos' })).content, [{ type: 'text', text: 'a, b' }], 'a read tool allowed');
  const denied = await client.callTool({ name: 'delete_repo' }).then(() => null, (err: Error) => err);
  t.match(denied?.message ?? '', /403|Destructive tools need a person/, 'the destructive tool is refused before the server sees it');
  const arrivals: number[] = [];
  const started = performance.now();
  await client.callTool({ name: 'ticks' }, undefined, { onprogress: () => void arrivals.push(performance.now() - started) });
  t.ok(arrivals.length === 3 && arrivals[0]! < arrivals[2]! - 250, `the SSE response kept streaming (${arrivals.map((a) => a.toFixed(0)).join(', ')} ms)`);
  await transport.terminateSession().catch(() => {});
  await client.close();

  const deniedRows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${mcpAgent.id}&mcp_tool=delete_repo`)).json as any[];
    return page.length >= 1 ? page : undefined;
  });
  t.match(deniedRows[0], { decision: 'denied', status_code: 403, rule_matched: 'no-destructive', mcp_method: 'tools/call', mcp_tool: 'delete_repo' });
  // The streamed call (ticks) is recorded when its stream ends: wait for all three.
  const calls = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${mcpAgent.id}&mcp_method=tools/call`)).json as any[];
    return page.length >= 3 ? page : undefined;
  });
  t.strictSame(calls.map((r) => r.mcp_tool).sort(), ['delete_repo', 'list_repos', 'ticks'], 'filtered by method: the three calls');
  const ticks = calls.find((r) => r.mcp_tool === 'ticks');
  t.match(ticks, { decision: 'allowed', rule_matched: 'tools', shadow_rule: 'try-no-ticks', shadow_decision: 'deny' }, 'the shadow rule matched on the MCP tool and decided nothing');
  const listed = (await api(service.url, owner, 'GET', `/audit?agent_id=${mcpAgent.id}&mcp_method=tools/list`)).json as any[];
  t.match(listed, [{ mcp_method: 'tools/list', mcp_tool: null, rule_matched: 'list-tools' }]);

  const pdf = await fetch(`${service.url}/audit/export/pdf?days=1`, { headers: owner.auth });
  const text = (await pdfParse(Buffer.from(await pdf.arrayBuffer()))).text.replace(/\s+/g, ' ');
  t.match(text, '127.0.0.1 · delete_repo', "the PDF's top tools are split by MCP tool");
});

t.test('MCP-aware rules on raw bodies: batches, fail-closed bodies, header checks, limits, bytes forwarded as sent', async (t) => {
  const echo = await startUpstream();
  t.teardown(() => echo.close());
  const mcpAgent = await createAgent(service.url, owner, 'mcp-raw', 'none');
  await api(service.url, owner, 'POST', `/agents/${mcpAgent.id}/policy`, { rules_yaml: MCP_POLICY });
  const plain = await createAgent(service.url, owner, 'mcp-plain', 'none');
  await api(service.url, owner, 'POST', `/agents/${plain.id}/policy`, { rules_yaml: 'version: "1"\nrules: []\n' });
  const send = async (body: string | Buffer | ReadableStream, headers: Record<string, string> = {}, key = mcpAgent.api_key) => {
    const payload = Buffer.isBuffer(body) ? new Uint8Array(body) : body;
    const res = await fetch(`${service.url}/proxy/${key}/${echo.authority}/echo`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: payload, duplex: 'half' } as RequestInit);
    const text = await res.text();
    return { status: res.status, json: (() => { try { return JSON.parse(text); } catch { return null; } })() };
  };
  const rpc = (method: string, params?: object, id: number | null = 1) => ({ jsonrpc: '2.0', ...(id === null ? {} : { id }), method, ...(params ? { params } : {}) });

  const single = await send(JSON.stringify(rpc('tools/call', { name: 'list_repos' })));
  t.equal(single.status, 200, 'an allowed request is forwarded');
  const batchOk = await send(JSON.stringify([rpc('tools/list'), rpc('tools/call', { name: 'list_repos' }, 2)]));
  t.equal(batchOk.status, 200, 'a batch of allowed requests is forwarded');
  const batchDenied = await send(JSON.stringify([rpc('tools/list'), rpc('tools/call', { name: 'delete_repo' }, 2), rpc('tools/call', { name: 'delete_all' }, 3)]));
  t.match(batchDenied, { status: 403, json: { error: 'policy_denied', rule_matched: 'no-destructive' } }, 'one denied element denies the batch');
  // Equal elements are decided once: the one denied element after 999 repeats still denies.
  const repeated = await send(JSON.stringify([...Array.from({ length: 999 }, () => rpc('tools/call', { name: 'list_repos' })), rpc('tools/call', { name: 'delete_repo' }, 2)]));
  t.match(repeated, { status: 403, json: { error: 'policy_denied', rule_matched: 'no-destructive' } }, 'a batch of 1,000: its last, denied element denies it');
  // One body may not make the policy decide a third of a million elements.
  const started = performance.now();
  const flood = await send(`[${Array.from({ length: 300_000 }, () => '{}').join(',')}]`);
  t.match(flood, { status: 403, json: { error: 'policy_denied', rule_matched: 'uninspectable_body' } }, 'a batch of more than 1,000 requests is not inspected: refused');
  t.match(flood.json.message, /more than 1000 requests/);
  t.ok(performance.now() - started < 2000, 'and answered without deciding each element');
  // Each different request is tried against every rule: at most 100 are decided.
  const different = (n: number) => send(JSON.stringify(Array.from({ length: n }, (_, i) => rpc('tools/call', { name: `list_${i}` }, i))));
  t.equal((await different(100)).status, 200, '100 different requests are decided');
  const many = await different(101);
  t.match(many, { status: 403, json: { error: 'policy_denied', rule_matched: 'uninspectable_body', message: /more than 100 different requests/ } }, '101 are not inspected: refused');
  const nested = await send(JSON.stringify(rpc('tools/call', { name: 'list_repos', arguments: { name: 'a', Name: 'b' } })));
  t.equal(nested.status, 200, 'keys that differ in case inside the arguments are the tool\'s business: forwarded');
  const notRpc = await send(JSON.stringify({ hello: 'world' }));
  t.equal(notRpc.status, 200, 'JSON that is not JSON-RPC: no MCP rule matches it, the last rule (no MCP fields) allows it');

  for (const [what, body, headers] of [
    ['gzip', gzipSync(JSON.stringify(rpc('tools/list'))), { 'content-encoding': 'gzip' }],
    ['not JSON', 'tools/list please', {}],
    ['invalid UTF-8', Buffer.from([0x7b, 0xff, 0x7d]), {}],
    ['over 1 MiB', JSON.stringify(rpc('tools/call', { name: 'list_repos', arguments: { pad: 'x'.repeat(1024 * 1024) } })), {}],
    // What a case-insensitive decoder (Go's encoding/json: the MCP Go SDK, mcp-go) or a first-key-wins parser reads otherwise than JSON.parse.
    ['a message key spelled another way', '{"JSONRPC":"2.0","id":1,"method":"tools/call","params":{"name":"delete_repo"}}', {}],
    ['a params key spelled another way', '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_repos","Name":"delete_repo"}}', {}],
    ['a long s for s', '{"jsonrpc":"2.0","id":1,"method":"tools/call","param\u017f":{"name":"delete_repo"},"params":{"name":"list_repos"}}', {}],
    ['a repeated key', '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_repo","name":"list_repos"}}', {}],
    ['a repeated key, escaped', '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_repo","n\\u0061me":"list_repos"}}', {}],
    ['an empty tool name (the audit keeps it as none)', JSON.stringify(rpc('tools/call', { name: '' })), {}],
    // body-parser and the MCP SDK decode by the charset: `+AGQ-elete_repo` is delete_repo to them, list-like to a UTF-8 reader.
    ['a UTF-7 body', '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"+AGQ-elete_repo"}}', { 'content-type': 'application/json; charset=utf-7' }],
    ['a UTF-7 body, the charset quoted', '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"+AGQ-elete_repo"}}', { 'content-type': 'application/json;Charset="UTF-7"' }],
    ['two Content-Types', JSON.stringify(rpc('tools/list')), { 'content-type': 'application/json, text/plain; charset=utf-7' }],
    ['over 1 MiB, chunked', new ReadableStream({
      start(controller) {
        for (let i = 0; i < 18; i++) controller.enqueue(new TextEncoder().encode('x'.repeat(64 * 1024)));
        controller.close();
      },
    }), {}],
  ] as const) {
    const res = await send(body as string | Buffer, headers as Record<string, string>);
    t.match(res, { status: 403, json: { error: 'policy_denied', rule_matched: 'uninspectable_body' } }, `${what}: cannot be inspected, refused`);
  }
  for (const contentType of ['application/json; charset=utf-8', 'application/json; charset="UTF-8"', 'application/json;charset=utf8']) {
    t.equal((await send(JSON.stringify(rpc('tools/list')), { 'content-type': contentType })).status, 200, `${contentType}: inspected and allowed`);
  }
  const seenBefore = echo.seen.length;
  for (const [what, body, headers] of [
    ['Mcp-Method differs', rpc('tools/call', { name: 'list_repos' }), { 'mcp-method': 'tools/list' }],
    ['Mcp-Name differs', rpc('tools/call', { name: 'delete_repo' }), { 'mcp-method': 'tools/call', 'mcp-name': 'list_repos' }],
    ['Mcp-Name on a request without a tool', rpc('tools/list'), { 'mcp-name': 'list_repos' }],
    ['headers on a batch', [rpc('tools/list')], { 'mcp-method': 'tools/list' }],
  ] as const) {
    const res = await send(JSON.stringify(body), headers as Record<string, string>);
    t.match(res, { status: 400, json: { error: 'invalid_request' } }, what);
  }
  // Two Mcp-Name lines (fetch would join them; uWS hands each over): the field is both, which is no tool.
  const twice = JSON.stringify(rpc('tools/call', { name: 'list_repos' }));
  const raw = await rawRequest(Number(new URL(service.url).port), [
    `POST /proxy/${mcpAgent.api_key}/${echo.authority}/echo HTTP/1.1`, 'Host: 127.0.0.1', 'Content-Type: application/json',
    'Mcp-Method: tools/call', 'Mcp-Name: delete_repo', 'Mcp-Name: list_repos', `Content-Length: ${Buffer.byteLength(twice)}`, 'Connection: close', '', twice,
  ].join('\r\n'));
  t.match(raw.text, /^HTTP\/1\.1 400 /, 'a repeated Mcp-Name is checked whole, not by its last line');
  t.match(raw.text, /delete_repo, list_repos/);
  t.equal(echo.seen.length, seenBefore, 'none of the refused calls reached the upstream');
  await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${mcpAgent.id}&mcp_tool=delete_repo&decision=denied`)).json as any[];
    return page.some((e) => e.status_code === 400 && e.mcp_method === 'tools/call') ? true : undefined;
  }, 5000);
  t.pass('a call refused for headers its body contradicts is audited with the body\'s method and tool');
  t.equal((await send(JSON.stringify(rpc('tools/call', { name: 'list_repos' })), { 'mcp-method': 'tools/call', 'mcp-name': 'list_repos' })).status, 200, 'matching headers pass');

  // A 100 KiB request (streamed in, read whole, forwarded) arrives byte for byte.
  const big = Buffer.from(JSON.stringify(rpc('tools/call', { name: 'list_repos', arguments: { pad: 'é'.repeat(50_000) } })));
  const forwarded = await send(big);
  t.equal(forwarded.status, 200);
  t.equal(forwarded.json.body_sha256, (await import('node:crypto')).createHash('sha256').update(big).digest('hex'), 'the inspected body was forwarded unchanged');
  t.equal(forwarded.json.body_bytes, big.length);

  // Limits match on MCP tools: 2 ticks a minute, other tools free.
  const tick = () => send(JSON.stringify(rpc('tools/call', { name: 'ticks' })));
  // A batch counts each request a limit matches, equal ones too (the rules decide each distinct request once):
  // three ticks never fit a limit of 2, whatever their arguments.
  const threeTicks = await send(JSON.stringify([1, 2, 3].map((i) => rpc('tools/call', { name: 'ticks', arguments: { n: i } }, i))));
  t.match(threeTicks, { status: 429, json: { error: 'rate_limited', limit: 'ticks' } }, 'a batch of three ticks against 2/minute');
  t.match(threeTicks.json.message, /counts 3 requests of this MCP batch, more than the 2 it lets through; split the batch/);
  t.strictSame([(await tick()).status, (await tick()).status, (await tick()).status], [200, 200, 429]);
  t.equal((await send(JSON.stringify(rpc('tools/call', { name: 'list_repos' })))).status, 200, 'another tool is not limited');

  // A policy that names no MCP field does not read the body: gzip passes untouched.
  t.equal((await send(gzipSync('{}'), { 'content-encoding': 'gzip' }, plain.api_key)).status, 200, 'no MCP rule: the body is not inspected');

  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${mcpAgent.id}&limit=100`)).json as any[];
    // 20 calls above; the last ones may still be on their way to the audit log.
    return page.length >= 20 && page.some((r) => r.status_code === 429) ? page : undefined;
  });
  const batch = rows.find((r) => r.rule_matched === 'no-destructive');
  t.match(batch, { mcp_method: 'tools/call', mcp_tool: 'delete_repo' }, 'a denied batch is audited by its first denied element');
  t.ok(rows.filter((r) => r.rule_matched === 'uninspectable_body').every((r) => r.mcp_method === null && r.decision === 'denied'), 'uninspectable bodies: denied, no MCP fields');
  t.match(rows.find((r) => r.status_code === 429), { rule_matched: 'limit:ticks', mcp_tool: 'ticks' });
});

/** An agent of the owner with `rulesYaml` as its policy. */
async function agentWithPolicy(t: Test, name: string, rulesYaml: string) {
  const agent = await createAgent(service.url, owner, name, 'none');
  t.equal((await api(service.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: rulesYaml })).status, 200);
  return agent;
}

/** The status of a JSON POST through the proxy to the echo upstream at `authority`. */
async function postStatus(key: string, authority: string, body: string | Buffer, headers: Record<string, string>): Promise<number> {
  const res = await fetch(`${service.url}/proxy/${key}/${authority}/echo`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: Buffer.isBuffer(body) ? new Uint8Array(body) : body,
  });
  await res.arrayBuffer();
  return res.status;
}

t.test('shadow-only MCP fields never refuse a call for its body; a shadow rule is tried on every element of a batch', async (t) => {
  const echo = await startUpstream();
  t.teardown(() => echo.close());
  const shadowAgent = await agentWithPolicy(t, 'mcp-shadow', 'version: "1"\nrules:\n  - name: try-no-merges\n    tool: "*"\n    action: POST\n    mcp_tool: merge_pull_request\n    decision: deny\n    mode: shadow\n');
  const send = (body: string | Buffer, headers: Record<string, string> = {}) => postStatus(shadowAgent.api_key, echo.authority, body, headers);
  const call = (name: string, id = 1) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name } });
  t.equal(await send(gzipSync('{}'), { 'content-encoding': 'gzip' }), 200, 'an encoded body passes');
  t.equal(await send('not json'), 200, 'a body that is not JSON passes');
  t.equal(await send(JSON.stringify(call('get_issue')), { 'mcp-method': 'tools/list' }), 200, 'a header that disagrees passes');
  t.equal(await send(JSON.stringify([call('get_issue'), call('merge_pull_request', 2)])), 200, 'the batch is forwarded');
  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${shadowAgent.id}`)).json as any[];
    return page.length >= 4 ? page : undefined;
  });
  const batch = rows.find((r) => r.mcp_tool === 'get_issue' && r.shadow_rule !== null);
  t.match(batch, { decision: 'allowed', shadow_rule: 'try-no-merges', shadow_decision: 'deny' }, 'the shadow rule matched the second element of the batch');
  t.ok(rows.every((r) => r.decision === 'allowed'), 'nothing was refused');
});

t.test('a call refused for its body (uninspectable, headers that disagree) still records the shadow rule its head matches', async (t) => {
  const echo = await startUpstream();
  t.teardown(() => echo.close());
  const agent = await agentWithPolicy(t, 'mcp-shadow-refused', 'version: "1"\nrules:\n  - {name: no-deletes, tool: "*", action: POST, mcp_tool: "delete_*", decision: deny}\n  - {name: try-posts, tool: "*", action: POST, decision: deny, mode: shadow}\n');
  const send = (body: string | Buffer, headers: Record<string, string>) => postStatus(agent.api_key, echo.authority, body, headers);
  t.equal(await send(gzipSync('{}'), { 'content-encoding': 'gzip' }), 403, 'an encoded body is refused');
  t.equal(await send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'list_x' } }), { 'mcp-method': 'tools/list' }), 400, 'a header that disagrees is refused');
  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${agent.id}`)).json as any[];
    return page.length >= 2 ? page : undefined;
  });
  for (const row of rows) t.match(row, { decision: 'denied', shadow_rule: 'try-posts', shadow_decision: 'deny' }, `${row.status_code}: the shadow rule is recorded`);
});

t.test('a glob that searches names (`*delete*`) bounds the names a body may hold to 16 KiB; other globs and shadow rules refuse nothing for it', async (t) => {
  const echo = await startUpstream();
  t.teardown(() => echo.close());
  const call = (name: string, id = 1) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name } });
  const scanning = await agentWithPolicy(t, 'mcp-scanning', 'version: "1"\nrules:\n  - {name: no-deletes, tool: "*", action: POST, mcp_tool: "*delete*", decision: deny}\n');
  const send = (key: string, body: object) => postStatus(key, echo.authority, JSON.stringify(body), {});
  // (A name is at most 8,192 characters: a batch's names together reach the bound.)
  t.equal(await send(scanning.api_key, [call('a'.repeat(8_000), 1), call(`${'b'.repeat(7_000)}_delete`, 2)]), 403, 'names within the bound are searched: denied by the rule');
  t.equal(await send(scanning.api_key, [call('a'.repeat(8_000), 1), call('b'.repeat(8_000), 2)]), 200, 'and ones without the text pass');
  const over = await fetch(`${service.url}/proxy/${scanning.api_key}/${echo.authority}/echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify([call('a'.repeat(8_000), 1), call('b'.repeat(8_000), 2), call('c'.repeat(1_000), 3)]) });
  t.match(await over.json(), { error: 'policy_denied', rule_matched: 'uninspectable_body', message: /methods and tool names come to more than 16 KiB/ }, 'names of 17,000 characters together are not searched: refused');
  t.equal(await send(scanning.api_key, Array.from({ length: 200 }, (_, i) => call(`tool_${'x'.repeat(80)}`, i))), 403, 'nor are 200 names of 86 characters');

  const prefixed = await agentWithPolicy(t, 'mcp-prefixed', 'version: "1"\nrules:\n  - {name: no-deletes, tool: "*", action: POST, mcp_tool: "delete_*", decision: deny}\n  - {name: try-no-deletes, tool: "*", action: POST, mcp_tool: "*delete*", decision: deny, mode: shadow}\n');
  const longNames = [call(`list_${'a'.repeat(8_000)}_delete`, 1), call(`list_${'a'.repeat(8_000)}`, 2), call(`list_${'b'.repeat(8_000)}`, 3)]; // 24 KiB of names
  t.equal(await send(prefixed.api_key, longNames), 200, 'a glob that compares its start only has no such bound, and a shadow rule refuses nothing');
  t.equal(await send(prefixed.api_key, call(`delete_${'a'.repeat(8_000)}`)), 403, 'and still decides on the whole name');
  t.equal(await send(prefixed.api_key, call('list_delete')), 200);
  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${prefixed.id}`)).json as any[];
    return page.length >= 3 ? page : undefined;
  });
  t.equal(rows.find((r) => r.mcp_tool?.startsWith('list_a'))?.shadow_rule, null, 'over the bound, the shadow rule saw the head alone (of the batch, its first)');
  t.equal(rows.find((r) => r.mcp_tool === 'list_delete')?.shadow_rule, 'try-no-deletes', 'within it, the name');

  // A replay decides as the proxy would: a candidate that searches names searches the batch's one recorded request (8,012 characters).
  const replay = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: prefixed.id, rules_yaml: 'version: "1"\nrules:\n  - {name: no-deletes, tool: "*", action: POST, mcp_tool: "*delete*", decision: deny}\n' });
  t.match(replay.json, { total: 3, allow_to_deny: 2, deny_to_allow: 0 });
  const wouldRules = (replay.json.samples as any[]).map((sample) => sample.would_rule).sort();
  t.strictSame(wouldRules, ['no-deletes', 'no-deletes'], 'list_delete and the long name: denied by the rule');
  // A recorded request whose names pass 16 KiB together (a URI in its spellings), under such a candidate: refused unsearched.
  const uriAgent = await createAgent(service.url, owner, 'mcp-long-uri', 'none');
  const longUri = `file:///${'a b'.repeat(2_700)}`;
  await service.auditStore.insertEncoded(service.auditStore.encode(auditRecord(ownerOrg, {
    agentId: uriAgent.id, agentName: 'mcp-long-uri', toolName: echo.authority.split(':')[0]!, action: 'POST', toolUrl: `https://${echo.authority}/echo`, policyPath: '/echo',
    policyDecided: true, ruleMatched: 'default', mcpMethod: 'resources/read', mcpTool: longUri,
  })), `long-uri-${uriAgent.id}`);
  const uriReplay = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: uriAgent.id, rules_yaml: 'version: "1"\nrules:\n  - {name: no-secrets, tool: "*", action: POST, mcp_tool: "*secret*", decision: deny}\n' });
  t.match(uriReplay.json, { total: 1, allow_to_deny: 1, samples: [{ would_rule: 'uninspectable_body' }] });

  // So does a check: a resource URI of 8,100 characters is three spellings of it, over 16 KiB together.
  const uri = `file:///${'a b'.repeat(2_700)}`;
  const checked = await api(service.url, owner, 'POST', '/policy/check', { agent_id: prefixed.id, tool: echo.authority, action: 'POST', reasoning: 'check', mcp_method: 'resources/read', mcp_tool: uri,
    rules_yaml: 'version: "1"\nrules:\n  - {name: no-secrets, tool: "*", action: POST, mcp_tool: "*secret*", decision: deny}\n' });
  t.match(checked.json, { decision: 'deny', rule_matched: 'uninspectable_body', message: /more than 16 KiB cannot be inspected/ });
  const short = await api(service.url, owner, 'POST', '/policy/check', { agent_id: prefixed.id, tool: echo.authority, action: 'POST', reasoning: 'check', mcp_method: 'resources/read', mcp_tool: 'file:///a b',
    rules_yaml: 'version: "1"\nrules:\n  - {name: no-secrets, tool: "*", action: POST, mcp_tool: "*secret*", decision: deny}\n' });
  t.match(short.json, { decision: 'allow', rule_matched: 'default' }, 'a short one is searched');
});

t.test('a request whose tool name passes 8,192 characters (its method 1,024) is not inspected under any MCP-aware policy, so the audit never keeps one', async (t) => {
  const echo = await startUpstream();
  t.teardown(() => echo.close());
  const call = (name: string, method = 'tools/call') => ({ jsonrpc: '2.0', id: 1, method, params: { name } });
  const send = (key: string, body: object) => postStatus(key, echo.authority, JSON.stringify(body), {});
  // Its one rule compares the start only: before, a name of a megabyte was decided, forwarded and kept whole by the audit.
  const prefixed = await agentWithPolicy(t, 'mcp-long-names', 'version: "1"\nrules:\n  - {name: no-deletes, tool: "*", action: POST, mcp_tool: "delete_*", decision: deny}\n');
  t.equal(await send(prefixed.api_key, call(`list_${'a'.repeat(8_187)}`)), 200, '8,192 characters: inspected');
  t.equal(await send(prefixed.api_key, call(`delete_${'a'.repeat(8_185)}`)), 403, 'and decided by the rule');
  const over = await fetch(`${service.url}/proxy/${prefixed.api_key}/${echo.authority}/echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(call(`list_${'a'.repeat(1_000_000)}`)) });
  t.equal(over.status, 403);
  t.match(await over.json(), { error: 'policy_denied', rule_matched: 'uninspectable_body', message: /a request whose method is longer than 1,024 characters or whose tool name or URI is longer than 8,192 cannot be inspected/ });
  t.equal(await send(prefixed.api_key, call(`list_${'a'.repeat(8_188)}`)), 403, '8,193 characters: not inspected');
  t.equal(await send(prefixed.api_key, call('list_x', `x/${'a'.repeat(1_023)}`)), 403, 'nor a method of 1,025');
  t.equal(await send(prefixed.api_key, [call('list_x'), call(`list_${'a'.repeat(9_000)}`)]), 403, 'nor a batch with such a request');
  // Counted in characters, as the check counts them: 8,192 emoji are 16,384 UTF-16 units.
  t.equal(await send(prefixed.api_key, call('😀'.repeat(8_192))), 200, '8,192 characters beyond the BMP: inspected');
  t.equal(await send(prefixed.api_key, call('😀'.repeat(8_193))), 403);
  const astral = await api(service.url, owner, 'POST', '/policy/check', { agent_id: prefixed.id, tool: echo.authority, action: 'POST', reasoning: 'check', mcp_method: 'tools/call', mcp_tool: '😀'.repeat(8_192) });
  t.match(astral, { status: 200, json: { decision: 'allow' } }, 'and a check of it decides alike');

  // Under shadow rules alone nothing is refused; the call is decided on its head, and its entry has no MCP names.
  const shadowed = await agentWithPolicy(t, 'mcp-long-names-shadow', 'version: "1"\nrules:\n  - {name: try-no-deletes, tool: "*", action: POST, mcp_tool: "delete_*", decision: deny, mode: shadow}\n');
  t.equal(await send(shadowed.api_key, call(`delete_${'a'.repeat(100_000)}`)), 200);
  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${shadowed.id}`)).json as any[];
    return page.length >= 1 ? page : undefined;
  });
  t.match(rows[0], { decision: 'allowed', mcp_method: null, mcp_tool: null, shadow_rule: null });

  // A replay decides a call recorded before this bound as the proxy now would.
  const before = await createAgent(service.url, owner, 'mcp-long-names-recorded', 'none');
  await service.auditStore.insertEncoded(service.auditStore.encode(auditRecord(ownerOrg, {
    agentId: before.id, agentName: 'mcp-long-names-recorded', toolName: echo.authority.split(':')[0]!, action: 'POST', toolUrl: `https://${echo.authority}/echo`, policyPath: '/echo',
    policyDecided: true, ruleMatched: 'default', mcpMethod: 'tools/call', mcpTool: `list_${'a'.repeat(20_000)}`,
  })), `long-name-${before.id}`);
  const replay = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: before.id, rules_yaml: 'version: "1"\nrules:\n  - {name: no-deletes, tool: "*", action: POST, mcp_tool: "delete_*", decision: deny}\n' });
  t.match(replay.json, { total: 1, allow_to_deny: 1, samples: [{ would_rule: 'uninspectable_body' }] });
  // And a check takes names as long as the proxy inspects.
  const checked = await api(service.url, owner, 'POST', '/policy/check', { agent_id: prefixed.id, tool: echo.authority, action: 'POST', reasoning: 'check', mcp_method: 'tools/call', mcp_tool: `delete_${'a'.repeat(8_185)}` });
  t.match(checked.json, { decision: 'deny', rule_matched: 'no-deletes' });
  const tooLong = await api(service.url, owner, 'POST', '/policy/check', { agent_id: prefixed.id, tool: echo.authority, action: 'POST', reasoning: 'check', mcp_method: 'tools/call', mcp_tool: `delete_${'a'.repeat(8_186)}` });
  t.match(tooLong, { status: 400, json: { error: 'invalid_request', field: 'mcp_tool' } });
});

t.test('a policy saved before the MCP globs\' bounds that exceeds them keeps deciding, on names of at most what its globs can search in the bounds\' time', async (t) => {
  const echo = await startUpstream();
  t.teardown(() => echo.close());
  const agent = await createAgent(service.url, owner, 'mcp-stored-before', 'none');
  // Written to the store as an earlier version accepted it: 1,000 globs that search names (the bound is 256).
  await service.store.setPolicy(agent.id, `version: "1"\nrules:\n${Array.from({ length: 1_000 }, (_, i) => `  - {tool: "*", action: POST, mcp_tool: "*delete${i}*", decision: deny}\n`).join('')}`);
  const call = (name: string) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name } });
  const bound = Math.floor((16_384 * 256) / 1_000); // 4,194 characters, "tools/call" included
  t.equal(await postStatus(agent.api_key, echo.authority, call(`${'a'.repeat(bound - 20)}delete7`), {}), 403, 'within its bound: searched, denied by its rule');
  t.equal(await postStatus(agent.api_key, echo.authority, call('a'.repeat(bound - 10)), {}), 200, 'and a name without the text passes');
  const over = await fetch(`${service.url}/proxy/${agent.api_key}/${echo.authority}/echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: call('a'.repeat(bound - 9)) });
  t.match(await over.json(), { error: 'policy_denied', rule_matched: 'uninspectable_body', message: /names come to more than 4,194 characters \(the bound of a policy saved before the MCP globs' bounds that exceeds them; set it again/ });
});

t.test('resources/read: the policy decides on the URI as sent and as the MCP SDKs read it (WHATWG-normalised), the stricter stands', async (t) => {
  const echo = await startUpstream();
  t.teardown(() => echo.close());
  const agent = await agentWithPolicy(t, 'mcp-resources', 'version: "1"\nrules:\n'
    + '  - {name: no-secrets, tool: "*", action: POST, mcp_method: resources/read, mcp_tool: "file:///secrets/*", decision: deny}\n'
    + '  - {name: no-taxes, tool: "*", action: POST, mcp_method: resources/read, mcp_tool: "file:///Tax Returns/*", decision: deny}\n'
    + '  - {name: rest, tool: "*", action: "*", decision: allow}\n');
  const readBy = (key: string) => (uri: string, headers: Record<string, string> = {}) =>
    postStatus(key, echo.authority, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri } }), headers);
  const read = readBy(agent.api_key);
  t.equal(await read('file:///public/a'), 200, 'a public file');
  // The TypeScript SDK looks each of these up as new URL(uri).toString(): file:///secrets/key.
  const secrets = ['file:///secrets/key', 'FILE:///secrets/key', ' file:///sec\trets/key', 'file:///public/../secrets/key', 'file:///public/%2e%2e/secrets/key'];
  for (const uri of secrets) t.equal(await read(uri), 403, `${JSON.stringify(uri)} reads file:///secrets/key: denied`);
  t.equal(await read('file:///Tax Returns/2025.pdf'), 403, 'a glob written with a space (which a URL escapes) denies the URI sent with the space');
  t.equal(await read('file:///Tax%20Returns/2025.pdf'), 403, 'and sent escaped, as the server reads both');
  t.equal(await read('FILE:///Tax%20Returns/../Tax Returns/2025.pdf'), 403, 'and spelled any other way');
  // A server that decodes the path before it resolves it (a file server) reads these as /secrets/key too.
  const decodedSecrets = ['file:///public/..%2fsecrets/key', 'file:///public/%2e%2e%2Fsecrets/key', 'file:///%73ecrets/key'];
  for (const uri of decodedSecrets) t.equal(await read(uri), 403, `${uri}: escapes a decoding server reads as file:///secrets/key: denied`);
  t.equal(await read('file:///public/a%2Fb'), 200, 'an escaped slash that climbs nowhere: allowed');
  t.equal(await read('not a uri'), 403, 'a URI that does not parse: refused as uninspectable');
  t.equal(await read('FILE:///public/a', { 'mcp-method': 'resources/read', 'mcp-name': 'FILE:///public/a' }), 200, 'Mcp-Name as the body spells it');
  t.equal(await read('FILE:///public/a', { 'mcp-name': 'file:///public/a' }), 400, 'Mcp-Name spelling it otherwise than the body');
  t.equal(await read('file:///public/a', { 'mcp-name': 'file:///secrets/key' }), 400, 'an Mcp-Name naming another resource');
  const noUri = await postStatus(agent.api_key, echo.authority, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: {} }), { 'mcp-name': 'secrets/key' });
  t.equal(noUri, 400, 'an Mcp-Name on a read without a URI');

  // An allow-list: a path that climbs out of it is not in it.
  const listed = await agentWithPolicy(t, 'mcp-resources-allow', 'version: "1"\ndefault: deny\nrules:\n'
    + '  - {name: public, tool: "*", action: POST, mcp_method: resources/read, mcp_tool: "file:///public/*", decision: allow}\n');
  t.equal(await readBy(listed.api_key)('file:///public/a'), 200, 'allow-listed');
  t.equal(await readBy(listed.api_key)('file:///public/../secrets/key'), 403, 'out of the allow-list by ..');
  t.equal(await readBy(listed.api_key)('file:///public/a b'), 200, 'a space in an allow-listed URI, sent raw');
  t.equal(await readBy(listed.api_key)('file:///public/..%2fsecrets/key'), 403, 'out of the allow-list by an escaped slash');
  t.equal(await readBy(listed.api_key)('file:///public/caf%c3%a9'), 200, 'a lower-case escape in an allow-listed URI');

  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${agent.id}`)).json as any[];
    return page.length >= 17 ? page : undefined;
  });
  t.same(rows.filter((r) => r.rule_matched === 'no-secrets').map((r) => r.mcp_tool).sort(), [...secrets, ...decodedSecrets].sort(), 'the audit keeps each URI as it was sent');
  t.equal(rows.filter((r) => r.rule_matched === 'uninspectable_body').length, 1);

  // POST /policy/check and a replay read the URI as the proxy does.
  const check = (mcp_tool: string) => api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: echo.authority, action: 'POST', reasoning: '', path: '/echo', mcp_method: 'resources/read', mcp_tool });
  t.match((await check('FILE:///public/../secrets/key')).json, { decision: 'deny', rule_matched: 'no-secrets' }, 'check: normalised like the proxy');
  t.match(await check('not a uri'), { status: 400, json: { error: 'invalid_request', field: 'mcp_tool' } }, 'check: a URI that does not parse');
  const replay = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: 'version: "1"\nrules:\n  - {name: no-secrets, tool: "*", action: POST, mcp_method: resources/read, mcp_tool: "file:///secrets/*", decision: deny}\n  - {name: no-taxes, tool: "*", action: POST, mcp_method: resources/read, mcp_tool: "file:///Tax Returns/*", decision: deny}\n  - {name: rest, tool: "*", action: "*", decision: allow}\n' });
  t.match(replay.json, { allow_to_deny: 0, deny_to_allow: 0 }, 'replaying its own policy changes nothing');
});
