// Held calls end to end in a real all-in-one process (spawned, so that it can be
// restarted on its data), against a real HTTPS upstream and a real webhook
// receiver: approve during the hold, deny, the 202 and its retry, reuse,
// every mismatch, expiry, org isolation, two racing retries, the 413, the
// webhook's signature and retries, the audit entries, and a held call that
// survives a restart through its stored body. Split mode: split-mode.test.ts.
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t, { type Test } from 'tap';
import { api, createAgent, eventually, login, signup, TLS_DIR, type Session } from '../support/service.js';
import { headThenNext } from '../support/raw-socket.js';
import { spawnService, type SpawnedService } from '../support/spawn-service.js';
import { patternBytes, startUpstream } from '../support/upstream.js';

const HOLD_S = 2;
const WEBHOOK_SECRET = 'whsec-test-0123456789abcdef';

// A webhook receiver that refuses every notification's first attempt (500), to see the retry.
const hooks: { headers: IncomingHttpHeaders; body: Buffer }[] = [];
const refusedOnce = new Set<string>();
const receiver = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c)).on('end', () => {
    const body = Buffer.concat(chunks);
    const id = (JSON.parse(body.toString('utf8')) as { id: string }).id;
    if (!refusedOnce.has(id)) {
      refusedOnce.add(id);
      res.statusCode = 500;
      res.end();
      return;
    }
    hooks.push({ headers: req.headers, body });
    res.end('ok');
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));

const root = mkdtempSync(join(tmpdir(), 'tcg-approvals-'));
const upstream = await startUpstream();
const env = {
  PORT: '0',
  DATA_DIR: join(root, 'data'),
  GUARD_ALLOW_TARGETS: '127.0.0.1',
  NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'),
  AUDIT_BATCH_MS: '20',
  APPROVAL_HOLD_S: String(HOLD_S),
  // Cache entries expire between a call's decision and its hold: that is no policy change (a call must still be held).
  CACHE_TTL_MS: '1',
  APPROVAL_MAX_PENDING: '20',
  APPROVAL_WEBHOOK_URL: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks/${randomBytes(8).toString('hex')}`,
  APPROVAL_WEBHOOK_SECRET: WEBHOOK_SECRET,
  PUBLIC_URL: 'http://guard.example.test',
  LOG_LEVEL: 'info',
};
let service: SpawnedService = await spawnService('all-in-one', env);
t.teardown(async () => {
  await service.stop();
  await upstream.close();
  await new Promise((resolve) => receiver.close(resolve));
  rmSync(root, { recursive: true, force: true });
});

const ownerEmail = `approver-${Date.now()}@example.com`;
let owner: Session = await signup(service.url, ownerEmail);
const stranger: Session = await signup(service.url);

const POLICY = `version: "1"
rules:
  - name: payments
    tool: "127.0.0.1"
    action: POST
    path: /echo/**
    decision: approve
    approval_timeout: 600
  - name: short-lived
    tool: "127.0.0.1"
    action: PUT
    decision: approve
    approval_timeout: 10
`;
const payer = await createAgent(service.url, owner, 'payer', 'full');
const other = await createAgent(service.url, owner, 'other');
for (const agent of [payer, other]) {
  const set = await api(service.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: POLICY });
  if (set.status !== 200) throw new Error(`policy: ${set.status} ${set.text}`);
}

interface Answer {
  status: number;
  headers: Headers;
  json: any;
  ms: number;
}

async function call(key: string, init: { method?: string; authority?: string; path?: string; body?: Buffer | string; approvalId?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  const started = Date.now();
  const res = await fetch(`${service.url}/proxy/${key}/${init.authority ?? upstream.authority}${init.path ?? '/echo'}`, {
    method: init.method ?? 'POST',
    headers: {
      'x-agent-reasoning': 'paying invoice 42',
      'x-agent-task-id': 'task-42',
      ...(init.approvalId !== undefined ? { 'x-approval-id': init.approvalId } : {}),
      ...init.headers,
    },
    ...(init.body !== undefined ? { body: typeof init.body === 'string' ? init.body : new Uint8Array(init.body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text.length > 0 && res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text, ms: Date.now() - started };
}

/** A new agent of the owner's whose calls POLICY holds for approval. */
async function agentWithPolicy(t: Test, name: string) {
  const agent = await createAgent(service.url, owner, name);
  t.equal((await api(service.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: POLICY })).status, 200);
  return agent;
}

/** Ids of the approvals listed so far: pendingFor waits for one that is not among them. */
const known = new Set<string>();

