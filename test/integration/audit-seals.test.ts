// Audit seals against the real service (embedded ClickHouse): every entry is
// sealed within 5 s, the seals verify under the public key, chains link, the
// endpoints are org-scoped and check their input, the key stays private.
// Tampering, in real processes, is test/integration/audit-tamper.test.ts.
import { createPublicKey, generateKeyPairSync, hash, sign, verify, type KeyObject } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import t from 'tap';
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import pdfParse from 'pdf-parse/lib/pdf-parse.js';
import { entryHash, wellFormed } from '../../shared/audit/entry-json.js';
import { encodeSealLine, GENESIS_HASH, merkleRoot, sealBody, Sealer, signingKeyFromPem } from '../../shared/audit/seal.js';
import { verifyAudit } from '../../shared/audit/audit-verify.js';
import type { VerifyGroup } from '../../shared/stores/audit-store.js';
import type { AuditRecord } from '../../shared/types.js';
import { auditRecord } from '../support/audit-records.js';
import { assertError } from '../support/checks.js';
import { api, createAgent, eventually, signup, startTestService, type Session } from '../support/service.js';

const service = await startTestService();
const base = service.url;
t.teardown(() => service.close());

const owner = await signup(base);
const stranger = await signup(base);
const agent = await createAgent(base, owner, 'sealed');
const strangerAgent = await createAgent(base, stranger, 'other');

interface SealJson {
  id: string; org_id: string; writer: string; seq: number; batch_id: string; first_at: string; last_at: string; count: number;
  root: string; prev_hash: string; seal_hash: string; signature: string; key_fingerprint: string; created_at: string;
}

async function write(session: Session, agentId: string, n: number): Promise<{ id: string; timestamp: string; entry_hash: string }[]> {
  const out = [];
  for (let i = 0; i < n; i++) {
    const res = await api(base, session, 'POST', '/audit', { agent_id: agentId, tool_name: 'api.example.com', action: 'GET', decision: i % 3 === 0 ? 'denied' : 'allowed', reasoning: `call ${i} <b>é</b>` });
    if (res.status !== 201) throw new Error(`POST /audit ${res.status}`);
    out.push(res.json as { id: string; timestamp: string; entry_hash: string });
  }
  return out;
}

const started = new Date(Date.now() - 1000).toISOString();
// Concurrent writes share batches; the sequential ones after them get a batch each.
const entries = (await Promise.all([write(owner, agent.id, 8), write(owner, agent.id, 8), write(owner, agent.id, 8)])).flat();
entries.push(...(await write(owner, agent.id, 4)));
await write(stranger, strangerAgent.id, 3);

async function seals(session: Session, query = `?since=${started}`): Promise<SealJson[]> {
  const res = await api(base, session, 'GET', `/audit/seals${query}`);
  if (res.status !== 200) throw new Error(`GET /audit/seals ${res.status} ${res.text}`);
  return res.json as SealJson[];
}

