// The audit log holds the calls the proxy made and nothing else: what waits on
// the service's standard input never reaches the audit store. (ClickHouse's
// INSERT … FROM INFILE, through chDB, also inserts whatever a pipe on stdin
// holds; the store hands chDB its batches as INSERT … SELECT FROM file(), which
// reads only the file. A service started as `producer | npm start`, or by a
// supervisor that leaves a pipe there, must not take rows from it.)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { eventually } from '../support/eventually.js';
import { api, auditTotal, createAgent, signup, TLS_DIR } from '../support/service.js';
import { spawnService } from '../support/spawn-service.js';
import { startUpstream } from '../support/upstream.js';

const root = mkdtempSync(join(tmpdir(), 'tcg-stdin-'));
const upstream = await startUpstream();
t.teardown(async () => {
  await upstream.close();
  rmSync(root, { recursive: true, force: true });
});

t.test('rows waiting on standard input are not written to the audit log', async (t) => {
  // Audit rows and seal rows as the store's own lines look, for an org the test
  // learns only after the start: the forged ones name a zero org and agent, and a
  // reasoning the test looks for; they would land under that org and show in the
  // table's count.
  const forged = (n: number) =>
    `${'0'.repeat(8)}-0000-4000-8000-${String(n).padStart(12, '0')}\t2026-11-25 12:00:00.000\t00000000-0000-0000-0000-000000000000\t` +
    `00000000-0000-0000-0000-000000000000\tforged\tforged.example\tGET\thttps://forged.example/\tallowed\tFORGED\t\t1\t200\tforged\tproxy\t0\t0\t\t\tfalse\tfalse\t\n`;
  const stdin = Array.from({ length: 50 }, (_, i) => forged(i + 1)).join('');
  const service = await spawnService('all-in-one', {
    GUARD_ALLOW_TARGETS: '127.0.0.1', NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'), PORT: '0', DATA_DIR: join(root, 'data'), AUDIT_BATCH_MS: '50',
  }, 30_000, stdin);
  t.teardown(() => service.stop());
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'stdin');
  for (let i = 0; i < 5; i++) {
    const res = await fetch(`${service.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
    t.equal(res.status, 200);
    await res.arrayBuffer();
  }
  await eventually(async () => ((await auditTotal(service.url, owner, agent.id)) === 5 ? true : undefined), 15_000);
  // A second batch, after the first was written: stdin still holds its lines.
  const again = await fetch(`${service.url}/proxy/${agent.api_key}/${upstream.authority}/json`);
  await again.arrayBuffer();
  await eventually(async () => ((await auditTotal(service.url, owner, agent.id)) === 6 ? true : undefined), 15_000);
  const verify = await api(service.url, owner, 'GET', `/audit/verify?since=${new Date(Date.now() - 600_000).toISOString()}`);
  t.match(verify.json, { ok: true, entries: 6, first_problem: null }, 'the org\'s log holds its six calls and verifies');
  // Counted written once the seals' insert, after the rows', is answered.
  const health = await eventually(async () => {
    const h = (await (await fetch(`${service.url}/health`)).json()) as { audit_written_total: number; proxied_total: number };
    return h.audit_written_total === h.proxied_total ? h : undefined;
  }).catch(async () => (await (await fetch(`${service.url}/health`)).json()) as { audit_written_total: number; proxied_total: number });
  t.equal(health.audit_written_total, health.proxied_total, 'rows written are the calls proxied');
  await service.stop();
  // Offline, the whole table: no row of any org came from stdin.
  const { ClickHouseAuditStore } = await import('../../shared/stores/clickhouse/clickhouse-audit-store.js');
  const store = await ClickHouseAuditStore.open({ url: null, dataDir: join(root, 'data'), retentionDays: 365 });
  try {
    t.equal(await store.count(), 6, 'the table holds the six calls, none of the 50 forged lines');
  } finally {
    await store.close();
  }
});