/** The agent's newest pending approval not seen before (the one of the call just made). */
async function pendingFor(agentId: string) {
  const approval = await eventually(async () => {
    const res = await api(service.url, owner, 'GET', `/approvals?status=pending&agent_id=${agentId}`);
    return (res.json as any[]).find((a) => !known.has(a.id));
  }, 5000);
  known.add(approval.id);
  return approval;
}

async function auditOf(approvalId: string, count = 1) {
  return eventually(async () => {
    const rows = (await api(service.url, owner, 'GET', `/audit?approval_id=${approvalId}`)).json as any[];
    return rows.length >= count ? rows : undefined;
  }, 5000);
}

// Started first, checked last: an approval that expires (approval_timeout 10 s) while nobody decides.
const expiring = call(other.api_key, { method: 'PUT', body: 'late' });

t.test('POST /policy/check answers approve with the rule and its timeout', async (t) => {
  const res = await api(service.url, owner, 'POST', '/policy/check', { agent_id: payer.id, tool: '127.0.0.1', action: 'POST', path: '/echo', reasoning: '' });
  t.equal(res.status, 200);
  t.match(res.json, { decision: 'approve', rule_matched: 'payments', approval_timeout: 600 });
});

t.test('approved during the hold: forwarded at once, the body byte-identical, the approval used, the call audited with its id', async (t) => {
  const body = patternBytes(100_000);
  const seenBefore = upstream.seen.length;
  const pending = call(payer.api_key, { body });
  const approval = await pendingFor(payer.id);
  t.match(approval, { agent_id: payer.id, agent_name: 'payer', tool_name: '127.0.0.1', host: upstream.authority, action: 'POST', path: '/echo', query: '', reasoning: 'paying invoice 42', task_id: 'task-42', rule_matched: 'payments', status: 'pending', decided_at: null, decided_by: null, note: null, body_bytes: 100_000 });
  t.equal(approval.body_sha256, (await import('node:crypto')).createHash('sha256').update(body).digest('hex'));
  t.equal(Date.parse(approval.expires_at) - Date.parse(approval.created_at), 600_000, 'expires_at = created_at + approval_timeout');
  t.equal(upstream.seen.length, seenBefore, 'nothing is forwarded while held');

  const decided = await api(service.url, owner, 'POST', `/approvals/${approval.id}/approve`, { note: 'fine' });
  t.equal(decided.status, 200);
  t.match(decided.json, { id: approval.id, status: 'approved', decided_by: ownerEmail, note: 'fine' });
  const answer = await pending;
  t.equal(answer.status, 200, 'the held call is forwarded');
  t.ok(answer.ms < HOLD_S * 1000 + 1500, `within the hold (${answer.ms} ms)`);
  t.equal(answer.json.body_sha256, approval.body_sha256, 'the upstream got the held body, byte for byte');
  t.equal(answer.json.body_bytes, 100_000);
  t.equal(answer.headers.get('x-approval-id'), approval.id, 'the answer names the approval that let it through');
  t.equal((await api(service.url, owner, 'GET', `/approvals/${approval.id}`)).json.status, 'used');
  const [row] = await auditOf(approval.id);
  t.match(row, { decision: 'allowed', status_code: 200, rule_matched: 'payments', approval_id: approval.id });
  const upper = (await api(service.url, owner, 'GET', `/audit?approval_id=${approval.id.toUpperCase()}`)).json as any[];
  t.equal(upper.length, 1, 'the approval id in capitals finds the same entry, as agent_id does');

  const again = await call(payer.api_key, { body, approvalId: approval.id });
  t.equal(again.status, 409, 'a used approval cannot be used again');
  t.equal(again.json.error, 'approval_used');
});

t.test('denied during the hold: 403 approval_denied with the note, audited denied', async (t) => {
  const seenBefore = upstream.seen.length;
  const pending = call(payer.api_key, { body: '{"amount": 1000000}' });
  const approval = await pendingFor(payer.id);
  const denied = await api(service.url, owner, 'POST', `/approvals/${approval.id}/deny`, { note: 'Too much.' });
  t.match(denied.json, { status: 'denied', note: 'Too much.', decided_by: ownerEmail });
  const answer = await pending;
  t.equal(answer.status, 403);
  t.match(answer.json, { error: 'approval_denied', message: 'Too much.' });
  t.equal(upstream.seen.length, seenBefore, 'never forwarded');
  const again = await api(service.url, owner, 'POST', `/approvals/${approval.id}/approve`);
  t.equal(again.status, 409, 'the first decision stands');
  t.equal(again.json.error, 'conflict');
  const [row] = await auditOf(approval.id);
  t.match(row, { decision: 'denied', status_code: 403, approval_id: approval.id });
  const retry = await call(payer.api_key, { body: '{"amount": 1000000}', approvalId: approval.id });
  t.equal(retry.json.error, 'approval_denied', 'a retry of a denied call is denied too');
});

