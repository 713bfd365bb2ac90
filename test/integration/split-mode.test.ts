// Split mode end to end: one admin and two proxy processes sharing one SQLite
// file and a ClickHouse HTTP server (test/support: ClickHouse's HTTP interface
// over the embedded engine). The audit pipeline's fault tests (ClickHouse down,
// a proxy killed) are in split-mode-faults.test.ts.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createConnection, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import t from 'tap';
import { api, auditTotal, createAgent, eventually, signup, TLS_DIR, type Session } from '../support/service.js';
import { spawnService, startRefused, type SpawnedService } from '../support/spawn-service.js';
import { startSplitDeployment } from '../support/split-mode.js';
import { startUpstream } from '../support/upstream.js';

const root = mkdtempSync(join(tmpdir(), 'tcg-split-'));
const upstream = await startUpstream();
const split = await startSplitDeployment(root, {
  GUARD_ALLOW_TARGETS: '127.0.0.1',
  NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'),
  AUDIT_BATCH_MS: '50',
  CHANGE_POLL_MS: '100',
  PORT: '0',
});
const { admin, proxyEnv } = split;
const proxyA: SpawnedService = await spawnService('proxy', proxyEnv('a'));
const proxyB = await spawnService('proxy', proxyEnv('b'));
t.teardown(async () => {
  await Promise.allSettled([proxyA.stop(), proxyB.stop()]);
  await split.close();
  await upstream.close();
  rmSync(root, { recursive: true, force: true });
});

const owner: Session = await signup(proxyA.url);

const auditCount = (session: Session, agentId: string) => auditTotal(proxyA.url, session, agentId);

t.test('split mode refuses to start without shared secrets, CLICKHOUSE_URL and ADMIN_URL', async (t) => {
  for (const [missing, env] of [
    ['JWT_SECRET', { ...proxyEnv('x'), JWT_SECRET: '' }],
    ['AUDIT_SIGNING_KEY', { ...proxyEnv('x'), AUDIT_SIGNING_KEY: '' }],
    ['CLICKHOUSE_URL', { ...proxyEnv('x'), CLICKHOUSE_URL: '' }],
    ['ADMIN_URL', { ...proxyEnv('x'), ADMIN_URL: '' }],
  ] as const) {
    const err = await startRefused('proxy', env, 15_000);
    t.ok(err, `refused without ${missing}`);
    t.match(err?.message ?? '', new RegExp(missing));
  }
});

t.test('a proxy process loads no admin code, an admin process no proxy code', async (t) => {
  // Each wing's modules are imported by the roles that run it (server/compose.ts):
  // the admin side (PDF, passwords, tokens) is ~3 MiB of a split proxy's RSS.
  const hook = fileURLToPath(new URL('../support/module-log-hook.mjs', import.meta.url));
  const loaded = async (role: 'proxy' | 'admin', env: Record<string, string>): Promise<string> => {
    const log = join(root, `modules-${role}.txt`);
    const child = await spawnService(role, { ...env, NODE_OPTIONS: `--import ${hook}`, MODULE_LOG: log });
    await child.stop();
    return readFileSync(log, 'utf8');
  };
  const proxyModules = await loaded('proxy', proxyEnv('modules'));
  t.match(proxyModules, /\/proxy\/pipeline\.ts/, 'the proxy loads its pipeline (the log works)');
  t.notMatch(proxyModules, /\/admin\/app\.ts/, 'the proxy does not load the admin app');
  t.notMatch(proxyModules, /\/admin\/(?!http\.ts)/, 'nor any admin module but the shared body bound');
  const adminModules = await loaded('admin', { ...split.common, DATA_DIR: join(root, 'admin-modules'), SPOOL_DIR: join(root, 'spool-admin-modules') });
  t.match(adminModules, /\/admin\/app\.ts/, 'the admin loads its app');
  t.notMatch(adminModules, /\/proxy\/pipeline\.ts/, 'the admin does not load the proxy pipeline');
});