t.test('every entry is sealed within 5 s, by seals that verify under the public key', async (t) => {
  const written = Date.now();
  const all = await eventually(async () => {
    const found = await seals(owner);
    return found.reduce((n, s) => n + s.count, 0) === entries.length ? found : undefined;
  }, 5000);
  t.ok(Date.now() - written < 5000, 'sealed within 5 s');
  const keyRes = await api(base, owner, 'GET', '/audit/public-key');
  t.equal(keyRes.status, 200);
  t.match(keyRes.text, /^-----BEGIN PUBLIC KEY-----\n/);
  const publicKey = createPublicKey(keyRes.text);
  const fingerprint = hash('sha256', publicKey.export({ type: 'spki', format: 'der' }), 'hex');
  t.equal(keyRes.headers.get('x-key-fingerprint'), fingerprint);

  const rows = (await api(base, owner, 'GET', `/audit?agent_id=${agent.id}&limit=1000`)).json as { id: string; timestamp: string; entry_hash: string }[];
  const byWriter = new Map<string, SealJson[]>();
  for (const s of all) {
    t.equal(s.key_fingerprint, fingerprint);
    const signed = sealBody({ id: s.id, orgId: s.org_id, writer: s.writer, seq: s.seq, batchId: s.batch_id, firstAt: s.first_at, lastAt: s.last_at, count: s.count, root: s.root, prevHash: s.prev_hash, keyFingerprint: s.key_fingerprint, createdAt: s.created_at });
    t.equal(hash('sha256', signed, 'hex'), s.seal_hash, 'seal_hash is the SHA-256 of its canonical body');
    t.ok(verify(null, Buffer.from(signed), publicKey, Buffer.from(s.signature, 'base64')), 'the signature verifies');
    (byWriter.get(s.writer) ?? byWriter.set(s.writer, []).get(s.writer)!).push(s);
  }
  t.ok(all.length >= 5, `one seal per batch (${all.length})`);
  for (const chain of byWriter.values()) {
    chain.sort((a, b) => a.seq - b.seq);
    chain.forEach((s, i) => {
      t.equal(s.seq, i + 1);
      t.equal(s.prev_hash, i === 0 ? GENESIS_HASH : chain[i - 1]!.seal_hash, 'each seal links to the one before');
    });
  }
  // Each root is the RFC 6962 root of its batch's entry hashes in (timestamp, id) order: recomputed from GET /audit.
  const sealOf = new Map(all.map((s) => [s.id, s]));
  t.equal(sealOf.size, all.length);
  const total = all.reduce((n, s) => n + s.count, 0);
  t.equal(total, rows.length);
  const roots = new Set(all.map((s) => s.root));
  const sorted = [...rows].sort((a, b) => (a.timestamp < b.timestamp ? -1 : a.timestamp > b.timestamp ? 1 : a.id < b.id ? -1 : 1));
  // Batches partition the rows; a root over one batch's hashes is among the seals' roots.
  for (const s of all) {
    const members = sorted.filter((r) => r.timestamp >= s.first_at && r.timestamp <= s.last_at);
    if (members.length === s.count) t.ok(roots.has(merkleRoot(members.map((m) => m.entry_hash))), `seal ${s.seq}'s root recomputes`);
  }
});

t.test('GET /audit/verify: a clean log verifies, scoped to the caller', async (t) => {
  const res = await api(base, owner, 'GET', `/audit/verify?since=${started}`);
  t.equal(res.status, 200);
  t.match(res.json, { ok: true, entries: entries.length, first_problem: null });
  t.ok((res.json as { seals: number }).seals >= 5);
  const other = await api(base, stranger, 'GET', `/audit/verify?since=${started}`);
  t.match(other.json, { ok: true, entries: 3, first_problem: null });
  const ownerSeals = new Set((await seals(owner)).map((s) => s.id));
  const otherSeals = await seals(stranger);
  t.equal(otherSeals.reduce((n, s) => n + s.count, 0), 3, 'another org sees only its own seals');
  t.notOk(otherSeals.some((s) => ownerSeals.has(s.id)), 'none of the owner\'s');
  t.notOk(otherSeals.some((s) => s.org_id !== otherSeals[0]!.org_id), 'all of one org');
});

t.test('ClickHouse recomputes the entry hash as canonicalEntry does; where its JSON differs the verifier rechecks', async (t) => {
  const org = randomUUID();
  const text = fc.string({ unit: 'binary', maxLength: 30 });
  const records = fc.sample(fc.record({ reasoning: text, toolUrl: text, output: fc.option(text, { nil: null }), mcpTool: fc.option(text, { nil: null }), outputTruncated: fc.boolean(), latencyMs: fc.integer({ min: 0, max: 2 ** 31 }) }), 400)
    .map((fields) => auditRecord(org, { ...fields, reasoning: wellFormed(fields.reasoning), toolUrl: wellFormed(fields.toolUrl), output: fields.output === null ? null : wellFormed(fields.output), mcpTool: fields.mcpTool === null ? null : wellFormed(fields.mcpTool) }));
  records.push(auditRecord(org, { reasoning: 'plain / slash "quoted" \\ tab\t é 😀' }), auditRecord(org, { reasoning: 'line\u2028separator' }), auditRecord(org, { reasoning: 'unit\u001fseparator' }));
  await service.auditStore.insert(records);
  const groups: VerifyGroup[] = [];
  const now = new Date(Date.now() + 60_000);
  await service.auditStore.verifyGroups(org, { from: new Date(0), to: now, since: new Date(0), until: now, legacyFrom: new Date(0), legacyBefore: now, graceFrom: now, graceUntil: now }, (page) => groups.push(...page), 100);
  t.equal(groups.reduce((n, g) => n + g.count, 0), records.length, 'every row, in groups');
  t.equal(groups.reduce((n, g) => n + g.leaves.length, 0), records.length, 'a leaf each');
  const byId = new Map(records.map((r) => [r.id, r]));
  // ClickHouse's JSON escapes U+2028/U+2029 and writes control characters' hex in upper case; RFC 8785 does neither.
  const differs = (r: AuditRecord) => [r.reasoning, r.toolUrl, r.output ?? '', r.mcpTool ?? ''].some((v) => /[\u2028\u2029\u0000-\u0007\u000b\u000e-\u001f]/.test(v));
  const mismatched = groups.flatMap((g) => g.mismatched);
  t.strictSame(mismatched.filter((id) => !differs(byId.get(id)!)), [], 'the server agrees wherever its JSON is RFC 8785\'s');
  t.ok(mismatched.length > 0, 'some rows need the recheck');
  const rechecked = await service.auditStore.entriesByIds(org, mismatched);
  t.equal(rechecked.length, mismatched.length);
  for (const record of rechecked) t.equal(entryHash(record), entryHash(byId.get(record.id)!), 'read back in full, it hashes to its entry_hash');
});