t.test('denied with an empty note: the agent gets the standard message, not an empty one', async (t) => {
  const pending = call(payer.api_key, { body: '{"amount": 7}' });
  const approval = await pendingFor(payer.id);
  t.equal((await api(service.url, owner, 'POST', `/approvals/${approval.id}/deny`, { note: '' })).status, 200);
  const answer = await pending;
  t.equal(answer.json.error, 'approval_denied');
  t.ok(typeof answer.json.message === 'string' && answer.json.message.length > 0, `a message: ${JSON.stringify(answer.json.message)}`);
});

t.test('a held MCP batch is audited by its first element (none denied), not by the element that needs approval', async (t) => {
  const mcp = await createAgent(service.url, owner, 'mcp-payer', 'none');
  const policy = 'version: "1"\nrules:\n  - {name: pay, tool: "*", action: POST, mcp_method: tools/call, mcp_tool: "pay_*", decision: approve}\n  - {name: rest, tool: "*", action: "*", decision: allow}\n';
  t.equal((await api(service.url, owner, 'POST', `/agents/${mcp.id}/policy`, { rules_yaml: policy })).status, 200);
  const rpc = (id: number, name: string) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name } });
  const pending = call(mcp.api_key, { body: JSON.stringify([rpc(1, 'read_x'), rpc(2, 'pay_y')]), headers: { 'content-type': 'application/json' } });
  const approval = await pendingFor(mcp.id);
  await api(service.url, owner, 'POST', `/approvals/${approval.id}/deny`, { note: 'no' });
  t.equal((await pending).status, 403);
  const [row] = await auditOf(approval.id);
  t.match(row, { rule_matched: 'pay', mcp_method: 'tools/call', mcp_tool: 'read_x', decision: 'denied' }, 'CONTRACT: its first denied element, else its first');
});

t.test('a held call whose client goes away is audited denied with 499: nothing was forwarded, nobody approved it', async (t) => {
  const seenBefore = upstream.seen.length;
  const controller = new AbortController();
  const pending = fetch(`${service.url}/proxy/${payer.api_key}/${upstream.authority}/echo`, { method: 'POST', body: '{"gone": true}', signal: controller.signal }).catch(() => null);
  const approval = await pendingFor(payer.id);
  controller.abort();
  await pending;
  const [row] = await auditOf(approval.id);
  t.match(row, { status_code: 499, decision: 'denied', rule_matched: 'payments', approval_id: approval.id });
  t.equal(upstream.seen.length, seenBefore, 'never forwarded');
});

t.test('no decision within the hold: 202 with its id, Retry-After and Location, no audit entry; the retry after approval is forwarded once', async (t) => {
  const body = '{"invoice": 7}';
  const held = await call(payer.api_key, { body, path: '/echo?currency=eur' });
  t.equal(held.status, 202);
  t.ok(held.ms >= HOLD_S * 1000 - 100, `held for APPROVAL_HOLD_S first (${held.ms} ms)`);
  t.match(held.json, { approval_id: /^[0-9a-f-]{36}$/, status: 'pending' });
  const id = held.json.approval_id as string;
  const item = (await api(service.url, owner, 'GET', `/approvals/${id}`)).json;
  t.equal(held.json.expires_at, item.expires_at);
  t.equal(held.headers.get('location'), `/approvals/${id}`, 'Location is relative to PUBLIC_URL');
  t.ok(Number(held.headers.get('retry-after')) >= 1, 'Retry-After in whole seconds');
  t.equal(item.path, '/echo', 'path without the query');
  t.equal(item.query, 'currency=eur', 'the query on its own, as the approver must see it');

  const stillHeld = await call(payer.api_key, { body, path: '/echo?currency=eur', approvalId: id });
  t.equal(stillHeld.status, 202, 'a retry while pending is held again, then 202');
  t.equal(stillHeld.json.approval_id, id);
  const rows = (await api(service.url, owner, 'GET', `/audit?approval_id=${id}`)).json as any[];
  t.equal(rows.length, 0, 'a 202 writes no audit entry');

  await api(service.url, owner, 'POST', `/approvals/${id}/approve`);
  const seenBefore = upstream.seen.length;
  const retry = await call(payer.api_key, { body, path: '/echo?currency=eur', approvalId: id });
  t.equal(retry.status, 200, 'the approved retry is forwarded');
  t.equal(upstream.seen.length - seenBefore, 1, 'once');
  const seen = upstream.seen[upstream.seen.length - 1]!;
  t.equal(seen.headers['x-approval-id'], undefined, 'X-Approval-Id is not forwarded');
  t.equal(seen.url, '/echo?currency=eur');
  const reuse = await call(payer.api_key, { body, path: '/echo?currency=eur', approvalId: id });
  t.equal(reuse.status, 409);
  t.equal(reuse.json.error, 'approval_used');
  const audited = await auditOf(id, 2);
  t.same(audited.map((r) => `${r.decision} ${r.status_code}`).sort(), ['allowed 200', 'denied 409']);
});

