// GET /audit/stream (CONTRACT.md "Operator console"): server-sent events of the
// org's new audit entries, on the real service. The head comes at once, an entry
// within 2 s of being written (as GET /audit lists it), the filters of GET /audit
// apply (a bad one is 400), no token is 401, another org's entries never arrive,
// a comment keeps an idle stream open, a split-mode proxy streams it from the
// admin process, and a process with open streams stops promptly on SIGTERM.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { api, createAgent, signup, startTestService, tokenExpiringIn, TLS_DIR, type Session } from '../support/service.js';
import { eventually } from '../support/eventually.js';
import { openSse, type SseEvent } from '../support/sse-client.js';
import { spawnService } from '../support/spawn-service.js';
import { splitModeEnv } from '../support/split-mode.js';
import { startUpstream } from '../support/upstream.js';

const KEEPALIVE_MS = 400;
const upstream = await startUpstream();
const service = await startTestService({ AUDIT_STREAM_KEEPALIVE_MS: String(KEEPALIVE_MS) });
const base = service.url;
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

const owner = await signup(base);
const agent = await createAgent(base, owner, 'streamed');
const stream = (session: Session | null, query = '') => openSse(`${base}/audit/stream${query}`, session?.auth ?? {});

async function writeEntry(session: Session, agentId: string, fields: Record<string, unknown> = {}) {
  const res = await api(base, session, 'POST', '/audit', { agent_id: agentId, tool_name: 'api.example.com', action: 'GET', decision: 'allowed', ...fields });
  if (res.status !== 201) throw new Error(`POST /audit: ${res.status} ${res.text}`);
  return res.json as { id: string };
}

const withId = (id: string) => (e: SseEvent) => e.id === id;

t.test('the head is sent at once, as an event stream', async (t) => {
  const s = await stream(owner);
  t.teardown(() => s.close());
  t.equal(s.status, 200);
  t.match(s.headers.get('content-type'), /^text\/event-stream/);
  t.match(s.headers.get('cache-control'), /no-store/);
  t.ok(s.headMs < 1000, `head after ${s.headMs} ms, before any entry exists`);
});

t.test('an entry arrives within 2 s of being written, exactly as GET /audit lists it', async (t) => {
  const s = await stream(owner);
  t.teardown(() => s.close());
  const written = await writeEntry(owner, agent.id, { reasoning: 'line one\nline two', task_id: 'task-7' });
  const writtenAt = Date.now(); // POST /audit answers once the entry is durable
  const event = await s.nextEvent(withId(written.id), 2000);
  t.ok(event, `arrived ${Date.now() - writtenAt} ms after the write`);
  t.equal(event?.event, 'audit');
  const listed = (await api(base, owner, 'GET', `/audit?agent_id=${agent.id}&task_id=task-7`)).json[0];
  t.same(JSON.parse(event?.data ?? 'null'), listed, 'the data is the entry as GET /audit lists it');
  t.equal(s.events.filter((e) => e.id === written.id).length, 1, 'sent once');
});

t.test('entries written before the stream opened are not replayed', async (t) => {
  const before = await writeEntry(owner, agent.id);
  await new Promise((r) => setTimeout(r, 50));
  const s = await stream(owner);
  t.teardown(() => s.close());
  const after = await writeEntry(owner, agent.id);
  t.ok(await s.nextEvent(withId(after.id), 2000), 'the new one arrives');
  t.notOk(s.events.some((e) => e.id === before.id), 'the earlier one does not');
});

t.test('a proxied call arrives in the stream', async (t) => {
  const s = await stream(owner, `?agent_id=${agent.id}`);
  t.teardown(() => s.close());
  const res = await fetch(`${base}/proxy/${agent.api_key}/${upstream.authority}/json`, { headers: { 'x-agent-reasoning': 'checking the stream' } });
  t.equal(res.status, 200);
  await res.arrayBuffer();
  const event = await s.nextEvent((e) => JSON.parse(e.data).reasoning === 'checking the stream', 2500);
  t.ok(event, 'the proxied call is streamed');
  t.equal(JSON.parse(event?.data ?? '{}').source, 'proxy');
});

