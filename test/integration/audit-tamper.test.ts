// Tampering with the audit log, in real processes: the service writes sealed
// entries for one org per kind of tampering, is stopped, the embedded store is
// changed directly through chDB (a ClickHouse HTTP stand-in over the service's
// own data directory), the service is started again, and GET /audit/verify must
// name each change. The offline `verify-audit` command must agree.
import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from '@clickhouse/client';
import canonicalize from 'canonicalize';
import t from 'tap';
import { spawnClickHouseHttpServer } from '../support/clickhouse-http-server.js';
import { api, createAgent, signup, TLS_DIR, type Session } from '../support/service.js';
import { spawnService, type SpawnedService } from '../support/spawn-service.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'tcg-tamper-'));
const env = {
  DATA_DIR: dir,
  PORT: '0',
  AUDIT_BATCH_MS: '20',
  GUARD_ALLOW_TARGETS: '127.0.0.1',
  NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'),
};
let service: SpawnedService = await spawnService('all-in-one', env);
t.teardown(async () => {
  await service.stop();
  rmSync(dir, { recursive: true, force: true });
});
const since = new Date(Date.now() - 60_000).toISOString();

interface Entry { id: string; timestamp: string; entry_hash: string; [k: string]: unknown }
interface SealJson { id: string; seq: number; batch_id: string; first_at: string; last_at: string; root: string }

const KINDS = ['clean', 'edited', 'removed', 'reordered', 'added', 'seal_removed', 'seal_altered', 'truncated', 'tail_redated', 'added_future_written', 'org_deleted', 'seal_removed_behind_zero', 'number_overflow', 'signature_respelled', 'window_redated', 'legacy_forged'] as const;
type Kind = (typeof KINDS)[number];
const orgs = new Map<Kind, { session: Session; orgId: string; entries: Entry[]; seals: SealJson[] }>();

/** Three batches an org: each three concurrent writes (with distinct timestamps), the batches one after another. */
for (const kind of KINDS) {
  const session = await signup(service.url);
  const agent = await createAgent(service.url, session, `agent-${kind}`);
  for (let batch = 0; batch < 3; batch++) {
    await Promise.all([0, 1, 2].map(async (i) => {
      await new Promise((r) => setTimeout(r, i * 3));
      const res = await api(service.url, session, 'POST', '/audit', { agent_id: agent.id, tool_name: 'api.example.com', action: 'POST', decision: 'allowed', reasoning: `${kind} ${batch}.${i}` });
      if (res.status !== 201) throw new Error(`POST /audit ${res.status}`);
    }));
  }
  orgs.set(kind, { session, orgId: '', entries: [], seals: [] });
}

async function verify(kind: Kind): Promise<{ ok: boolean; entries: number; first_problem: { reason: string; audit_id?: string; seal_id?: string } | null }> {
  const res = await api(service.url, orgs.get(kind)!.session, 'GET', `/audit/verify?since=${windowStart.get(kind) ?? since}${windowEnd.has(kind) ? `&until=${windowEnd.get(kind)}` : ''}`);
  if (res.status !== 200) throw new Error(`GET /audit/verify ${res.status} ${res.text}`);
  return res.json as never;
}

t.test('before any tampering every org verifies', async (t) => {
  await new Promise((r) => setTimeout(r, 300));
  for (const [kind, org] of orgs) {
    org.entries = (await api(service.url, org.session, 'GET', '/audit?limit=100')).json as Entry[];
    org.orgId = (await api(service.url, org.session, 'GET', `/audit/seals?since=${since}`)).json[0].org_id as string;
    org.seals = ((await api(service.url, org.session, 'GET', `/audit/seals?since=${since}`)).json as SealJson[]).sort((a, b) => a.seq - b.seq);
    t.equal(org.entries.length, 9, `${kind}: nine entries`);
    t.ok(org.seals.length >= 2, `${kind}: sealed in more than one batch (${org.seals.length})`);
    t.match(await verify(kind), { ok: true, entries: 9, first_problem: null }, kind);
  }
});