t.test('a held HEAD is answered 202 with a length and no body: a keep-alive client reads its next answer', async (t) => {
  const agent = await createAgent(service.url, owner, 'heads');
  const set = await api(service.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: 'version: "1"\nrules:\n  - {name: held-head, tool: "*", action: HEAD, decision: approve}\n' });
  t.equal(set.status, 200, set.text);
  const { statuses, head, after } = await headThenNext(service.port, `/proxy/${agent.api_key}/${upstream.authority}/json`, HOLD_S * 1000 + 700);
  t.strictSame(statuses, [202, 200], '202, then the next answer');
  t.match(head, /\r\ncontent-length: [1-9]\d*\r\n/i, "with the length the GET's body would have");
  t.match(after, /^HTTP\/1\.1 200 /, `no body after the head (${JSON.stringify(after.slice(0, 120))})`);
});

t.test('an approved call that never reaches its tool (its connection dropped before TLS) is 502 and its approval is approved again: the retry, once the tool is back, is forwarded', async (t) => {
  // The tool's port: drops every connection until the tool is up, then passes them to it.
  const tool = await startUpstream();
  t.teardown(() => tool.close());
  let toolUp = false;
  const door = createNetServer((socket) => {
    if (!toolUp) {
      socket.destroy();
      return;
    }
    const inner = connect(tool.port, '127.0.0.1');
    socket.pipe(inner).pipe(socket);
    inner.on('error', () => socket.destroy());
    socket.on('error', () => inner.destroy());
  });
  await new Promise<void>((resolve) => door.listen(0, '127.0.0.1', resolve));
  t.teardown(() => door.close());
  const { port } = door.address() as AddressInfo;
  const send = (approvalId?: string) => call(payer.api_key, { authority: `127.0.0.1:${port}`, body: '{"invoice": 9}', ...(approvalId === undefined ? {} : { approvalId }) });
  const held = await send();
  t.equal(held.status, 202, 'held, then pending');
  const id = held.json.approval_id as string;
  await api(service.url, owner, 'POST', `/approvals/${id}/approve`);
  const unreachable = await send(id);
  t.match(unreachable, { status: 502, json: { error: 'upstream_unreachable' } }, 'the connection was dropped');
  t.equal(tool.seen.length, 0, 'nothing reached the tool');
  const status = () => api(service.url, owner, 'GET', `/approvals/${id}`).then((res) => res.json.status as string);
  t.equal(await eventually(async () => ((await status()) === 'approved' ? 'approved' : undefined), 3000), 'approved', 'the approval is approved again, not used');
  toolUp = true;
  const retry = await send(id);
  t.equal(retry.status, 200, 'the retry is forwarded');
  t.equal(tool.seen.length, 1, 'once');
  t.equal(await status(), 'used', 'and the approval is used');
  const audited = await auditOf(id, 2);
  t.same(audited.map((r) => `${r.decision} ${r.status_code}`).sort(), ['allowed 200', 'allowed 502'], 'both calls audited with the approval id');
});

t.test('a retry that differs in method, path, query or body is 409 approval_mismatch and leaves the approval as it was', async (t) => {
  const held = await call(payer.api_key, { body: 'pay 5', path: '/echo?a=1' });
  const id = held.json.approval_id as string;
  await api(service.url, owner, 'POST', `/approvals/${id}/approve`);
  const cases: [string, Parameters<typeof call>[1]][] = [
    ['method', { method: 'PUT', body: 'pay 5', path: '/echo?a=1' }],
    ['body', { body: 'pay 6', path: '/echo?a=1' }],
    ['query', { body: 'pay 5', path: '/echo?a=2' }],
    ['path', { body: 'pay 5', path: '/echo/other?a=1' }],
  ];
  for (const [field, init] of cases) {
    const res = await call(payer.api_key, { ...init, approvalId: id });
    t.equal(res.status, 409, field);
    t.match(res.json, { error: 'approval_mismatch', field });
  }
  t.equal((await api(service.url, owner, 'GET', `/approvals/${id}`)).json.status, 'approved', 'unchanged');
  const ok = await call(payer.api_key, { body: 'pay 5', path: '/echo?a=1', approvalId: id });
  t.equal(ok.status, 200, 'the matching retry still goes through');
});

