// Graceful shutdown of a real process: SIGTERM drains in-flight proxied calls,
// flushes the audit and exits 0; a second signal exits at once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { api, auditTotal, createAgent, login, signup, TLS_DIR } from '../support/service.js';
import { startLoad } from '../support/load.js';
import { spawnService } from '../support/spawn-service.js';
import { startUpstream } from '../support/upstream.js';

const dataDir = mkdtempSync(join(tmpdir(), 'tcg-shutdown-'));
const upstream = await startUpstream();
const env = { DATA_DIR: dataDir, PORT: '0', GUARD_ALLOW_TARGETS: '127.0.0.1', NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'), AUDIT_BATCH_MS: '5000' };
t.teardown(async () => {
  await upstream.close();
  rmSync(dataDir, { recursive: true, force: true });
});

t.test('SIGTERM lets an in-flight call finish, writes its audit record and exits 0', async (t) => {
  const service = await spawnService('all-in-one', env);
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'draining', 'full');
  const inFlight = fetch(`${service.url}/proxy/${agent.api_key}/${upstream.authority}/sse`).then(async (r) => ({ status: r.status, text: await r.text() }));
  await new Promise((r) => setTimeout(r, 150));
  service.child.kill('SIGTERM');
  const res = await inFlight;
  t.equal(res.status, 200);
  const EVENTS = 'data: event 1\n\ndata: event 2\n\ndata: event 3\n\n';
  t.equal(res.text, `:\n${EVENTS}`, 'the call completed in full (after the head\'s SSE comment line)');
  t.equal(await service.exited, 0, 'exit code 0');
  // AUDIT_BATCH_MS is 5 s: the record was written by the shutdown flush, not the timer.
  const again = await spawnService('all-in-one', env);
  const rows = (await api(again.url, await login(again.url, owner.email), 'GET', `/audit?agent_id=${agent.id}`)).json as any[];
  t.equal(rows.length, 1, 'the drained call is in the audit log after a restart');
  t.equal(rows[0].status_code, 200);
  t.equal(rows[0].output, EVENTS, 'the output is the upstream\'s bytes');
  t.equal(await again.stop(), 0);
});

t.test('a second signal exits at once', async (t) => {
  const service = await spawnService('all-in-one', { ...env, UPSTREAM_HEADERS_TIMEOUT_MS: '60000' });
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'stuck');
  const stuck = fetch(`${service.url}/proxy/${agent.api_key}/${upstream.authority}/stall-headers`).catch(() => null);
  await new Promise((r) => setTimeout(r, 150));
  service.child.kill('SIGTERM');
  // A moment later, as a person pressing Ctrl-C again (a copy within 250 ms would be the same request).
  await new Promise((r) => setTimeout(r, 600));
  const started = Date.now();
  service.child.kill('SIGTERM');
  t.equal(await service.exited, 130);
  t.ok(Date.now() - started < 1500, `exited ${Date.now() - started} ms after the second signal, not after the drain deadline`);
  await stuck;
});

t.test('the same signal twice at once (the group\'s copy and npm\'s) is one request to stop: the drain completes', async (t) => {
  const service = await spawnService('all-in-one', env);
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'twice', 'full');
  const inFlight = fetch(`${service.url}/proxy/${agent.api_key}/${upstream.authority}/sse`).then(async (r) => ({ status: r.status, text: await r.text() }));
  await new Promise((r) => setTimeout(r, 150));
  service.child.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 10));
  service.child.kill('SIGTERM');
  const res = await inFlight;
  t.equal(res.text, ':\ndata: event 1\n\ndata: event 2\n\ndata: event 3\n\n', 'the in-flight call completed in full');
  t.equal(await service.exited, 0, 'exit code 0, not 130');
});

t.test('SIGTERM under load: every call answered is audited, none twice', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-shutdown-load-'));
  const loadEnv = { ...env, DATA_DIR: dir, AUDIT_BATCH_MS: '200' };
  const service = await spawnService('all-in-one', loadEnv);
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'loaded', 'none');
  const load = startLoad(`${service.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
  await new Promise((r) => setTimeout(r, 1500));
  service.child.kill('SIGTERM');
  t.equal(await service.exited, 0, 'exit code 0');
  await load.stop();
  const answered = load.answered.length;
  t.ok(answered > 100, `${answered} calls answered (${load.refused()} of them 503 while shutting down)`);
  const again = await spawnService('all-in-one', loadEnv);
  t.equal(await auditTotal(again.url, await login(again.url, owner.email), agent.id), answered, 'audit rows equal calls answered');
  t.equal(await again.stop(), 0);
  rmSync(dir, { recursive: true, force: true });
});