/** The entry's hash as the contract defines it, from its API JSON. */
function hashOf(entry: Entry): string {
  const { entry_hash: _, ...rest } = entry;
  return createHash('sha256').update(canonicalize(rest)!).digest('hex');
}

/** Kinds verified from a later instant than the rest (a window that leaves the chain's first seal out). */
const windowStart = new Map<Kind, string>();
/** Kinds verified up to an instant (default: now). */
const windowEnd = new Map<Kind, string>();
/** Kinds the offline run (the whole retention window) names otherwise than the window's verify. */
const offlineReason = new Map<Kind, string>();
const ch = (iso: string) => iso.replace('T', ' ').replace('Z', '');
const expected = new Map<Kind, { reason: string; audit_id?: string; seal_id?: string }>();

t.test('tampering through chDB while the service is stopped', async (t) => {
  t.equal(await service.stop(), 0);
  const server = await spawnClickHouseHttpServer({ dataDir: join(dir, 'chdb') });
  const client = createClient({ url: server.url });
  const run = (query: string) => client.command({ query, clickhouse_settings: { mutations_sync: '2' } });
  try {
    const org = (kind: Kind) => orgs.get(kind)!;
    // In a seal's batch: entries whose timestamps fall in the seal's range (each batch's are disjoint here).
    const batchOf = (kind: Kind, seal: SealJson) => org(kind).entries.filter((e) => e.timestamp >= seal.first_at && e.timestamp <= seal.last_at);

    const edited = org('edited').entries[4]!;
    await run(`ALTER TABLE audit_log UPDATE reasoning = 'nothing to see' WHERE id = '${edited.id}'`);
    expected.set('edited', { reason: 'entry_edited', audit_id: edited.id });

    const removedSeal = org('removed').seals[1]!;
    await run(`ALTER TABLE audit_log DELETE WHERE id = '${batchOf('removed', removedSeal)[0]!.id}'`);
    expected.set('removed', { reason: 'entry_removed', seal_id: removedSeal.id });

    // Two entries of one batch swap timestamps, each re-hashed to match: every
    // entry is self-consistent, but the batch is not the sequence that was sealed.
    const reorderSeal = org('reordered').seals.find((s) => new Set(batchOf('reordered', s).map((e) => e.timestamp)).size >= 2)!;
    const [a, b] = batchOf('reordered', reorderSeal).filter((e, i, all) => all.findIndex((x) => x.timestamp === e.timestamp) === i);
    for (const [entry, other] of [[a!, b!], [b!, a!]] as const) {
      const moved = { ...entry, timestamp: other.timestamp };
      await run(`INSERT INTO audit_log SELECT * REPLACE (toDateTime64('${ch(other.timestamp)}', 3, 'UTC') AS timestamp, '${hashOf(moved)}' AS entry_hash) FROM (SELECT * FROM audit_log WHERE id = '${entry.id}' AND entry_hash = '${entry.entry_hash}')`);
      await run(`ALTER TABLE audit_log DELETE WHERE id = '${entry.id}' AND entry_hash = '${entry.entry_hash}'`);
    }
    expected.set('reordered', { reason: 'root_mismatch', seal_id: reorderSeal.id });

    // A forged entry, well-formed and hashed, slipped into a sealed batch.
    const source = org('added').entries[0]!;
    const forged = { ...source, id: randomUUID(), reasoning: 'forged' };
    await run(`INSERT INTO audit_log SELECT * REPLACE ('${forged.id}' AS id, 'forged' AS reasoning, '${hashOf(forged)}' AS entry_hash) FROM (SELECT * FROM audit_log WHERE id = '${source.id}')`);
    const addedSeal = org('added').seals.find((s) => batchOf('added', s).some((e) => e.id === source.id))!;
    expected.set('added', { reason: 'entry_added', seal_id: addedSeal.id });

    const middle = org('seal_removed').seals[1]!;
    await run(`ALTER TABLE audit_seals DELETE WHERE id = '${middle.id}'`);
    expected.set('seal_removed', { reason: 'seal_removed', seal_id: org('seal_removed').seals[2]!.id });

    const altered = org('seal_altered').seals[0]!;
    await run(`ALTER TABLE audit_seals UPDATE root = '${'0'.repeat(64)}' WHERE id = '${altered.id}'`);
    expected.set('seal_altered', { reason: 'seal_altered', seal_id: altered.id });

    // The newest seal and its entries go, leaving a chain that verifies link by link.
    const last = org('truncated').seals[org('truncated').seals.length - 1]!;
    await run(`ALTER TABLE audit_log DELETE WHERE batch_id = '${last.batch_id}'`);
    await run(`ALTER TABLE audit_seals DELETE WHERE id = '${last.id}'`);
    expected.set('truncated', { reason: 'tail_truncated' });

    // The newest two batches' entries go, and their seals are re-dated past every
    // window ending now (no key needed): the chain still runs to its recorded
    // head, whose stored seal_hash is untouched, so only the seals' own fields
    // tell. The earlier of the two is named when a seal before them meets the window.
    const redated = org('tail_redated').seals.slice(-2);
    await run(`ALTER TABLE audit_log DELETE WHERE batch_id IN ('${redated[0]!.batch_id}', '${redated[1]!.batch_id}')`);
    await run(`ALTER TABLE audit_seals UPDATE first_at = toDateTime64('2099-01-01 00:00:00', 3, 'UTC'), last_at = toDateTime64('2099-01-01 00:00:00', 3, 'UTC') WHERE id IN ('${redated[0]!.id}', '${redated[1]!.id}')`);
    expected.set('tail_redated', { reason: 'seal_altered', seal_id: org('tail_redated').seals.length >= 3 ? redated[0]!.id : redated[1]!.id });

    // A forged entry in a batch of its own, its written_at (not hashed) set far
    // ahead, so that it would look inserted a moment ago, and waiting for its seal, for ever.
    const template = org('added_future_written').entries[0]!;
    const future = { ...template, id: randomUUID(), reasoning: 'forged later' };
    await run(`INSERT INTO audit_log SELECT * REPLACE ('${future.id}' AS id, 'forged later' AS reasoning, '${hashOf(future)}' AS entry_hash, '${randomUUID()}' AS batch_id, toDateTime64('2100-01-01 00:00:00', 3, 'UTC') AS written_at) FROM (SELECT * FROM audit_log WHERE id = '${template.id}')`);
    expected.set('added_future_written', { reason: 'entry_added', audit_id: future.id });

    // A middle seal and its entries go, and a junk seal numbered 0, dated out of
    // every window, keeps the chain's count of distinct seqs as it was.
    const gone = org('seal_removed_behind_zero').seals[1]!;
    await run(`INSERT INTO audit_seals SELECT * REPLACE (toUInt64(0) AS seq, toDateTime64('1900-01-01 00:00:00', 3, 'UTC') AS first_at, toDateTime64('1900-01-01 00:00:00', 3, 'UTC') AS last_at, toDateTime64('1900-01-01 00:00:00', 3, 'UTC') AS created_at) FROM (SELECT * FROM audit_seals WHERE id = '${gone.id}')`);
    await run(`ALTER TABLE audit_log DELETE WHERE batch_id = '${gone.batch_id}'`);
    await run(`ALTER TABLE audit_seals DELETE WHERE id = '${gone.id}' AND seq = ${gone.seq}`);
    expected.set('seal_removed_behind_zero', { reason: 'seal_removed', seal_id: org('seal_removed_behind_zero').seals[2]!.id });
    // Verified from the removed seal's batch on: seal 1, whose neighbour the junk is, is not read.
    windowStart.set('seal_removed_behind_zero', gone.first_at);
    // The whole window reads seal 1 and its neighbour, the junk, whose fields do not hash to its seal_hash.
    offlineReason.set('seal_removed_behind_zero', 'seal_altered');

    // A count no writer could write (past 2^53): named, not a 500.
    const overflow = org('number_overflow').entries[4]!;
    await run(`ALTER TABLE audit_log UPDATE request_bytes = 18446744073709551615 WHERE id = '${overflow.id}'`);
    expected.set('number_overflow', { reason: 'entry_edited', audit_id: overflow.id });

    // The signature's padding dropped: the same bytes to a lenient decoder, but not the seal as signed.
    const respelled = org('signature_respelled').seals[0]!;
    await run(`ALTER TABLE audit_seals UPDATE signature = replaceAll(signature, '=', '') WHERE id = '${respelled.id}'`);
    expected.set('signature_respelled', { reason: 'seal_altered', seal_id: respelled.id });

    // A window holding one batch: its entries deleted, its seal re-dated out of
    // it. No seal meets the window any more; the one re-dated is read as the
    // chain's last seal before it, and its own fields tell.
    const [w1, w2, w3] = org('window_redated').seals;
    await run(`ALTER TABLE audit_log DELETE WHERE batch_id = '${w2!.batch_id}'`);
    await run(`ALTER TABLE audit_seals UPDATE first_at = toDateTime64('2000-01-01 00:00:00', 3, 'UTC'), last_at = toDateTime64('2000-01-01 00:00:00', 3, 'UTC') WHERE id = '${w2!.id}'`);
    t.ok(w1!.last_at < w2!.first_at && w2!.last_at < w3!.first_at, 'the three batches are apart in time');
    windowStart.set('window_redated', w2!.first_at);
    windowEnd.set('window_redated', w3!.first_at);
    expected.set('window_redated', { reason: 'seal_altered', seal_id: w2!.id });

    // A forged entry as a version before seals would have written it (no entry_hash,
    // no batch), dated before sealing began, but also before its org was created.
    const legacyTemplate = org('legacy_forged').entries[0]!;
    const backdated = new Date(Date.now() - 2 * 86_400_000).toISOString();
    const legacyId = randomUUID();
    await run(`INSERT INTO audit_log SELECT * REPLACE ('${legacyId}' AS id, toDateTime64('${ch(backdated)}', 3, 'UTC') AS timestamp, '' AS entry_hash, '' AS batch_id) FROM (SELECT * FROM audit_log WHERE id = '${legacyTemplate.id}')`);
    windowStart.set('legacy_forged', new Date(Date.now() - 3 * 86_400_000).toISOString());
    expected.set('legacy_forged', { reason: 'entry_added', audit_id: legacyId });

    // Every row and seal of an org: its chain heads, kept in the metadata store, still name it.
    await run(`ALTER TABLE audit_log DELETE WHERE org_id = '${org('org_deleted').orgId}'`);
    await run(`ALTER TABLE audit_seals DELETE WHERE org_id = '${org('org_deleted').orgId}'`);
    expected.set('org_deleted', { reason: 'tail_truncated' });
    t.pass('tampered');
  } finally {
    await client.close();
    await server.kill('SIGTERM');
  }
  service = await spawnService('all-in-one', env);
});