t.test('an approval id the agent does not own is 404; X-Approval-Id on a call that needs none is ignored', async (t) => {
  const held = await call(payer.api_key, { body: 'mine' });
  const id = held.json.approval_id as string;
  const byOther = await call(other.api_key, { body: 'mine', approvalId: id });
  t.equal(byOther.status, 404, "another agent's approval");
  t.equal(byOther.json.error, 'not_found');
  t.equal((await call(payer.api_key, { body: 'mine', approvalId: 'not-a-uuid' })).status, 404);
  t.equal((await call(payer.api_key, { body: 'mine', approvalId: '00000000-0000-4000-8000-000000000000' })).status, 404);
  const free = await call(payer.api_key, { method: 'GET', approvalId: id });
  t.equal(free.status, 200, 'a GET needs no approval: the header is ignored');
  t.equal(upstream.seen[upstream.seen.length - 1]!.headers['x-approval-id'], undefined, 'and not forwarded');

  // Another org: 404 everywhere, and an empty list.
  t.equal((await api(service.url, stranger, 'GET', `/approvals/${id}`)).status, 404);
  t.equal((await api(service.url, stranger, 'POST', `/approvals/${id}/approve`)).status, 404);
  t.equal((await api(service.url, stranger, 'POST', `/approvals/${id}/deny`)).status, 404);
  // The approval is looked up before the body is read (docs/api.md decision 5): 404, not 400, for a bad note.
  t.equal((await api(service.url, stranger, 'POST', `/approvals/${id}/deny`, { note: 7 })).status, 404, "another org's approval with a bad body");
  t.equal((await api(service.url, owner, 'POST', '/approvals/00000000-0000-4000-8000-000000000000/approve', { note: 7 })).status, 404, 'an unknown id with a bad body');
  const badNote = await api(service.url, owner, 'POST', `/approvals/${id}/approve`, { note: 7 });
  t.match(badNote, { status: 400, json: { error: 'invalid_request', field: 'note' } }, 'a known id with a bad body');
  t.same((await api(service.url, stranger, 'GET', '/approvals')).json, []);
  t.same((await api(service.url, stranger, 'GET', `/approvals?agent_id=${payer.id}`)).json, [], 'an agent of another org lists nothing');
  t.equal((await api(service.url, owner, 'GET', `/approvals/${id}`)).json.status, 'pending', 'untouched by the stranger');
  t.equal((await api(service.url, owner, 'GET', '/approvals?status=maybe')).status, 400, 'a bad status is 400');
  t.equal((await api(service.url, null, 'GET', '/approvals')).status, 401, 'a JWT is required');
});

t.test('two retries racing with one approval: exactly one is forwarded', async (t) => {
  const held = await call(payer.api_key, { body: 'race' });
  const id = held.json.approval_id as string;
  await api(service.url, owner, 'POST', `/approvals/${id}/approve`);
  const seenBefore = upstream.seen.length;
  const answers = await Promise.all(Array.from({ length: 6 }, () => call(payer.api_key, { body: 'race', approvalId: id })));
  t.same(answers.map((a) => a.status).sort(), [200, 409, 409, 409, 409, 409]);
  t.equal(upstream.seen.length - seenBefore, 1, 'the upstream saw one call');
});

t.test('a held call whose agent is deleted is answered 401 at once, and an approval given then forwards nothing', async (t) => {
  const doomed = await agentWithPolicy(t, 'doomed');
  const seenBefore = upstream.seen.length;
  const held = call(doomed.api_key, { body: 'after the agent is gone' });
  const approval = await pendingFor(doomed.id);
  t.equal((await api(service.url, owner, 'DELETE', `/agents/${doomed.id}`)).status, 204);
  await api(service.url, owner, 'POST', `/approvals/${approval.id}/approve`);
  const answer = await held;
  t.equal(answer.status, 401, `answered as an unknown key (${answer.status} after ${answer.ms} ms)`);
  t.equal(answer.json.error, 'invalid_api_key');
  t.ok(answer.ms < HOLD_S * 1000, 'before its hold ended');
  await new Promise((r) => setTimeout(r, 300));
  t.equal(upstream.seen.length, seenBefore, 'the upstream saw nothing');
});