t.test('a proxy passes admin paths to the admin process and serves /proxy itself', async (t) => {
  const agent = await createAgent(proxyB.url, owner, 'split-agent');
  for (const proxy of [proxyA, proxyB]) {
    const res = await fetch(`${proxy.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
    t.equal(res.status, 200);
    await res.text();
  }
  t.equal(await eventually(async () => ((await auditCount(owner, agent.id)) === 2 ? 2 : undefined)), 2, 'both calls audited in ClickHouse');
  t.equal((await fetch(`${proxyA.url}/health`)).status, 200);
  t.equal(((await (await fetch(`${proxyA.url}/health`)).json()) as any).role, 'proxy');
});

t.test('HEAD through a proxy answers the head the admin process gives, its Content-Length that of the GET', async (t) => {
  await createAgent(proxyA.url, owner, 'head-agent');
  for (const path of ['/agents', '/audit/public-key']) {
    const get = await fetch(`${proxyA.url}${path}`, { headers: owner.auth });
    const body = Buffer.from(await get.arrayBuffer());
    t.equal(get.status, 200, `GET ${path}`);
    const viaProxy = await fetch(`${proxyA.url}${path}`, { method: 'HEAD', headers: owner.auth });
    const direct = await fetch(`${admin.url}${path}`, { method: 'HEAD', headers: owner.auth });
    t.equal(viaProxy.status, 200, `HEAD ${path} through the proxy`);
    t.equal(direct.headers.get('content-length'), String(body.length), `HEAD ${path} at the admin: the GET's length`);
    t.equal(viaProxy.headers.get('content-length'), direct.headers.get('content-length'), `HEAD ${path} through the proxy: the admin's length, not 0`);
    t.equal(viaProxy.headers.get('content-type'), get.headers.get('content-type'));
  }
});

t.test('a request undici would not send as it came is not answered as an unreachable admin (503)', async (t) => {
  const port = Number(new URL(proxyA.url).port);
  const auth = `Authorization: ${owner.auth.authorization}\r\n`;
  const send = (head: string) => new Promise<string>((resolve) => {
    const socket = createConnection(port, '127.0.0.1');
    let text = '';
    socket.on('data', (c: Buffer) => { text += c.toString('latin1'); });
    socket.on('close', () => resolve(text));
    socket.on('error', () => resolve(text));
    socket.write(Buffer.from(head, 'latin1'));
    setTimeout(() => socket.destroy(), 3000);
  });
  // A header with bytes beyond ASCII (those of '€'): passed on as they came.
  const euro = Buffer.from('€', 'utf8').toString('latin1');
  const noted = await send(`GET /agents HTTP/1.1\r\nHost: x\r\n${auth}X-Note: ${euro}\r\nConnection: close\r\n\r\n`);
  t.match(noted, /^HTTP\/1\.1 200 /, `the admin answers it, as all-in-one does: ${noted.split('\r\n')[0]}`);
  const connect = await send(`CONNECT /agents HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n`);
  t.notMatch(connect, /^HTTP\/1\.1 503 /, `a method undici cannot send is not 'admin unreachable': ${connect.split('\r\n')[0]}`);
});

t.test('a header the Connection header names is not passed to the admin process (RFC 9110 §7.6.1)', async (t) => {
  const page = await (await fetch(`${proxyA.url}/console`)).text();
  const asset = /src="(\/console\/app-[A-Z0-9]{8}\.js)"/.exec(page)![1]!;
  const first = await fetch(`${proxyA.url}${asset}`);
  await first.arrayBuffer();
  const etag = first.headers.get('etag')!;
  const port = Number(new URL(proxyA.url).port);
  const answer = await new Promise<string>((resolve) => {
    const socket = createConnection(port, '127.0.0.1');
    let text = '';
    socket.on('data', (c: Buffer) => { text += c.toString('latin1'); });
    socket.on('close', () => resolve(text));
    socket.write(`GET ${asset} HTTP/1.1\r\nHost: x\r\nIf-None-Match: ${etag}\r\nConnection: close, if-none-match\r\n\r\n`);
    setTimeout(() => socket.destroy(), 3000);
  });
  t.match(answer, /^HTTP\/1\.1 200 /, `If-None-Match, named in Connection, did not reach the admin (no 304): ${answer.split('\r\n')[0]}`);
});

t.test('entries written by two proxies are sealed in one chain each and verify through the admin process', async (t) => {
  const since = new Date(Date.now() - 1000).toISOString();
  const session = await signup(proxyA.url);
  const agent = await createAgent(proxyA.url, session, 'sealed-split');
  for (let i = 0; i < 6; i++) {
    const res = await fetch(`${(i % 2 === 0 ? proxyA : proxyB).url}/proxy/${agent.api_key}/${upstream.authority}/json`);
    await res.text();
  }
  const verified = await eventually(async () => {
    const res = await api(proxyB.url, session, 'GET', `/audit/verify?since=${since}`);
    const body = res.json as { ok: boolean; entries: number; pending: number };
    return body.entries === 6 && body.pending === 0 ? body : undefined;
  }, 10_000);
  t.match(verified, { ok: true, entries: 6, first_problem: null });
  const seals = (await api(proxyA.url, session, 'GET', `/audit/seals?since=${since}`)).json as { writer: string; seq: number; key_fingerprint: string }[];
  t.equal(new Set(seals.map((s) => s.writer)).size, 2, 'one chain per proxy');
  const key = await api(proxyA.url, session, 'GET', '/audit/public-key');
  t.ok(seals.every((s) => s.key_fingerprint === key.headers.get('x-key-fingerprint')), 'every writer signs with the shared key');
});

t.test('the admin process counts failed logins of an IPv6 client per /64 (its address from the proxy\'s X-Forwarded-For)', async (t) => {
  // Documentation addresses (RFC 3849) in a header only; no traffic goes to them.
  const login = (from: string, i: number) =>
    fetch(`${admin.url}/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-forwarded-for': from },
      body: JSON.stringify({ email: `v6-${i}-${Date.now()}@example.com`, password: 'wrong password!' }),
    }).then((res) => res.status);
  const statuses: number[] = [];
  for (let i = 0; i < 10; i++) statuses.push(await login(`2001:db8:5:6::${(i + 1).toString(16)}`, i));
  t.same(statuses, Array(10).fill(401), 'ten failures from ten addresses of one /64');
  t.equal(await login('2001:db8:5:6:ffff::1', 10), 429, 'an eleventh address of the same /64 is refused');
  t.equal(await login('2001:db8:5:7::1', 11), 401, 'the next /64 is another client');
});

t.test('several proxies may share one port (SO_REUSEPORT)', async (t) => {
  // uSockets shares a port it was given, not one the kernel picked for port 0.
  const port = await freePort();
  const one = await spawnService('proxy', { ...proxyEnv('one'), PORT: String(port) });
  const two = await spawnService('proxy', { ...proxyEnv('two'), PORT: String(port) });
  t.equal(one.port, port);
  t.equal(two.port, port);
  t.equal((await fetch(`${one.url}/health`)).status, 200);
  t.equal(await two.stop(), 0, 'stops cleanly');
  t.equal((await fetch(`${one.url}/health`)).status, 200, 'the other still serves the port');
  t.equal(await one.stop(), 0);
});

t.test('a proxy whose SECRET_KEY is not the one that sealed the credentials refuses to start; one started before they were stored says so in its log', async (t) => {
  const otherKey = { SECRET_KEY: randomBytes(32).toString('hex') };
  // Started while no credential is stored: nothing to check yet.
  const early = await spawnService('proxy', { ...proxyEnv('other-key-early'), ...otherKey, LOG_LEVEL: 'error' });
  t.teardown(() => early.stop());
  const agent = await createAgent(proxyA.url, owner, 'wrong-key');
  const cred = await api(proxyA.url, owner, 'POST', '/credentials', { name: 'sealed', hostname: upstream.authority, cred_type: 'bearer', value: 'sealed-under-the-admins-key' });
  t.equal(cred.status, 201);
  t.teardown(() => api(proxyA.url, owner, 'DELETE', `/credentials/${cred.json.id}`));
  const err = await startRefused('proxy', { ...proxyEnv('other-key'), ...otherKey });
  t.match(err?.message, /SECRET_KEY does not open the stored credentials/, 'refused at the start, naming the variable');
  t.notMatch(err?.message, /sealed-under-the-admins-key/, 'without the value');
  const res = await fetch(`${early.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
  t.equal(res.status, 500, 'no call goes out without its credential');
  t.match(await eventually(async () => (/cannot be opened: SECRET_KEY does not open/.test(early.output()) ? early.output() : undefined), 3000), new RegExp(`the credential for ${upstream.authority.replace(/[.]/g, '\\.')}`), 'the log names the host and the variable');
});

t.test('only proxies share a port: the admin process refuses one in use, and a proxy cannot take the admin\'s', async (t) => {
  // uWS listens with SO_REUSEPORT by default: a second all-in-one or admin on a port started, and the kernel split the connections between the two.
  const refused = async (role: 'proxy' | 'admin', port: number, name: string) => {
    const err = await startRefused(role, { ...proxyEnv(name), PORT: String(port) });
    t.match(err?.message, /cannot listen on 127\.0\.0\.1:\d+ \(the port is in use/, `${role === 'admin' ? 'an' : 'a'} ${role} on port ${port} is refused`);
  };
  await refused('proxy', admin.port, 'on-admin-port');
  t.equal((await fetch(`${admin.url}/health`)).status, 200, 'the admin process still has its port');
  const port = await freePort();
  const proxy = await spawnService('proxy', { ...proxyEnv('first'), PORT: String(port) });
  t.teardown(() => proxy.stop());
  await refused('admin', port, 'second-admin');
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

t.test('a delete or replace reaches every proxy within 1 s', async (t) => {
  const agent = await createAgent(proxyA.url, owner, 'coherent');
  const call = (proxy: SpawnedService, path = '/json') => fetch(`${proxy.url}/proxy/${agent.api_key}/${upstream.authority}${path}`).then(async (r) => {
    await r.arrayBuffer();
    return r.status;
  });
  // Warm proxy B's caches, then change things through proxy A.
  t.equal(await call(proxyB), 200);
  const policy = await api(proxyA.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: 'version: "1"\nrules:\n  - {name: no-json, tool: "*", action: GET, path: /json, decision: deny}\n' });
  t.equal(policy.status, 200);
  let started = Date.now();
  await eventually(async () => ((await call(proxyB)) === 403 ? true : undefined), 1000);
  t.ok(Date.now() - started <= 1000, `policy replaced at proxy B after ${Date.now() - started} ms`);

  const cred = await api(proxyA.url, owner, 'POST', '/credentials', { name: 'tok', hostname: upstream.authority, cred_type: 'bearer', value: 'split-secret' });
  t.equal(cred.status, 201);
  const seenAuth = async () => {
    const r = await fetch(`${proxyB.url}/proxy/${agent.api_key}/${upstream.authority}/echo`);
    return ((await r.json()) as any).headers.authorization as string | undefined;
  };
  await eventually(async () => ((await seenAuth()) === 'Bearer split-secret' ? true : undefined), 1000);
  t.equal((await api(proxyA.url, owner, 'DELETE', `/credentials/${cred.json.id}`)).status, 204);
  started = Date.now();
  await eventually(async () => ((await seenAuth()) === undefined ? true : undefined), 1000);
  t.ok(Date.now() - started <= 1000, 'credential delete reached proxy B');

  t.equal((await api(proxyA.url, owner, 'DELETE', `/agents/${agent.id}`)).status, 204);
  started = Date.now();
  await eventually(async () => ((await call(proxyB, '/echo')) === 401 ? true : undefined), 1000);
  t.ok(Date.now() - started <= 1000, `key revoked at proxy B after ${Date.now() - started} ms`);
});

t.test('an agent deleted before a proxy hears of it is not let through for want of its policy', async (t) => {
  // A proxy that polls for changes seldom: its window is wide enough to call into.
  const late = await spawnService('proxy', { ...proxyEnv('late'), CHANGE_POLL_MS: '1500' });
  t.teardown(() => late.stop());
  const agent = await createAgent(proxyA.url, owner, 'deleted-deny-all');
  const denyAll = (rule: string) => api(proxyA.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: `version: "1"\ndefault: deny\nrules:\n  - {name: ${rule}, tool: "*", action: DELETE, decision: deny}\n` });
  t.equal((await denyAll('first')).status, 200);
  const call = () => fetch(`${late.url}/proxy/${agent.api_key}/${upstream.authority}/json`, { method: 'DELETE' }).then(async (r) => ({ status: r.status, body: await r.text() }));
  t.equal((await call()).status, 403, 'denied: the late proxy holds the agent and its policy');
  // The policy replaced: the late proxy drops its copy at its next poll, and keeps the agent.
  t.equal((await denyAll('second')).status, 200);
  await new Promise((r) => setTimeout(r, 2500));
  t.equal((await api(proxyA.url, owner, 'DELETE', `/agents/${agent.id}`)).status, 204);
  const seen = upstream.seen.length;
  const after = await call(); // before its next poll: the agent cached, no policy stored any more
  t.equal(after.status, 401, `the deleted agent's key is refused (${after.body})`);
  t.match(JSON.parse(after.body), { error: 'invalid_api_key' });
  t.equal(upstream.seen.length, seen, 'nothing reached the tool');
});

t.test('a rate limit holds across two proxies under load: together they pass at most N', async (t) => {
  const agent = await createAgent(proxyA.url, owner, 'limited-split');
  const set = await api(proxyA.url, owner, 'POST', `/agents/${agent.id}/policy`, {
    rules_yaml: 'version: "1"\nrules: []\nlimits:\n  - name: shared\n    tool: "*"\n    rate: 20/minute\n',
  });
  t.equal(set.status, 200);
  // The policy reaches both proxies within a second (the change feed); then 8
  // clients per proxy call as fast as they can for 3 s.
  await new Promise((r) => setTimeout(r, 1000));
  const counts = { 200: 0, 429: 0, other: 0 };
  const retryAfters = new Set<string>();
  const deadline = Date.now() + 3000;
  await Promise.all(
    [proxyA, proxyB].flatMap((proxy) =>
      Array.from({ length: 8 }, async () => {
        while (Date.now() < deadline) {
          const res = await fetch(`${proxy.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
          await res.arrayBuffer();
          if (res.status === 200) counts[200]++;
          else if (res.status === 429) {
            counts[429]++;
            retryAfters.add(res.headers.get('retry-after') ?? 'none');
          } else counts.other++;
        }
      }),
    ),
  );
  t.ok(counts[200] <= 21, `${counts[200]} passed of N = 20 (over-admission at most 1 call)`);
  t.ok(counts[200] >= 18, `${counts[200]}: each proxy used its part`);
  t.ok(counts[429] > 100, `${counts[429]} refused`);
  t.equal(counts.other, 0, 'nothing else');
  t.notOk(retryAfters.has('none'), 'every 429 carries Retry-After');
  const metrics = await (await fetch(`${proxyA.url}/metrics`)).text();
  t.match(metrics, /tcg_rate_limit_proxies 2/, 'the proxy knows of two live proxies');
  t.match(metrics, /tcg_rate_limit_store_reachable 1/);
});

t.test('held calls: a decision made through the admin process reaches the proxy holding the call within 1 s, and two retries racing through two proxies forward once', async (t) => {
  const agent = await createAgent(proxyA.url, owner, 'split-payer');
  const policy = 'version: "1"\nrules:\n  - {name: pay, tool: "127.0.0.1", action: POST, decision: approve}\n';
  t.equal((await api(proxyA.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: policy })).status, 200);
  const target = (proxy: SpawnedService) => `${proxy.url}/proxy/${agent.api_key}/${upstream.authority}/echo`;
  const newPending = async (known: Set<string>) => {
    const approval = await eventually(async () => ((await api(admin.url, owner, 'GET', '/approvals?status=pending')).json as { id: string }[]).find((a) => !known.has(a.id)), 5000);
    known.add(approval.id);
    return approval;
  };
  const known = new Set<string>();
  // The policy reaches proxy A within CHANGE_POLL_MS; a call before that would be allowed.
  await new Promise((resolve) => setTimeout(resolve, 300));

  // Held on A, approved through the admin process (via proxy B's pass-through).
  const held = fetch(target(proxyA), { method: 'POST', body: 'pay 1' });
  const first = await newPending(known);
  const decidedAt = Date.now();
  t.equal((await api(proxyB.url, owner, 'POST', `/approvals/${first.id}/approve`)).status, 200);
  const answer = await held;
  const waited = Date.now() - decidedAt;
  t.equal(answer.status, 200, 'the held call is forwarded');
  await answer.arrayBuffer();
  t.ok(waited < 1000, `the decision reached proxy A in ${waited} ms`);

  // Denied through the admin process: the proxy answers 403 within 1 s.
  const heldAgain = fetch(target(proxyB), { method: 'POST', body: 'pay 2' });
  const second = await newPending(known);
  const deniedAt = Date.now();
  await api(proxyA.url, owner, 'POST', `/approvals/${second.id}/deny`, { note: 'no' });
  const refused = await heldAgain;
  t.equal(refused.status, 403);
  t.ok(Date.now() - deniedAt < 1000, 'within 1 s');
  t.match(await refused.json(), { error: 'approval_denied', message: 'no' });

  // A held call whose agent gave up leaves a pending approval; approved, then retried through both proxies at once.
  const controller = new AbortController();
  const abandoned = fetch(target(proxyA), { method: 'POST', body: 'pay 3', signal: controller.signal }).catch(() => null);
  const third = await newPending(known);
  controller.abort();
  await abandoned;
  await api(admin.url, owner, 'POST', `/approvals/${third.id}/approve`);
  const seenBefore = upstream.seen.length;
  const retries = await Promise.all(
    [proxyA, proxyB, proxyA, proxyB].map((proxy) =>
      fetch(target(proxy), { method: 'POST', body: 'pay 3', headers: { 'x-approval-id': third.id } }).then(async (res) => ({ status: res.status, body: await res.text() })),
    ),
  );
  t.same(retries.map((r) => r.status).sort(), [200, 409, 409, 409], 'exactly one is forwarded');
  t.equal(upstream.seen.length - seenBefore, 1, 'the upstream saw it once');
  t.equal((await api(admin.url, owner, 'GET', `/approvals/${third.id}`)).json.status, 'used');
});