t.test('GET /audit/verify names each change; the clean org still verifies', async (t) => {
  t.match(await verify('clean'), { ok: true, first_problem: null }, 'clean');
  for (const [kind, problem] of expected) {
    const result = await verify(kind);
    t.equal(result.ok, false, `${kind}: not ok`);
    t.strictSame(result.first_problem && { reason: result.first_problem.reason, ...(problem.audit_id ? { audit_id: result.first_problem.audit_id } : {}), ...(problem.seal_id ? { seal_id: result.first_problem.seal_id } : {}) }, problem, `${kind}: ${JSON.stringify(result.first_problem)}`);
  }
});

t.test('npm run verify-audit agrees, offline, and exits 1 on a problem', async (t) => {
  t.equal(await service.stop(), 0);
  const offline = (args: string[], dataDir = dir, more: Record<string, string> = {}) => new Promise<{ code: number | null; lines: Record<string, unknown>[]; stderr: string; stdout: string }>((resolve) => {
    const child = spawn(process.execPath, [...process.execArgv, join(ROOT, 'server/verify-audit.ts'), ...args], { env: { PATH: process.env.PATH ?? '', DATA_DIR: dataDir, ...more }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
    child.on('close', (code) => resolve({ code, lines: out.startsWith('{') ? out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>) : [], stderr: err, stdout: out }));
  });
  const all = await offline([]);
  t.equal(all.code, 1, `exit 1 (${all.stderr})`);
  const summary = all.lines[all.lines.length - 1]!;
  t.match(summary, { failed: expected.size });
  for (const [kind, problem] of expected) {
    const orgId = orgs.get(kind)!.orgId;
    const line = all.lines.find((l) => l.org_id === orgId) as { first_problem: { reason: string } } | undefined;
    t.equal(line?.first_problem.reason, offlineReason.get(kind) ?? problem.reason, `${kind} offline`);
  }
  const upper = await offline(['--org', orgs.get('truncated')!.orgId.toUpperCase()]);
  t.match(upper.lines[0], { first_problem: { reason: 'tail_truncated' } }, 'an org id in capitals is the same org: its chain heads are read');
  for (const args of [['--since', 'yesterday'], ['--until', '2026-02-30'], ['--since', '2026-01-02', '--until', '2026-01-01']]) {
    const refused = await offline(args);
    t.equal(refused.code, 2, `${args.join(' ')}: bad usage (${refused.stderr.trim()})`);
  }
  // Bad usage is exit 2 with one line, not 1 (a problem found) with a stack trace.
  for (const args of [['--sinse', '2026-01-01'], ['--public-key']]) {
    const refused = await offline(args);
    t.equal(refused.code, 2, `${args.join(' ')}: bad usage`);
    t.match(refused.stderr, /^verify-audit: .*\nusage: npm run verify-audit/, `one line and the usage (${refused.stderr.trim()})`);
  }
  const help = await offline(['--help']);
  t.equal(help.code, 0, '--help exits 0');
  t.match(help.stdout, /^usage: npm run verify-audit/);
  // Nothing checked is no pass: a mistyped DATA_DIR, an org that is not there.
  const mistyped = join(dir, 'no-such-data-dir');
  const typo = await offline([], mistyped);
  t.equal(typo.code, 2, `a DATA_DIR without a store: exit 2 (${typo.stderr.trim()})`);
  t.notOk(existsSync(mistyped), 'and no store is created there');
  const emptyStore = join(dir, 'empty-data-dir');
  mkdirSync(join(emptyStore, 'chdb'), { recursive: true });
  const empty = await offline([], emptyStore);
  t.equal(empty.code, 2, `an embedded store no service wrote to: exit 2 (${empty.stderr.trim()})`);
  // A mistyped database in CLICKHOUSE_URL: refused, and not created (tables and all) on the server.
  const server = await spawnClickHouseHttpServer({ dataDir: join(dir, 'chdb') });
  try {
    const typoDb = await offline([], dir, { CLICKHOUSE_URL: `${server.url}/audti` });
    t.equal(typoDb.code, 2, 'a CLICKHOUSE_URL database that does not exist: exit 2');
    t.match(typoDb.stderr, /no database audti/);
    const client = createClient({ url: server.url });
    const dbs = await (await client.query({ query: "SELECT name FROM system.databases WHERE name = 'audti'", format: 'JSONEachRow' })).json();
    t.strictSame(dbs, [], 'nor is it created');
    // A store an older version made (no entry_hash, no seals): named as such, not a stack trace and exit 1.
    await client.command({ query: 'CREATE DATABASE IF NOT EXISTS older' });
    await client.command({ query: 'CREATE TABLE IF NOT EXISTS older.audit_log (id UUID, org_id UUID, timestamp DateTime64(3)) ENGINE = MergeTree ORDER BY id' });
    await client.close();
    const older = await offline([], dir, { CLICKHOUSE_URL: `${server.url}/older` });
    t.equal(older.code, 2, 'a store made by an older version: exit 2');
    t.match(older.stderr, /made by an older version/);
  } finally {
    await server.kill('SIGTERM');
  }
  const stranger = await offline(['--org', randomUUID()]);
  t.equal(stranger.code, 2, `an org with no entries, seals or chain heads: exit 2 (${stranger.stderr.trim()})`);
  const clean = await offline(['--org', orgs.get('clean')!.orgId]);
  t.equal(clean.code, 0, 'a clean org exits 0');
  t.match(clean.lines[0], { ok: true, entries: 9 });
  service = await spawnService('all-in-one', env);
});
