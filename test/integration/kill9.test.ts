// SIGKILL under load loses no answered call: each record reaches the audit
// journal (local disk) before its call's answer leaves, and the
// next start replays what the killed process left, with its deduplication tokens.
// All-in-one on embedded chDB, and a split-mode proxy writing to a ClickHouse
// HTTP server in another process.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { eventually } from '../support/eventually.js';
import { assertAuditedOnceAfterKill, auditRequestIds, startLoad, type Load } from '../support/load.js';
import { api, auditTotal, createAgent, login, signup, TLS_DIR, type Session } from '../support/service.js';
import { spawnService, type SpawnedService } from '../support/spawn-service.js';
import { splitModeEnv } from '../support/split-mode.js';
import { startUpstream } from '../support/upstream.js';

const root = mkdtempSync(join(tmpdir(), 'tcg-kill9-'));
const upstream = await startUpstream();
t.teardown(async () => {
  await upstream.close();
  rmSync(root, { recursive: true, force: true });
});
const base = { GUARD_ALLOW_TARGETS: '127.0.0.1', NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'), PORT: '0' };

/**
 * The agent's request ids once the replay that runs in the background after a
 * start has settled: the count reached `expected` and stayed for half a second
 * (paging while rows still land would shift pages and count a row twice).
 */
async function settledIds(url: string, session: Session, agentId: string, expected: number): Promise<string[]> {
  // A cold machine replays slowly: up to a minute, returning as soon as all are there.
  await eventually(async () => ((await auditTotal(url, session, agentId)) >= expected ? true : undefined), 60_000).catch(() => undefined);
  for (;;) {
    const before = await auditTotal(url, session, agentId);
    await new Promise((r) => setTimeout(r, 500));
    const ids = await auditRequestIds(url, session, agentId);
    if (ids.length === before && (await auditTotal(url, session, agentId)) === before) return ids;
  }
}

/** Every entry, those recovered from the journal included, is sealed and verifies. */
async function assertVerifies(t: Test, url: string, session: Session, entries: number): Promise<void> {
  const since = new Date(Date.now() - 10 * 60_000).toISOString();
  // Seals are a second insert after their rows: the contract gives each entry 5 s to be sealed.
  const verify = () => api(url, session, 'GET', `/audit/verify?since=${since}`);
  const res = await eventually(async () => {
    const r = await verify();
    return r.json?.pending === 0 ? r : undefined;
  }, 10_000).catch(() => verify());
  t.match(res.json, { ok: true, entries, pending: 0, first_problem: null }, `the log verifies after the kill (${res.text})`);
}

const CLIENTS = 32;

/** 1.5 s of load on the agent through `service`, then kill -9: the calls the clients saw answered, and those they did not. */
async function loadUntilKill(t: Test, service: SpawnedService, apiKey: string): Promise<Load> {
  const load = startLoad(`${service.url}/proxy/${apiKey}/${upstream.authority}/json`, CLIENTS);
  await new Promise((r) => setTimeout(r, 1500));
  await service.kill9();
  await load.stop();
  t.ok(load.answered.length > 50, `${load.answered.length} calls answered before the kill`);
  return load;
}

t.test('all-in-one: kill -9 under load, restart on the same data: every answered call in the audit log once', async (t) => {
  // The default AUDIT_BATCH_MS (250): without the journal, up to that much of answered calls was lost.
  const env = { ...base, DATA_DIR: join(root, 'all-in-one') };
  const service = await spawnService('all-in-one', env);
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'killed', 'none');
  const load = await loadUntilKill(t, service, agent.api_key);

  const again = await spawnService('all-in-one', env);
  const session = await login(again.url, owner.email);
  const recorded = await settledIds(again.url, session, agent.id, load.answered.length);
  assertAuditedOnceAfterKill(t, recorded, load, CLIENTS);
  await assertVerifies(t, again.url, session, recorded.length);
  t.equal(await again.stop(), 0);
});

t.test('split mode: a proxy killed with -9 under load replays its journal on restart, into ClickHouse once', async (t) => {
  const common = await splitModeEnv(t, root, base);
  const admin = await spawnService('admin', { ...common, SPOOL_DIR: join(root, 'spool-admin') });
  t.teardown(() => admin.stop());
  const proxyEnv = { ...common, ADMIN_URL: admin.url, SPOOL_DIR: join(root, 'spool-proxy') };
  const proxy = await spawnService('proxy', proxyEnv);
  const owner = await signup(proxy.url);
  const agent = await createAgent(proxy.url, owner, 'killed-proxy', 'none');
  const load = await loadUntilKill(t, proxy, agent.api_key);

  const again = await spawnService('proxy', proxyEnv);
  t.teardown(() => again.stop());
  const recorded = await settledIds(admin.url, owner, agent.id, load.answered.length);
  assertAuditedOnceAfterKill(t, recorded, load, CLIENTS);
  await assertVerifies(t, admin.url, owner, recorded.length);
});