t.test('the filters of GET /audit apply', async (t) => {
  const other = await createAgent(base, owner, 'other');
  const denied = await stream(owner, '?decision=denied');
  const byAgent = await stream(owner, `?agent_id=${other.id}`);
  const byTool = await stream(owner, '?tool_name=tools.example.org');
  t.teardown(() => [denied, byAgent, byTool].forEach((s) => s.close()));
  const allowedEntry = await writeEntry(owner, agent.id);
  const deniedEntry = await writeEntry(owner, agent.id, { decision: 'denied' });
  const otherEntry = await writeEntry(owner, other.id, { tool_name: 'tools.example.org' });
  t.ok(await denied.nextEvent(withId(deniedEntry.id), 2000), 'decision=denied: the denied entry');
  t.ok(await byAgent.nextEvent(withId(otherEntry.id), 2000), 'agent_id: that agent\'s entry');
  t.ok(await byTool.nextEvent(withId(otherEntry.id), 2000), 'tool_name: that tool\'s entry');
  // All three were written before the last one arrived, so any of them would be in by now.
  t.same(denied.events.map((e) => e.id), [deniedEntry.id], 'nothing else with decision=denied');
  t.same(byAgent.events.map((e) => e.id), [otherEntry.id], 'nothing else with agent_id');
  t.same(byTool.events.map((e) => e.id), [otherEntry.id], 'nothing else with tool_name');
  t.notOk(denied.events.some((e) => e.id === allowedEntry.id));
});

t.test('a bad filter is 400 invalid_request naming it, before any stream', async (t) => {
  for (const [query, field] of [['decision=maybe', 'decision'], ['agent_id=not-a-uuid', 'agent_id'], ['since=yesterday', 'since'], ['until=2026-13-45', 'until']] as const) {
    const res = await api(base, owner, 'GET', `/audit/stream?${query}`);
    t.equal(res.status, 400, query);
    t.equal(res.json?.error, 'invalid_request');
    t.match(res.json?.message, field);
    t.match(res.headers.get('content-type'), /application\/json/);
  }
});

t.test('no token, or a bad one, is 401', async (t) => {
  t.equal((await api(base, null, 'GET', '/audit/stream')).status, 401);
  t.equal((await api(base, null, 'GET', '/audit/stream', undefined, { authorization: 'Bearer nope' })).json?.error, 'unauthorized');
  t.equal((await api(base, null, 'GET', `/audit/stream?access_token=${owner.token}`)).status, 401, 'a token in the URL is not read');
});

t.test('another org\'s entries never arrive, even when its agent id is named', async (t) => {
  const intruder = await signup(base);
  const everything = await stream(intruder);
  const named = await stream(intruder, `?agent_id=${agent.id}`);
  const mine = await stream(owner);
  t.teardown(() => [everything, named, mine].forEach((s) => s.close()));
  const secret = await writeEntry(owner, agent.id, { reasoning: 'org A only' });
  t.ok(await mine.nextEvent(withId(secret.id), 2000), 'the owner sees it');
  await new Promise((r) => setTimeout(r, 1200)); // a full poll more
  t.same(everything.events, [], 'the other org\'s stream got nothing');
  t.same(named.events, [], 'naming the agent id does not help');
});

t.test('a comment line keeps an idle stream open', async (t) => {
  const s = await stream(owner);
  t.teardown(() => s.close());
  const started = Date.now();
  t.ok(await s.comment('keepalive', 2, KEEPALIVE_MS * 4), `two keep-alive comments within ${KEEPALIVE_MS * 4} ms (AUDIT_STREAM_KEEPALIVE_MS=${KEEPALIVE_MS})`);
  t.ok(Date.now() - started >= KEEPALIVE_MS, 'spaced by the interval, not sent at once');
});