t.test('entries the server\'s JSON spells differently still verify, through the recheck', async (t) => {
  const from = new Date().toISOString();
  for (const reasoning of ['line\u2028separator', 'unit\u001fseparator', 'para\u2029graph']) {
    t.equal((await api(base, owner, 'POST', '/audit', { agent_id: agent.id, tool_name: 'api.example.com', action: 'GET', decision: 'allowed', reasoning })).status, 201);
  }
  const result = await eventually(async () => {
    const res = (await api(base, owner, 'GET', `/audit/verify?since=${from}`)).json as { ok: boolean; entries: number; pending: number };
    return res.entries === 3 && res.pending === 0 ? res : undefined;
  });
  t.match(result, { ok: true, entries: 3, first_problem: null });
});

t.test('entries from before sealing began are legacy; an unsealed one after it is added', async (t) => {
  const keyRes = await api(base, owner, 'GET', '/audit/public-key');
  const keys = new Map([[keyRes.headers.get('x-key-fingerprint')!, createPublicKey(keyRes.text)]]);
  const orgId = (await seals(owner))[0]!.org_id;
  const old = auditRecord(orgId, { timestamp: new Date(Date.now() - 2 * 86_400_000).toISOString() });
  await service.auditStore.insert([old]); // hashed, no batch: as the version before seals wrote it
  const window = { since: new Date(Date.now() - 3 * 86_400_000), until: new Date(Date.now() + 1000), keys };
  const before = await verifyAudit(service.auditStore, orgId, window);
  t.match(before, { ok: true, legacy: 1, firstProblem: null }, 'older than the first seal: legacy');
  const late = auditRecord(orgId, { timestamp: new Date().toISOString() });
  await service.auditStore.insert([late]);
  const later = await verifyAudit(service.auditStore, orgId, { ...window, until: new Date(Date.now() + 1000), now: new Date(Date.now() + 120_000) });
  t.match(later.firstProblem, { reason: 'entry_added', auditId: late.id }, 'newer than the first seal, past the grace, no seal: added');
  const within = await verifyAudit(service.auditStore, orgId, { ...window, until: new Date(Date.now() + 1000) });
  t.match(within, { ok: true, pending: 1 }, 'within the grace it is pending');
  // When sealing began is known (the metadata store keeps it), an entry backdated before the org's first seal but after that is not legacy.
  const sealingSince = new Date(Date.now() - 3 * 86_400_000);
  const known = await verifyAudit(service.auditStore, orgId, { ...window, until: new Date(Date.now() + 1000), sealingSince, now: new Date(Date.now() + 120_000) });
  t.match(known.firstProblem, { reason: 'entry_added', auditId: old.id }, 'a backdated unsealed entry after sealing began: added');
  t.ok((await service.store.sealingSince())!.getTime() <= Date.now(), 'the service knows when it began sealing');
});

