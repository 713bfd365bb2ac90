// The streaming proxy against a real HTTPS upstream on loopback.
import { createHash } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import t from 'tap';
import { api, createAgent, eventually, signup, startTestService, type Session } from '../support/service.js';
import { patternBytes, startUpstream } from '../support/upstream.js';

const upstream = await startUpstream();
const service = await startTestService();
const base = service.url;
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

const owner = await signup(base);

async function proxied(key: string, target: string, init: RequestInit & { headers?: Record<string, string> } = {}) {
  return fetch(`${base}/proxy/${key}/${target}`, init);
}

async function auditRows(session: Session, query = '') {
  const res = await api(base, session, 'GET', `/audit${query}`);
  return res.json as any[];
}

t.test('a GET is forwarded to https://{host}/{path}?{query} and the response comes back', async (t) => {
  const agent = await createAgent(base, owner, 'getter');
  const res = await proxied(agent.api_key, `${upstream.authority}/echo/a/b?x=1&y=two`);
  t.equal(res.status, 200);
  const body = (await res.json()) as any;
  t.equal(body.method, 'GET');
  t.equal(body.url, '/echo/a/b?x=1&y=two');
  t.equal(body.headers.host, upstream.authority, 'Host is the target');
});

t.test('byte-identical 1 MiB bodies both ways', async (t) => {
  const agent = await createAgent(base, owner, 'bulk');
  const payload = patternBytes(1024 * 1024);
  const up = await proxied(agent.api_key, `${upstream.authority}/echo`, { method: 'POST', body: payload, headers: { 'content-type': 'application/octet-stream' } });
  const echoed = (await up.json()) as any;
  t.equal(echoed.body_bytes, payload.length);
  t.equal(echoed.body_sha256, createHash('sha256').update(payload).digest('hex'));
  const down = await proxied(agent.api_key, `${upstream.authority}/bytes?n=${1024 * 1024}`);
  const got = Buffer.from(await down.arrayBuffer());
  t.equal(got.length, 1024 * 1024);
  t.ok(got.equals(patternBytes(1024 * 1024)), 'download is byte-identical');
});

t.test('every proxied call is audited', async (t) => {
  const agent = await createAgent(base, owner, 'audited', 'full');
  const res = await proxied(agent.api_key, `${upstream.authority}/json?q=1`, { headers: { 'x-agent-reasoning': 'need data', 'x-agent-task-id': 'task-9' } });
  t.equal(res.status, 200);
  const text = await res.text();
  const rows = await eventually(async () => {
    const rows = await auditRows(owner, `?agent_id=${agent.id}`);
    return rows.length > 0 ? rows : undefined;
  });
  const row = rows[0];
  t.equal(row.tool_name, '127.0.0.1');
  t.equal(row.action, 'GET');
  t.equal(row.tool_url, `https://${upstream.authority}/json?q=1`);
  t.equal(row.reasoning, 'need data');
  t.equal(row.task_id, 'task-9');
  t.equal(row.status_code, 200);
  t.equal(row.decision, 'allowed');
  t.equal(row.source, 'proxy');
  t.equal(row.output, text);
  t.equal(row.response_bytes, Buffer.byteLength(text));
});