t.test('a subscriber that reads slowly gets every entry once, whole', async (t) => {
  // The hub writes up to 64 KiB at a time; the adapter writes it in pieces that
  // fit uWS's cork buffer (shared/uws-write.ts), since a larger write can lose
  // its bytes when the client is behind. small-socket-buffers.test.ts runs this
  // where the subscriber's socket is full most of the time.
  const ids: string[] = [];
  let text = '';
  let failed: Error | null = null;
  let subscribed!: () => void;
  const headArrived = new Promise<void>((resolve) => { subscribed = resolve; });
  const req = httpGet(`${base}/audit/stream?agent_id=${agent.id}`, { headers: { accept: 'text/event-stream', ...owner.auth } }, (res) => {
    subscribed(); // the head is sent once the subscription is in place
    res.setEncoding('utf8');
    res.pause();
    setTimeout(() => res.resume(), 1000); // behind from the start: the first batches wait in the proxy's socket
    res.on('data', (chunk: string) => {
      text += chunk;
      res.pause();
      setTimeout(() => res.resume(), 1); // then slowly, so that the service meets a full socket again and again
    });
    res.on('error', (err) => { failed = err; });
  });
  req.on('error', (err) => { failed = err; });
  t.teardown(() => req.destroy());
  await headArrived;
  const reasoning = 'r'.repeat(3000);
  for (let round = 0; round < 10; round++) {
    const written = await Promise.all(Array.from({ length: 30 }, () => writeEntry(owner, agent.id, { reasoning })));
    ids.push(...written.map((w) => w.id));
  }
  const seen = (): string[] => [...text.matchAll(/^id: (.+)$/gm)].map((m) => m[1]!);
  const deadline = Date.now() + 15_000;
  while (seen().length < ids.length && failed === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  t.equal(failed, null, 'the response parsed to its end (its chunk framing intact)');
  const got = seen();
  t.equal(got.length, ids.length, `all ${ids.length} entries (about 1 MB of events)`);
  t.strictSame([...got].sort(), [...ids].sort(), 'each once');
  const datas = [...text.matchAll(/^data: (.+)$/gm)].map((m) => m[1]!);
  t.ok(datas.every((d) => (JSON.parse(d) as { reasoning: string }).reasoning === reasoning), 'every event whole');
});

t.test('a subscriber that reads nothing is dropped once 8 MiB wait for it, counted in bytes (CJK text is 3 a character)', async (t) => {
  const reader = await createAgent(base, owner, 'never-read');
  const socket = netConnect(service.port, '127.0.0.1');
  let closed = false;
  socket.on('close', () => { closed = true; });
  socket.on('error', () => undefined);
  t.teardown(() => socket.destroy());
  let head = '';
  let received = 0;
  let reading = true;
  socket.on('data', (d: Buffer) => {
    received += d.length;
    if (!reading) return;
    head += d.toString('latin1');
    if (head.includes('\r\n\r\n')) {
      reading = false;
      socket.pause(); // the head read, then nothing more
    }
  });
  socket.write(`GET /audit/stream?agent_id=${reader.id} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${owner.token}\r\n\r\n`);
  await eventually(async () => (head.includes('\r\n\r\n') ? true : undefined), 3000);
  // 100 entries of 64 Ki CJK characters: 19 MiB of events, 6.4 Mi UTF-16 units; the kernel's socket buffers take ~4 MiB of it.
  const reasoning = '中'.repeat(65_536);
  for (let round = 0; round < 10; round++) await Promise.all(Array.from({ length: 10 }, () => writeEntry(owner, reader.id, { reasoning })));
  await new Promise((resolve) => setTimeout(resolve, 3000)); // the poller hands them over within 2 s
  socket.resume(); // the close is seen once what the kernel holds is read
  const outcome = await eventually(async () => (closed ? 'closed' : undefined), 5000).catch(() => 'open');
  t.equal(outcome, 'closed', 'the service closed the connection');
  t.ok(received < 10 * 2 ** 20, `after what the kernel held: ${(received / 2 ** 20).toFixed(1)} of 19 MiB (all of it when the bound counted characters)`);
});

t.test('a stream ends when its token expires, with an `expired` event first (a client tells it from a shutdown)', async (t) => {
  // The owner's token again, expiring in 2 s, signed with the service's generated key as the service signs.
  const { jwt_secret: secret } = JSON.parse(readFileSync(join(service.dataDir, 'secrets.json'), 'utf8')) as { jwt_secret: string };
  const soon = await tokenExpiringIn(owner.token, secret, 2);
  const opened = Date.now();
  const res = await fetch(`${base}/audit/stream`, { headers: { authorization: `Bearer ${soon}` } });
  t.equal(res.status, 200);
  const text = await res.text(); // to the stream's end
  t.ok(Date.now() - opened < 6000, `ended ${Date.now() - opened} ms after it opened`);
  t.match(text, /event: expired\ndata: \{"reason":"the token expired"\}\n\n$/, 'its last event says why');
});

t.test('split mode: a proxy streams GET /audit/stream from the admin process', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-stream-split-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const env = await splitModeEnv(t, dir, {
    PORT: '0',
    GUARD_ALLOW_TARGETS: '127.0.0.1',
    NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'),
    AUDIT_BATCH_MS: '20',
    CHANGE_POLL_MS: '100',
  });
  const admin = await spawnService('admin', { ...env, SPOOL_DIR: join(dir, 'spool-admin') });
  const proxy = await spawnService('proxy', { ...env, ADMIN_URL: admin.url, SPOOL_DIR: join(dir, 'spool-proxy') });
  t.teardown(async () => {
    await proxy.stop();
    await admin.stop();
  });
  const session = await signup(proxy.url);
  const splitAgent = await createAgent(proxy.url, session, 'split');
  const s = await openSse(`${proxy.url}/audit/stream`, session.auth);
  t.equal(s.status, 200);
  t.match(s.headers.get('content-type'), /^text\/event-stream/);
  const res = await fetch(`${proxy.url}/proxy/${splitAgent.api_key}/${upstream.authority}/json`, { headers: { 'x-agent-task-id': 'split-task' } });
  await res.arrayBuffer();
  const event = await s.nextEvent((e) => JSON.parse(e.data).task_id === 'split-task', 3000);
  t.ok(event, 'the call the proxy wrote to ClickHouse arrives through the proxy\'s pass-through');
  const stopping = Date.now();
  const exit = proxy.stop();
  t.ok(await s.ended(3000), 'the passed-through stream ends when the proxy stops');
  t.equal(await exit, 0);
  t.ok(Date.now() - stopping < 3000, `the proxy stopped in ${Date.now() - stopping} ms with a stream open`);
});