t.test('an answer leaves only once its record is in the journal: every kind of answer, under load', async (t) => {
  // The journal writes a turn's records together, and each call's last bytes
  // wait for that write (audit-journal.ts): so the moment a client holds an
  // answer, its record is on disk. Batches are held back (AUDIT_BATCH_MS) so the
  // journal keeps every record for the test to read.
  const dataDir = join(root, 'order');
  const service = await spawnService('all-in-one', { ...base, DATA_DIR: dataDir, AUDIT_BATCH_MS: '60000', AUDIT_BATCH_ROWS: '100000' });
  t.teardown(() => service.stop());
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'ordered', 'hash');
  const policy = await api(service.url, owner, 'POST', `/agents/${agent.id}/policy`, {
    rules_yaml: 'version: "1"\nrules:\n  - name: no-deletes\n    tool: "*"\n    action: DELETE\n    decision: deny\n',
  });
  t.equal(policy.status, 200);
  const journalDir = join(dataDir, 'spool', 'journal');
  const journaled = () => readdirSync(journalDir).map((name) => readFileSync(join(journalDir, name), 'utf8')).join('');
  const load = startLoad(`${service.url}/proxy/${agent.api_key}/${upstream.authority}/json`, 16);
  t.teardown(() => load.stop());
  const kinds: [string, string, number][] = [
    ['GET', '/json', 200], // Content-Length body: the last chunk waits
    ['GET', '/chunked', 200], // chunked: the end waits
    ['HEAD', '/json', 200], // no body: the end waits
    ['DELETE', '/json', 403], // the proxy's own answer waits
  ];
  let missing = 0;
  for (let round = 0; round < 25; round++) {
    for (const [method, path, status] of kinds) {
      const id = `order-${round}-${method}-${path.slice(1)}`;
      const res = await fetch(`${service.url}/proxy/${agent.api_key}/${upstream.authority}${path}`, { method, headers: { 'x-request-id': id } });
      // Read before the body: the head alone may leave earlier; the answer is whole once the body ends.
      await res.arrayBuffer();
      if (res.status !== status || !journaled().includes(id)) missing++;
    }
  }
  await load.stop();
  t.equal(missing, 0, 'each of 100 answers found its record already in the journal');
  t.ok(load.answered.length > 0, `${load.answered.length} calls of load beside them`);
});

t.test('a journal segment recovered twice (its delete refused) is written once: its fresh token is kept in it', async (t) => {
  // A kill between a recovered batch reaching the spool and its segment's
  // delete (or a delete the file system refuses) leaves the segment for the
  // next start. It must be spooled again under the same token, which ClickHouse
  // deduplicates, not a new one. The delete is refused here with an append-only
  // attribute (root on ext4 and the like), which still lets the token be appended.
  const env = { ...base, DATA_DIR: join(root, 'recovered-twice'), AUDIT_BATCH_MS: '60000', AUDIT_BATCH_INTERVAL_MS: '60000' };
  const service = await spawnService('all-in-one', env);
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'twice', 'none');
  for (let i = 0; i < 3; i++) t.equal((await fetch(`${service.url}/proxy/${agent.api_key}/${upstream.authority}/json`)).status, 200);
  await service.kill9(); // the batch was open: its segment is unsealed
  const journalDir = join(env.DATA_DIR, 'spool', 'journal');
  const segments = readdirSync(journalDir).filter((name) => readFileSync(join(journalDir, name), 'utf8').length > 0).map((name) => join(journalDir, name));
  t.equal(segments.length, 1, 'one segment holds the three records');
  const attr = spawnSync('chattr', ['+a', segments[0]!]);
  if (attr.status !== 0) {
    t.comment(`skipped the rest: chattr +a is not available here (${attr.error?.message ?? attr.stderr.toString().trim()}): a refused delete cannot be staged`);
    return;
  }
  t.teardown(() => void spawnSync('chattr', ['-a', segments[0]!]));
  const { DATA_DIR: _, ...normal } = env;
  const restartEnv = { ...normal, DATA_DIR: env.DATA_DIR, AUDIT_BATCH_MS: '50', AUDIT_BATCH_INTERVAL_MS: '100' };
  const again = await spawnService('all-in-one', restartEnv);
  const session = await login(again.url, owner.email);
  t.equal((await settledIds(again.url, session, agent.id, 3)).length, 3, 'recovered once');
  t.equal(await again.stop(), 0);
  t.ok(readdirSync(journalDir).includes(segments[0]!.split('/').pop()!), 'its segment is still there (the delete was refused)');
  const third = await spawnService('all-in-one', restartEnv);
  await eventually(async () => {
    const health = (await (await fetch(`${third.url}/health`)).json()) as { audit_spooled_batches: number; audit_pending: number };
    return health.audit_spooled_batches === 0 && health.audit_pending === 0 ? true : undefined;
  }, 30_000);
  await new Promise((r) => setTimeout(r, 500));
  t.equal(await auditTotal(third.url, await login(third.url, owner.email), agent.id), 3, 'recovered again, and still in the audit log once');
  t.equal(await third.stop(), 0);
});