t.test('an entry dated ahead of the clock is named, though it lies past every window ending now', async (t) => {
  const keyRes = await api(base, owner, 'GET', '/audit/public-key');
  const keys = new Map([[keyRes.headers.get('x-key-fingerprint')!, createPublicKey(keyRes.text)]]);
  const orgId = (await seals(stranger))[0]!.org_id;
  const ahead = auditRecord(orgId, { timestamp: new Date(Date.now() + 86_400_000).toISOString() });
  await service.auditStore.insert([ahead]);
  const result = await verifyAudit(service.auditStore, orgId, { since: new Date(Date.now() - 3_600_000), until: new Date(), keys });
  t.match(result.firstProblem, { reason: 'entry_added', auditId: ahead.id });
  t.match(result.firstProblem?.detail, /ahead of the verifier's clock/);
});

/** verifyAudit of `orgId` from `from` to now under `key`, the longest the event loop waited meanwhile (ms), and how long it was busy (s). */
async function verifyTimed(orgId: string, from: number, key: { fingerprint: string; publicKey: KeyObject }) {
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const started = performance.now();
  const loopBefore = performance.eventLoopUtilization();
  const result = await verifyAudit(service.auditStore, orgId, { since: new Date(from - 1000), until: new Date(), keys: new Map([[key.fingerprint, key.publicKey]]) });
  const busy = performance.eventLoopUtilization(loopBefore).active / 1000;
  const seconds = (performance.now() - started) / 1000;
  delay.disable();
  return { result, seconds, longest: delay.max / 1e6, busy };
}

t.test('verifying many sealed entries gives the event loop its turns (all-in-one, the proxy shares it)', async (t) => {
  // 400,000 entries in 20 batches of 20,000 (AUDIT_BATCH_ROWS): recomputing the
  // roots is ~0.8 s of hashing, which held the loop whole; a batch's root is
  // ~45 ms, and reading a page of 250,000 entries' hashes ~150 ms.
  const key = signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
  const sealer = new Sealer(key);
  const orgId = randomUUID();
  const from = Date.now() - 2 * 3_600_000; // 10 ms apart: 4,000 s of entries, all past
  for (let b = 0; b < 20; b++) {
    const batchId = randomUUID();
    const lines: string[] = [];
    for (let i = 0; i < 20_000; i++) {
      lines.push(service.auditStore.encode(auditRecord(orgId, { timestamp: new Date(from + (b * 20_000 + i) * 10).toISOString() }), batchId));
    }
    await service.auditStore.insertEncoded(lines.join('') + sealer.sealLines(lines).lines.join(''), randomUUID());
  }
  const { result, seconds, longest } = await verifyTimed(orgId, from, key);
  t.match(result, { ok: true, entries: 400_000, seals: 20 });
  t.ok(longest < 450, `the longest the event loop waited during the ${seconds.toFixed(2)} s verify: ${longest.toFixed(0)} ms`);
});

t.test('verifying a seal per entry gives the event loop its turns (an org whose calls come one a batch)', async (t) => {
  // 6,000 one-entry batches: each seal's signature is ~120 µs of Ed25519, which ran
  // in one loop (a day of one batch a second, 86,400 seals, held the loop 12 s),
  // and a page of 6,000 batches' groups was parsed in one piece.
  const key = signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
  const sealer = new Sealer(key);
  const orgId = randomUUID();
  const from = Date.now() - 3_600_000;
  const SEALS = 6000;
  let body = '';
  for (let i = 0; i < SEALS; i++) {
    const lines = [service.auditStore.encode(auditRecord(orgId, { timestamp: new Date(from + i * 500).toISOString() }), randomUUID())];
    body += lines.join('') + sealer.sealLines(lines).lines.join('');
  }
  await service.auditStore.insertEncoded(body, randomUUID());
  // What checking that many signatures costs the loop when done on it (a seal's body is ~300 bytes).
  // Timed before and after the verify, the longer kept: the machine may be busier during one.
  const pair = generateKeyPairSync('ed25519');
  const message = Buffer.alloc(300, 'a');
  const signature = sign(null, message, pair.privateKey);
  const signaturesOnLoop = (): number => {
    const started = performance.now();
    for (let i = 0; i < SEALS; i++) verify(null, message, pair.publicKey, signature);
    return (performance.now() - started) / 1000;
  };
  const before = signaturesOnLoop();
  const { result, seconds, longest, busy } = await verifyTimed(orgId, from, key);
  const onLoop = Math.max(before, signaturesOnLoop());
  t.match(result, { ok: true, entries: SEALS, seals: SEALS });
  t.ok(longest < 300, `the longest the event loop waited during the ${seconds.toFixed(2)} s verify of ${SEALS} seals: ${longest.toFixed(0)} ms`);
  // The signatures are checked by a worker: the loop is busy well under what they alone take on it
  // (with them on the loop, it was busy 1.4 times that; now a third).
  t.ok(busy < onLoop * 0.8, `the event loop was busy ${busy.toFixed(2)} s of the verify; ${SEALS} signatures checked on it take ${onLoop.toFixed(2)} s`);
});

/**
 * A chain of `count` seals of `orgId`, a second apart from `from`, stored alone:
 * chained and hashed but signed by a key the verifier does not trust, so cheap
 * to make and to check, and each read as a signed one is.
 */
async function seedSealChain(orgId: string, count: number, from: number, seqOf: (n: number) => number | string = (n) => n): Promise<void> {
  const lines = sealChainLines(orgId, count, from, seqOf);
  for (let i = 0; i < lines.length; i += 25_000) await service.auditStore.insertEncoded(lines.slice(i, i + 25_000).join(''), randomUUID());
}

/** The seal lines of seedSealChain. */
function sealChainLines(orgId: string, count: number, from: number, seqOf: (n: number) => number | string = (n) => n): string[] {
  const writer = randomUUID();
  let prevHash = GENESIS_HASH;
  const lines: string[] = [];
  for (let n = 1; n <= count; n++) {
    const seq = seqOf(n) as number; // a string for a UInt64 past 2^53
    const at = new Date(from + n * 1000).toISOString();
    const fields = { id: randomUUID(), orgId, writer, seq, batchId: randomUUID(), firstAt: at, lastAt: at, count: 1, root: 'a'.repeat(64), prevHash, keyFingerprint: 'b'.repeat(64), createdAt: at };
    const sealHash = hash('sha256', sealBody(fields), 'hex');
    lines.push(encodeSealLine({ ...fields, sealHash, signature: `${'A'.repeat(86)}==` }));
    prevHash = sealHash;
  }
  return lines;
}

t.test('seals that land while a chain is read, below where its pages have reached, move no seal into a page read already', async (t) => {
  // A writer's older batches may land late (a spool replayed at its next start).
  // Paged by OFFSET, the 100 landing here shifted the second page back over 100 seals read
  // already, and each was counted twice; paged by seq, none is.
  const orgId = randomUUID();
  const from = Date.now() - 4 * 3_600_000; // a second apart: 10,000 s of seals, all past
  const lines = sealChainLines(orgId, 10_000, from);
  const late = lines.slice(1, 101);
  await service.auditStore.insertEncoded([lines[0]!, ...lines.slice(101)].join(''), randomUUID());
  let landed = false;
  const store = new Proxy(service.auditStore, {
    get(target, key) {
      if (key !== 'sealRange') return Reflect.get(target, key);
      return async (...args: Parameters<typeof target.sealRange>) => {
        const page = await target.sealRange(...args);
        if (!landed && args[4] !== undefined) {
          landed = true;
          await target.insertEncoded(late.join(''), randomUUID());
        }
        return page;
      };
    },
  });
  const result = await verifyAudit(store, orgId, { since: new Date(from), until: new Date(), keys: new Map() });
  t.ok(landed);
  t.match(result, { ok: false, seals: 9_900 }, 'the 9,900 seals there when the chain was read, each once');
});

t.test('a window of 125,000 seals of one chain is verified offline (spread into one push() they overflowed the stack: 500), and refused by GET /audit/verify (past 100,000)', async (t) => {
  const session = await signup(base);
  const orgId = (await service.store.findUserByEmail(session.email))!.orgId;
  const from = Date.now() - 2 * 86_400_000;
  const SEALS = 125_000;
  await seedSealChain(orgId, SEALS, from);
  const result = await verifyAudit(service.auditStore, orgId, { since: new Date(from), until: new Date(), keys: new Map() });
  t.match(result, { ok: false, seals: SEALS, firstProblem: { reason: 'unknown_key' } }, 'every seal read and checked; the first problem is its key');
  const since = new Date(from).toISOString();
  const refused = await api(base, session, 'GET', `/audit/verify?since=${since}`);
  assertError(t, refused, 400, 'invalid_request');
  t.match(refused.json, { field: 'since', seals: SEALS, max_seals: 100_000, message: /^The window holds 125,000 seals; at most 100,000 are verified at once here\./ });
  const narrower = await api(base, session, 'GET', `/audit/verify?since=${since}&until=${new Date(from + 1000 + 20_000 * 1000).toISOString()}`);
  t.equal(narrower.status, 200, narrower.text.slice(0, 200));
  t.match(narrower.json, { ok: false, seals: 20_000, first_problem: { reason: 'unknown_key' } }, 'a narrower window is verified');
});

t.test('a seal whose seq is 10^12, 2^53 + 1 or 2^64 - 1 is named at once (the chain is read by rows, not by seqs)', async (t) => {
  // Read by seqs, 5,000 a query, the range 1..10^12 took 2×10^8 queries; past 2^53
  // the client refused the bound (a JS number cannot name it) and verify threw.
  for (const seq of [1e12, '9007199254740993', '18446744073709551615']) {
    const orgId = randomUUID();
    const from = Date.now() - 3_600_000;
    await seedSealChain(orgId, 4, from, (n) => (n === 4 ? seq : n));
    const timeout = new Promise<'timed out'>((resolve) => setTimeout(() => resolve('timed out'), 15_000).unref());
    const result = await Promise.race([verifyAudit(service.auditStore, orgId, { since: new Date(from), until: new Date(), keys: new Map() }), timeout]);
    t.not(result, 'timed out', `seq ${seq}`);
    t.match(result, { ok: false, seals: 4 });
    t.equal((result as Awaited<ReturnType<typeof verifyAudit>>).firstProblem?.reason, 'seal_removed', 'the gap before it is named');
  }
});

t.test('bad input is 400 in the contract\'s shape; no token is 401', async (t) => {
  for (const path of ['/audit/verify?since=yesterday', '/audit/verify?until=2026-13-01', '/audit/seals?since=x', '/audit/seals?limit=0', `/audit/verify?since=2026-02-01&until=2026-01-01`]) {
    assertError(t, await api(base, owner, 'GET', path), 400, 'invalid_request');
  }
  for (const path of ['/audit/verify', '/audit/seals', '/audit/public-key']) {
    assertError(t, await api(base, null, 'GET', path), 401, 'unauthorized');
  }
});

t.test('an until early in year 0000 is answered: the default since (a day before) stops at 0000-01-01, not in year -1 (a 500)', async (t) => {
  const verified = await api(base, owner, 'GET', '/audit/verify?until=0000-01-01T12:00:00Z');
  t.match(verified, { status: 200, json: { ok: true, seals: 0 } }, verified.text);
  const seals = await api(base, owner, 'GET', '/audit/seals?until=0000-01-01T12:00:00Z');
  t.equal(seals.status, 200, seals.text);
  const summary = await api(base, owner, 'GET', '/audit/summary?until=0000-01-01T12:00:00Z');
  t.match(summary, { status: 200, json: { since: '0000-01-01T00:00:00.000Z', calls: 0 } }, summary.text);
  assertError(t, await api(base, owner, 'GET', '/audit/verify?until=0000-01-01'), 400, 'invalid_request', 'since');
});

t.test('the PDF report ends with the seals covering its window, whole, and how to verify them', async (t) => {
  const res = await fetch(`${base}/audit/export/pdf?days=1`, { headers: owner.auth });
  t.equal(res.status, 200);
  const text = (await pdfParse(Buffer.from(await res.arrayBuffer()))).text;
  const all = await seals(owner, `?since=${new Date(Date.now() - 86_400_000).toISOString()}`);
  const fingerprint = (await api(base, owner, 'GET', '/audit/public-key')).headers.get('x-key-fingerprint')!;
  const at = text.lastIndexOf('Seals');
  t.ok(at > text.lastIndexOf('Entries'), 'after the entries');
  const tail = text.slice(at);
  t.match(tail, new RegExp(`${all.length} seals in \\d+ chains? cover this window`));
  t.ok(tail.includes(fingerprint), 'the key fingerprint');
  t.match(tail, /npm run verify-audit/);
  t.match(tail, /GET \/audit\/public-key/);
  for (const s of all) {
    t.ok(tail.includes(s.root), `seal ${s.seq}'s root in full`);
    t.ok(tail.includes(s.signature), `and its signature`);
  }
  const pem = readFileSync(join(service.dataDir, 'audit-signing-key.pem'), 'utf8');
  const secret = pem.split('\n').filter((l) => l.length > 0 && !l.startsWith('-----')).join('');
  t.notOk(text.includes(secret.slice(0, 40)), 'never the private key');
});

t.test('the signing key: generated 0600 in the data directory, never in a response or a log', async (t) => {
  const file = join(service.dataDir, 'audit-signing-key.pem');
  t.equal(statSync(file).mode & 0o777, 0o600);
  const pem = readFileSync(file, 'utf8');
  const secret = pem.split('\n').filter((l) => l.length > 0 && !l.startsWith('-----')).join('');
  t.ok(secret.length > 40);
  const responses = [
    await api(base, owner, 'GET', '/audit/public-key'),
    await api(base, owner, 'GET', `/audit/seals?since=${started}`),
    await api(base, owner, 'GET', `/audit/verify?since=${started}`),
  ];
  for (const res of responses) t.notOk(res.text.includes(secret), 'not in a response');
  t.notOk(service.logs.join('\n').includes(secret), 'not in the logs');
});