t.test('a held call whose agent\'s policy changes is answered 202 at once; approved then, its retry is decided by the new policy', async (t) => {
  const locked = await agentWithPolicy(t, 'locked-down');
  const seenBefore = upstream.seen.length;
  const held = call(locked.api_key, { body: 'before the lock-down' });
  const approval = await pendingFor(locked.id);
  // The operator locks the agent down while its call waits; someone approves from the inbox afterwards.
  t.equal((await api(service.url, owner, 'POST', `/agents/${locked.id}/policy`, { rules_yaml: 'version: "1"\ndefault: deny\nrules: []\n' })).status, 200);
  const answer = await held;
  t.equal(answer.status, 202, `released (${answer.status} after ${answer.ms} ms)`);
  t.ok(answer.ms < HOLD_S * 1000, 'before its hold ended');
  t.equal((await api(service.url, owner, 'POST', `/approvals/${approval.id}/approve`)).status, 200);
  const retry = await call(locked.api_key, { body: 'before the lock-down', approvalId: approval.id });
  t.equal(retry.status, 403, 'the retry is denied by the policy in force');
  t.equal(retry.json.error, 'policy_denied');
  await new Promise((r) => setTimeout(r, 300));
  t.equal(upstream.seen.length, seenBefore, 'the upstream saw nothing');
  t.equal((await api(service.url, owner, 'GET', `/approvals/${approval.id}`)).json.status, 'approved', 'the approval forwarded nothing');
});

t.test('a call whose agent\'s policy changes while its body still arrives is answered 202, not held under the old decision', async (t) => {
  const slow = await agentWithPolicy(t, 'slow-body');
  let sendRest!: () => void;
  const rest = new Promise<void>((resolve) => (sendRest = resolve));
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      controller.enqueue(new TextEncoder().encode('the first half, '));
      await rest;
      controller.enqueue(new TextEncoder().encode('the rest'));
      controller.close();
    },
  });
  const seenBefore = upstream.seen.length;
  const answer = fetch(`${service.url}/proxy/${slow.api_key}/${upstream.authority}/echo`, { method: 'POST', body, duplex: 'half' } as RequestInit)
    .then(async (r) => ({ status: r.status, text: await r.text() }));
  await new Promise((r) => setTimeout(r, 300)); // decided on its head: approve
  // Locked down while the body comes (as slowly as the agent likes): no call was held yet for the change to release.
  t.equal((await api(service.url, owner, 'POST', `/agents/${slow.id}/policy`, { rules_yaml: 'version: "1"\ndefault: deny\nrules: []\n' })).status, 200);
  sendRest();
  const approval = await pendingFor(slow.id);
  await api(service.url, owner, 'POST', `/approvals/${approval.id}/approve`);
  const res = await answer;
  t.equal(res.status, 202, `answered 202: its retry is decided by the policy now (${res.text})`);
  await new Promise((r) => setTimeout(r, 300));
  t.equal(upstream.seen.length, seenBefore, 'nothing was forwarded');
});