t.test('SIGTERM: a process with open streams ends them and exits within a couple of seconds', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-stream-stop-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const child = await spawnService('all-in-one', { DATA_DIR: dir, PORT: '0' });
  const session = await signup(child.url);
  const streams = await Promise.all([1, 2, 3].map(() => openSse(`${child.url}/audit/stream`, session.auth)));
  t.same(streams.map((s) => s.status), [200, 200, 200]);
  const started = Date.now();
  const exit = child.stop();
  for (const s of streams) t.ok(await s.ended(3000), 'the stream was ended by the server');
  t.equal(await exit, 0, 'exit code 0');
  t.ok(Date.now() - started < 3000, `exited ${Date.now() - started} ms after SIGTERM`);
});

t.test('with the default batch settings, proxied calls under steady load arrive within 2 s of their answers', async (t) => {
  // The defaults (AUDIT_BATCH_MS 250, AUDIT_BATCH_INTERVAL_MS 1000,
  // AUDIT_STREAM_POLL_MS 250) are what docs/api.md promises 2 s with.
  const dir = mkdtempSync(join(tmpdir(), 'tcg-stream-defaults-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const child = await spawnService('all-in-one', { DATA_DIR: dir, PORT: '0', GUARD_ALLOW_TARGETS: '127.0.0.1', NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt') });
  t.teardown(() => child.stop());
  const session = await signup(child.url);
  const loaded = await createAgent(child.url, session, 'steady');
  const s = await openSse(`${child.url}/audit/stream`, session.auth);
  t.teardown(() => s.close());
  const answeredAt = new Map<string, number>();
  const seenAt = new Map<string, number>();
  let watching = true;
  const watcher = (async () => {
    while (watching || seenAt.size < answeredAt.size) {
      for (const e of s.events) {
        const task = (JSON.parse(e.data) as { task_id: string }).task_id;
        if (!seenAt.has(task)) seenAt.set(task, Date.now());
      }
      await new Promise((r) => setTimeout(r, 10));
      if (!watching && Date.now() - Math.max(...answeredAt.values()) > 5000) break;
    }
  })();
  const until = Date.now() + 3000;
  for (let i = 0; Date.now() < until; i++) {
    const task = `steady-${i}`;
    const res = await fetch(`${child.url}/proxy/${loaded.api_key}/${upstream.authority}/json`, { headers: { 'x-agent-task-id': task } });
    await res.arrayBuffer();
    answeredAt.set(task, Date.now());
    await new Promise((r) => setTimeout(r, 5));
  }
  watching = false;
  await watcher;
  const late = [...answeredAt].map(([task, at]) => (seenAt.get(task) ?? Infinity) - at);
  t.ok(answeredAt.size > 50, `${answeredAt.size} calls over 3 s`);
  t.equal(seenAt.size, answeredAt.size, 'every call arrived');
  t.ok(Math.max(...late) <= 2000, `the latest arrived ${Math.max(...late)} ms after its answer (median ${late.sort((a, b) => a - b)[late.length >> 1]} ms)`);
});

t.test('the console: a missing asset is 404, not the index; an app path is the index', async (t) => {
  const missing = await fetch(`${base}/console/app-00000000.js`);
  t.equal(missing.status, 404);
  t.match(missing.headers.get('content-type') ?? '', /application\/json/);
  t.ok(missing.headers.get('content-security-policy'), 'with the console\'s security headers');
  t.equal(missing.headers.get('x-content-type-options'), 'nosniff');
  await missing.arrayBuffer();
  const posted = await fetch(`${base}/console`, { method: 'POST' });
  t.equal(posted.status, 405);
  t.equal(posted.headers.get('allow'), 'GET, HEAD');
  t.ok(posted.headers.get('content-security-policy'), 'a 405 under /console carries them too');
  t.ok(posted.headers.get('x-frame-options'));
  await posted.arrayBuffer();
  const app = await fetch(`${base}/console/agents`);
  t.equal(app.status, 200);
  t.match(await app.text(), /<html/i);
});