t.test('an agent deleted while its call that needs approval still sends its body: the approval given then forwards nothing', async (t) => {
  const doomed = await agentWithPolicy(t, 'doomed-early');
  const seenBefore = upstream.seen.length;
  const socket = connect(Number(new URL(service.url).port), '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  let answer = '';
  socket.on('data', (chunk: Buffer) => { answer += chunk.toString('latin1'); });
  const body = 'x'.repeat(100);
  socket.write(`POST /proxy/${doomed.api_key}/${upstream.authority}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 50)}`);
  await new Promise((r) => setTimeout(r, 300)); // the call reads its body (the hold collects it)
  t.equal((await api(service.url, owner, 'DELETE', `/agents/${doomed.id}`)).status, 204);
  socket.write(body.slice(50));
  const approval = await eventually(async () => {
    const res = await api(service.url, owner, 'GET', '/approvals?status=pending&limit=1000');
    return (res.json as any[]).find((a) => a.agent_id === doomed.id);
  }, 5000).catch(() => undefined);
  if (approval !== undefined) await api(service.url, owner, 'POST', `/approvals/${approval.id}/approve`);
  await eventually(async () => (answer.includes('\r\n\r\n') ? true : undefined), 5000);
  socket.destroy();
  t.match(answer, /^HTTP\/1\.1 401 /, `answered as an unknown key: ${answer.split('\r\n')[0]}`);
  await new Promise((r) => setTimeout(r, 300));
  t.equal(upstream.seen.length, seenBefore, 'the upstream saw nothing');
});

t.test('an approved retry whose held body is gone from the store forwards its own body (the same bytes by hash), never an empty one', async (t) => {
  const body = 'the approved body, 32 bytes long';
  t.equal((await call(payer.api_key, { body })).status, 202);
  const approval = await pendingFor(payer.id);
  t.equal((await api(service.url, owner, 'POST', `/approvals/${approval.id}/approve`)).status, 200);
  // As a drop of expired bodies by a process whose clock runs ahead would leave it.
  const db = new Database(join(env.DATA_DIR, 'metadata.sqlite'));
  db.prepare('UPDATE approvals SET body = NULL WHERE id = ?').run(approval.id);
  db.close();
  const retry = await call(payer.api_key, { body, approvalId: approval.id });
  t.equal(retry.status, 200, `forwarded (${JSON.stringify(retry.json).slice(0, 100)})`);
  t.equal(retry.json.body_bytes, Buffer.byteLength(body), 'with the whole body');
});

t.test('an approved retry whose claim cannot be written (the store busy) gives its count of a rate limit back', async (t) => {
  const limited = await createAgent(service.url, owner, 'claim-fails');
  const policy = `${POLICY}limits:\n  - name: once\n    tool: "*"\n    rate: 1/minute\n`;
  t.equal((await api(service.url, owner, 'POST', `/agents/${limited.id}/policy`, { rules_yaml: policy })).status, 200);
  t.equal((await call(limited.api_key, { body: 'pay once' })).status, 202, 'held, then pending');
  const approval = await pendingFor(limited.id);
  t.equal((await api(service.url, owner, 'POST', `/approvals/${approval.id}/approve`)).status, 200);
  // Another connection holds the database's write lock past the store's 5 s
  // busy wait: reads go on (WAL), the claim's write fails.
  const db = new Database(join(env.DATA_DIR, 'metadata.sqlite'));
  db.exec('BEGIN IMMEDIATE');
  let failed: Answer;
  try {
    failed = await call(limited.api_key, { body: 'pay once', approvalId: approval.id });
  } finally {
    db.exec('ROLLBACK');
    db.close();
  }
  t.equal(failed.status, 503, 'the claim could not be written');
  const retry = await call(limited.api_key, { body: 'pay once', approvalId: approval.id });
  t.equal(retry.status, 200, `the limit's count was given back: the retry is forwarded (${JSON.stringify(retry.json).slice(0, 120)})`);
});

t.test('a call that needs approval whose client leaves while its body arrives is audited denied (499), not allowed', async (t) => {
  const leaver = await agentWithPolicy(t, 'leaves-mid-body');
  const socket = connect(Number(new URL(service.url).port), '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write(`POST /proxy/${leaver.api_key}/${upstream.authority}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n${'x'.repeat(10)}`);
  await new Promise((r) => setTimeout(r, 300));
  socket.destroy();
  const row = await eventually(async () => {
    const rows = (await api(service.url, owner, 'GET', `/audit?agent_id=${leaver.id}`)).json as any[];
    return rows[0];
  }, 5000);
  t.match(row, { status_code: 499, decision: 'denied', rule_matched: 'payments' });
});

t.test('a body over 1 MiB on a call that needs approval is 413 at once, and no approval is made', async (t) => {
  const before = ((await api(service.url, owner, 'GET', `/approvals?agent_id=${payer.id}&limit=1000`)).json as any[]).length;
  const res = await call(payer.api_key, { body: patternBytes(1024 * 1024 + 1) });
  t.equal(res.status, 413);
  t.equal(res.json.error, 'payload_too_large');
  t.ok(res.ms < 1000, 'at once');
  const exactly = call(payer.api_key, { body: patternBytes(1024 * 1024) });
  t.equal((await exactly).status, 202, 'exactly 1 MiB is held');
  const after = ((await api(service.url, owner, 'GET', `/approvals?agent_id=${payer.id}&limit=1000`)).json as any[]).length;
  t.equal(after, before + 1, 'only the 1 MiB call made an approval');
});

t.test('an agent with APPROVAL_MAX_PENDING approvals pending gets 429 for the next call that needs one, and no approval is made', async (t) => {
  const eager = await createAgent(service.url, owner, 'eager');
  await api(service.url, owner, 'POST', `/agents/${eager.id}/policy`, { rules_yaml: POLICY });
  const answers = await Promise.all(Array.from({ length: 25 }, (_, i) => call(eager.api_key, { body: `call ${i}` })));
  const refused = answers.filter((a) => a.status === 429);
  t.equal(answers.filter((a) => a.status === 202).length, 20, 'up to the bound, held');
  t.equal(refused.length, 5, 'beyond it, refused');
  t.match(refused[0]!.json, { error: 'rate_limited', limit: 'pending_approvals', retry_after: 60 });
  t.equal(refused[0]!.headers.get('retry-after'), '60');
  t.ok(refused.every((a) => a.ms < HOLD_S * 1000), 'at once, not after the hold');
  t.equal(((await api(service.url, owner, 'GET', `/approvals?agent_id=${eager.id}&status=pending`)).json as any[]).length, 20, 'no approval was made for them');
  const rows = await eventually(async () => {
    const list = (await api(service.url, owner, 'GET', `/audit?agent_id=${eager.id}&decision=denied`)).json as any[];
    return list.length === 5 ? list : undefined;
  });
  t.ok(rows.every((r) => r.rule_matched === 'limit:pending_approvals' && r.status_code === 429), 'audited as a limit');
});

t.test('the webhook gets each new approval, signed with HMAC-SHA256 of the raw body, retried after a failure', async (t) => {
  const held = await call(payer.api_key, { body: 'notify me' });
  const id = held.json.approval_id as string;
  const hook = await eventually(async () => hooks.find((h) => h.body.includes(id)), 10_000);
  t.ok(refusedOnce.has(id), 'the first attempt was refused, and it was retried');
  const expected = `sha256=${createHmac('sha256', WEBHOOK_SECRET).update(hook.body).digest('hex')}`;
  t.equal(hook.headers['x-guard-signature'], expected, 'signed over the raw body');
  const json = JSON.parse(hook.body.toString('utf8'));
  t.match(json, { id, status: 'pending', agent_id: payer.id, approve_url: `http://guard.example.test/approvals/${id}/approve` });
  t.notOk(service.output().includes(WEBHOOK_SECRET), 'the secret is never logged');
  t.notOk(service.output().includes(env.APPROVAL_WEBHOOK_URL), "the webhook URL's path is never logged");
  t.match(service.output(), /approval webhook failed; retrying/, 'the failure is logged');
  const metrics = await (await fetch(`${service.url}/metrics`)).text();
  t.match(metrics, /tcg_approval_webhook_failures_total [1-9]/);
  t.match(metrics, /tcg_approval_webhook_deliveries_total [1-9]/);
});

t.test('an approval nobody decides expires: the retry is 403 approval_expired, audited', async (t) => {
  const first = await expiring;
  t.equal(first.status, 202);
  const id = first.json.approval_id as string;
  await eventually(async () => ((await api(service.url, owner, 'GET', `/approvals/${id}`)).json.status === 'expired' ? true : undefined), 15_000);
  t.same(((await api(service.url, owner, 'GET', '/approvals?status=expired')).json as any[]).map((a) => a.id), [id]);
  const late = await api(service.url, owner, 'POST', `/approvals/${id}/approve`);
  t.equal(late.status, 409, 'too late to decide');
  const retry = await call(other.api_key, { method: 'PUT', body: 'late', approvalId: id });
  t.equal(retry.status, 403);
  t.equal(retry.json.error, 'approval_expired');
  const [row] = await auditOf(id);
  t.match(row, { decision: 'denied', status_code: 403, approval_id: id });
});

t.test('after a restart, a pending approval is decided and its retry forwards the stored body', async (t) => {
  const body = patternBytes(70_000);
  const held = await call(payer.api_key, { body });
  const id = held.json.approval_id as string;
  t.equal(await service.stop(), 0, 'a clean stop');
  service = await spawnService('all-in-one', env);
  owner = await login(service.url, ownerEmail);
  t.equal((await api(service.url, owner, 'GET', `/approvals/${id}`)).json.status, 'pending', 'the approval outlived the process');
  await api(service.url, owner, 'POST', `/approvals/${id}/approve`);
  const retry = await call(payer.api_key, { body, approvalId: id });
  t.equal(retry.status, 200);
  t.equal(retry.json.body_bytes, 70_000);
  t.equal(retry.json.body_sha256, (await import('node:crypto')).createHash('sha256').update(body).digest('hex'), 'byte-identical');
});

t.test('shutdown answers a held call 202 at once instead of holding the drain', async (t) => {
  const slow = await spawnService('all-in-one', { ...env, DATA_DIR: join(root, 'slow'), APPROVAL_HOLD_S: '60', APPROVAL_WEBHOOK_URL: '', APPROVAL_WEBHOOK_SECRET: '' });
  t.teardown(() => slow.stop());
  const session = await signup(slow.url);
  const agent = await createAgent(slow.url, session, 'held');
  await api(slow.url, session, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: POLICY });
  const started = Date.now();
  const pending = fetch(`${slow.url}/proxy/${agent.api_key}/${upstream.authority}/echo`, { method: 'POST', body: 'wait' });
  await eventually(async () => ((await api(slow.url, session, 'GET', '/approvals')).json as any[])[0], 5000);
  const stopped = slow.stop();
  const res = await pending;
  t.equal(res.status, 202, 'answered 202: the approval waits for the retry');
  t.ok(Date.now() - started < 10_000, 'not held for APPROVAL_HOLD_S');
  t.equal(await stopped, 0);
});
