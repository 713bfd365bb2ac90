// The audit batcher's rules, against the real ClickHouse store over the HTTP
// stand-in, which goes down and comes back on demand (test/support/audit-store-on-demand.ts),
// and a real spool in a fresh directory per test. Every test writes to an org of
// its own and counts only that org's rows.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from '@clickhouse/client';
import t, { type Test } from 'tap';
import { countEncodedRows, parseSpoolFileName } from '../../shared/audit/audit-codec.js';
import { AuditBatcher, type AuditBatcherOptions } from '../../shared/audit/audit-batcher.js';
import { AuditSpool } from '../../shared/audit/audit-spool.js';
import { AuditJournal } from '../../shared/audit/audit-journal.js';
import { Sealer, sealHeadsOf, signingKeyFromPem } from '../../shared/audit/seal.js';
import { auditRecord } from '../support/audit-records.js';
import { openAuditStoreOnDemand } from '../support/audit-store-on-demand.js';
import { eventually } from '../support/eventually.js';

const audit = await openAuditStoreOnDemand();
t.teardown(() => audit.close());
const { store } = audit;

type Stage = Parameters<NonNullable<AuditBatcherOptions['onError']>>[2];

/** A batcher on the store, closed after the test, with the stages of its errors collected. */
function batcherFor(t: Test, options: Omit<AuditBatcherOptions, 'onError'>): { batcher: AuditBatcher; errors: Stage[] } {
  const errors: Stage[] = [];
  const batcher = new AuditBatcher(store, { ...options, onError: (_err, _rows, stage) => errors.push(stage) });
  t.teardown(async () => {
    audit.up();
    await batcher.close(0);
  });
  return { batcher, errors };
}

function spoolDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-batcher-spool-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The rows and batches the spool in `dir` holds, read as the next start would. */
async function spooled(t: Test, dir: string): Promise<{ rows: number; batches: number }> {
  const reopened = AuditSpool.open(dir, 1 << 20);
  t.teardown(() => reopened.close());
  let rows = 0;
  for (const batch of reopened.batches) rows += countEncodedRows(await reopened.read(batch));
  return { rows, batches: reopened.batches.length };
}

function enqueue(batcher: AuditBatcher, org: string, n: number): void {
  for (let i = 0; i < n; i++) batcher.enqueue(auditRecord(org));
}

t.test('a batch is written once it holds maxRows records, and not before', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 5, maxDelayMs: 60_000, maxQueued: 100 });
  const org = randomUUID();
  const before = audit.attempts.length;
  enqueue(batcher, org, 4);
  await sleep(300);
  t.equal(await store.count(org), 0, 'four of five rows: nothing written');
  t.equal(batcher.pending, 4);
  enqueue(batcher, org, 1);
  await audit.rowsLanded(org, 5, 5000);
  t.strictSame(audit.attempts.slice(before).map((a) => a.rows), [5], 'one insert of five rows');
  // The rows can be read back a moment before the insert's answer reaches the batcher.
  await eventually(async () => (batcher.pending === 0 ? true : undefined));
  t.equal(batcher.pending, 0);
});

t.test('a closed batch\'s insert starts in the turn after its seal, not in the seal\'s own', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 5, maxDelayMs: 60_000, maxQueued: 100 });
  const org = randomUUID();
  const before = audit.attempts.length;
  enqueue(batcher, org, 5); // the fifth row closes and seals the batch, in this turn
  t.equal(audit.attempts.length, before, 'no insert yet in the turn that sealed it');
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(audit.attempts.length, before + 1, 'the insert has started in the next');
  await audit.rowsLanded(org, 5, 5000);
});

t.test('a batch short of maxRows is written after maxDelayMs', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 1000, maxDelayMs: 250, maxQueued: 10_000 });
  const org = randomUUID();
  const before = audit.attempts.length;
  const started = performance.now();
  enqueue(batcher, org, 3);
  await audit.rowsLanded(org, 3, 5000);
  const waited = performance.now() - started;
  t.ok(waited >= 250, `written after ${waited.toFixed(0)} ms, not before the delay`);
  t.strictSame(audit.attempts.slice(before).map((a) => a.rows), [3], 'one insert of the three rows');
});

t.test('under steady load batches close at most once per minIntervalMs: fewer, larger inserts', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 100_000, maxDelayMs: 20, minIntervalMs: 400, maxQueued: 100_000 });
  const org = randomUUID();
  const before = audit.attempts.length;
  // A row every 10 ms for 1.3 s: with maxDelayMs alone that is ~50 batches.
  const started = performance.now();
  for (let i = 0; i < 130; i++) {
    enqueue(batcher, org, 1);
    await sleep(10);
  }
  await audit.rowsLanded(org, 130, 5000);
  const took = performance.now() - started;
  const batches = audit.attempts.slice(before).map((a) => a.rows);
  t.equal(batches.reduce((a, b) => a + b, 0), 130, 'every row written once');
  t.ok(batches.length >= 2 && batches.length <= took / 400 + 2, `${batches.length} inserts (${batches.join(', ')} rows) for 130 rows over ${took.toFixed(0)} ms: at most one per 400 ms`);
  t.ok(batches[0]! <= 3, `the first rows, after a quiet spell, went after maxDelayMs (${batches[0]} of them)`);
});

t.test('after a quiet spell of minIntervalMs a lone row goes after maxDelayMs', async (t) => {
  // An interval long beside an insert's time under a loaded CI machine (one took
  // 271 ms there, ~55 here): a row held for it would land after 1,500 ms.
  const { batcher } = batcherFor(t, { maxRows: 1000, maxDelayMs: 30, minIntervalMs: 1500, maxQueued: 10_000 });
  const org = randomUUID();
  enqueue(batcher, org, 1);
  await audit.rowsLanded(org, 1, 5000);
  await sleep(1550);
  const started = performance.now();
  enqueue(batcher, org, 1);
  await audit.rowsLanded(org, 2, 5000);
  const waited = performance.now() - started;
  t.ok(waited < 1000, `the second row landed ${waited.toFixed(0)} ms after it was queued, not held for the interval`);
});

t.test('a batch that reaches maxRows closes at once, whatever minIntervalMs says', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 5, maxDelayMs: 20, minIntervalMs: 60_000, maxQueued: 1000 });
  const org = randomUUID();
  const before = audit.attempts.length;
  enqueue(batcher, org, 5);
  enqueue(batcher, org, 5);
  await audit.rowsLanded(org, 10, 5000);
  t.strictSame(audit.attempts.slice(before).map((a) => a.rows), [5, 5], 'two inserts of five rows, without waiting a minute');
});

t.test('a batch that reaches maxBatchBytes closes at once, whatever minIntervalMs says', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 100_000, maxDelayMs: 20, minIntervalMs: 60_000, maxBatchBytes: 64 * 1024, maxQueued: 100_000 });
  const org = randomUUID();
  const before = audit.attempts.length;
  // Rows of ~16 KiB of output: the fourth reaches 64 KiB.
  for (let i = 0; i < 8; i++) batcher.enqueue(auditRecord(org, { output: 'x'.repeat(16 * 1024) }));
  await audit.rowsLanded(org, 8, 5000);
  t.strictSame(audit.attempts.slice(before).map((a) => a.rows), [4, 4], 'two inserts of four rows, without waiting a minute');
});

t.test('close writes an open batch at once, however long the interval it waits for', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 1000, maxDelayMs: 20, minIntervalMs: 60_000, maxQueued: 10_000 });
  const org = randomUUID();
  enqueue(batcher, org, 1);
  await audit.rowsLanded(org, 1, 5000);
  enqueue(batcher, org, 2); // this batch waits for the interval
  await sleep(100);
  t.equal(await store.count(org), 1, 'held for the interval');
  const started = performance.now();
  t.equal(await batcher.close(5000), 0, 'nothing unwritten');
  t.ok(performance.now() - started < 3000, `closed in ${(performance.now() - started).toFixed(0)} ms`);
  t.equal(await store.count(org), 3, 'the held rows were written by close');
});

t.test('a batch the store refuses is spooled, then replayed with the token it was first tried with', async (t) => {
  const dir = spoolDir(t);
  const { batcher, errors } = batcherFor(t, { maxRows: 4, maxDelayMs: 60_000, maxQueued: 100, spool: AuditSpool.open(dir, 1 << 20) });
  const org = randomUUID();
  const before = audit.attempts.length;
  audit.down();
  enqueue(batcher, org, 4);
  await eventually(async () => (batcher.spooledBatches === 1 && batcher.pending === 0 ? true : undefined));
  const token = audit.attempts[before]?.token;
  t.ok(token, 'the insert was tried');
  t.ok(errors.includes('insert'), 'the failed insert was reported');
  t.strictSame(readdirSync(dir).flatMap((name) => parseSpoolFileName(name)?.token ?? []), [token], 'spooled under that token');
  audit.up();
  await audit.rowsLanded(org, 4);
  await eventually(async () => (batcher.spooledBatches === 0 ? true : undefined));
  const tokens = new Set(audit.attempts.slice(before).map((a) => a.token));
  t.strictSame([...tokens], [token], 'every attempt, the first and each replay, carried one token');
  t.equal(batcher.stats.replayed, 4);
  t.strictSame(readdirSync(dir).filter((name) => parseSpoolFileName(name) !== null), [], 'the replayed file is deleted');
});

t.test('a replay of a batch whose acknowledgement was lost writes no row twice', async (t) => {
  const { batcher, errors } = batcherFor(t, { maxRows: 4, maxDelayMs: 60_000, maxQueued: 100, spool: AuditSpool.open(spoolDir(t), 1 << 20) });
  const org = randomUUID();
  const before = audit.attempts.length;
  audit.loseNextAcknowledgement();
  enqueue(batcher, org, 4);
  await eventually(async () => (batcher.stats.replayed === 4 && batcher.spooledBatches === 0 ? true : undefined));
  t.ok(errors.includes('insert'), 'the first insert looked failed');
  const attempts = audit.attempts.slice(before);
  t.equal(attempts.length, 2, 'written once, replayed once');
  t.equal(attempts[1]?.token, attempts[0]?.token, 'the replay reused the token');
  t.equal(await store.count(org), 4, 'the store dropped the replayed copy');
});

t.test("a spooled batch whose seals are stored is not replayed: past ClickHouse's deduplication window its rows would be written twice", async (t) => {
  const sealer = new Sealer(signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()));
  const org = randomUUID();
  const token = randomUUID();
  const rows = [auditRecord(org), auditRecord(org)].map((record) => store.encode(record, token));
  const lines = [...rows, ...sealer.sealLines(rows).lines];
  await store.insertEncoded(lines.join(''), token); // it landed; its acknowledgement was lost, so it was spooled too
  const client = createClient({ url: audit.url });
  t.teardown(async () => {
    for (const table of ['audit_log', 'audit_seals']) await client.command({ query: `ALTER TABLE ${table} MODIFY SETTING non_replicated_deduplication_window = 10000` });
    await client.close();
  });
  // Many inserts since (other processes'): ClickHouse no longer remembers the token.
  for (const table of ['audit_log', 'audit_seals']) await client.command({ query: `ALTER TABLE ${table} MODIFY SETTING non_replicated_deduplication_window = 1` });
  await store.insertEncoded(store.encode(auditRecord(randomUUID()), randomUUID()), randomUUID());
  const dir = spoolDir(t);
  const spool = AuditSpool.open(dir, 1 << 20);
  await spool.write(lines, token);
  const before = audit.attempts.length;
  const { batcher } = batcherFor(t, { maxRows: 100, maxDelayMs: 60_000, maxQueued: 100, spool });
  await eventually(async () => (batcher.spooledBatches === 0 ? true : undefined));
  t.equal(audit.attempts.length, before, 'no insert');
  t.equal(await store.count(org), 2, 'each row once');
  t.equal((await store.listSeals(org)).length, 1, 'its seal once');
});

t.test('after an outage the spooled batches land before fresh ones: the chain in the store never has a gap while the spool drains', async (t) => {
  const sealer = new Sealer(signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()));
  const landed: number[] = [];
  const org = randomUUID();
  const onBodyWritten = (body: string): void => {
    for (const head of sealHeadsOf(body)) if (head.org_id === org) landed.push(head.seq);
  };
  const { batcher } = batcherFor(t, { maxRows: 2, maxDelayMs: 60_000, maxQueued: 100, spool: AuditSpool.open(spoolDir(t), 1 << 20), sealer, onBodyWritten });
  audit.down();
  enqueue(batcher, org, 6);
  await eventually(async () => (batcher.spooledBatches === 3 && batcher.pending === 0 ? true : undefined));
  // The store is back while the retry waits; two fresh batches are sealed before it fires.
  audit.up();
  enqueue(batcher, org, 4);
  await eventually(async () => (landed.length === 5 ? true : undefined), 10_000);
  t.same(landed, [1, 2, 3, 4, 5], 'seals land in their chain\'s order');
  t.same((await store.listSeals(org)).map((s) => s.seq), [1, 2, 3, 4, 5]);
  t.equal(await store.count(org), 10, 'every row once');
});

t.test('with a sealer, a batch and its seals are spooled together and replayed once, after a lost acknowledgement too', async (t) => {
  const sealer = new Sealer(signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()));
  const bodies: string[] = [];
  const { batcher } = batcherFor(t, { maxRows: 3, maxDelayMs: 60_000, maxQueued: 100, spool: AuditSpool.open(spoolDir(t), 1 << 20), sealer, onBodyWritten: (body) => bodies.push(body) });
  const [orgA, orgB] = [randomUUID(), randomUUID()];
  audit.down();
  batcher.enqueue(auditRecord(orgA));
  batcher.enqueue(auditRecord(orgB));
  batcher.enqueue(auditRecord(orgA));
  await eventually(async () => (batcher.spooledBatches === 1 && batcher.pending === 0 ? true : undefined));
  audit.loseNextAcknowledgement();
  audit.up();
  await eventually(async () => (batcher.stats.replayed === 3 && batcher.spooledBatches === 0 ? true : undefined), 10_000);
  const [sealsA, sealsB] = [await store.listSeals(orgA), await store.listSeals(orgB)];
  t.match(sealsA, [{ seq: 1, count: 2, writer: sealer.writer }], 'one seal for org A, written once');
  t.match(sealsB, [{ seq: 1, count: 1 }], 'one for org B');
  t.equal(await store.count(orgA), 2);
  t.equal(sealsA[0]!.batchId, sealsB[0]!.batchId, 'both name the one batch');
  t.equal(bodies.length, 1, 'the written body is reported once, for its chain heads');
  enqueue(batcher, orgA, 3);
  await eventually(async () => ((await store.listSeals(orgA)).length === 2 ? true : undefined));
  t.match((await store.listSeals(orgA))[1], { seq: 2, prevHash: sealsA[0]!.sealHash }, 'the next batch\'s seal links to it');
});

t.test("a big batch's seals are made a slice a turn: the rows' segment is cut at once, sealed with its token only when they are made, and the insert starts after", async (t) => {
  const key = signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
  const dir = spoolDir(t);
  const { journal } = AuditJournal.open(join(dir, 'journal'));
  const rows = 20_000; // about a second's rows under the bench's load
  const { batcher } = batcherFor(t, { maxRows: rows, maxDelayMs: 60_000, maxQueued: 2 * rows, journal, sealer: new Sealer(key) });
  const org = randomUUID();
  const segments = () => readdirSync(join(dir, 'journal')).sort();
  const before = audit.attempts.length;
  enqueue(batcher, org, rows); // the last row closes the batch
  const [cut] = segments();
  const segment = () => readFileSync(join(dir, 'journal', cut!), 'utf8');
  t.equal(countEncodedRows(segment()), rows, 'the rows are in the cut segment at once');
  t.notMatch(segment(), /#sealed /, 'not yet sealed');
  let turns = 0;
  while (audit.attempts.length === before && turns < 10_000) {
    await new Promise((resolve) => setImmediate(resolve));
    turns++;
  }
  t.ok(turns > 5, `the insert began ${turns} turns after the batch closed, not in the next`);
  const sealed = segment(); // as the insert begins (the segment goes once the batch is written)
  t.match(sealed, /\n#sealed [0-9a-f-]{36}\n$/, 'by then the segment ends with its token');
  const rowLines = sealed.split('\n').filter((l) => l.length > 0 && !l.startsWith('#')).map((l) => `${l}\n`);
  t.equal(rowLines.length, rows, 'after its rows, its seal line (and no other row)');
  await audit.rowsLanded(org, rows, 20_000);
  // The seals are a second insert, after the rows; the batch settles after both.
  await eventually(async () => ((await store.listSeals(org)).length === 1 && batcher.pending === 0 ? true : undefined), 10_000);
  const [seal] = await store.listSeals(org);
  t.match(seal, { count: rows, seq: 1 }, 'one seal over the whole batch');
  t.equal(new Sealer(key).sealLines(rowLines).seals[0]!.root, seal!.root, 'its root is the one the journaled rows give');
  t.equal(batcher.pending, 0);
});

t.test("with a journal, afterJournaled runs only once the records queued before it are on disk", async (t) => {
  // The proxy queues a call's record, then holds the call's last bytes in
  // afterJournaled: an answer never leaves before its record is in the file.
  const dir = spoolDir(t);
  const { journal } = AuditJournal.open(join(dir, 'journal'));
  const { batcher } = batcherFor(t, { maxRows: 1000, maxDelayMs: 60_000, maxQueued: 100, journal });
  const org = randomUUID();
  const onDisk = () => readdirSync(join(dir, 'journal')).map((name) => readFileSync(join(dir, 'journal', name), 'utf8')).join('');
  const found: boolean[] = [];
  for (let i = 0; i < 3; i++) {
    const record = auditRecord(org);
    batcher.enqueue(record);
    batcher.afterJournaled({ journaled: () => found.push(onDisk().includes(record.id)), refused: () => t.fail('refused while open') });
  }
  t.strictSame(found, [], 'nothing released within the turn the records were queued in');
  await new Promise((r) => setImmediate(r));
  t.strictSame(found, [true, true, true], 'each waiter saw its record in the journal');
  t.equal(journal.stats.writes, 1, 'one write for the three');
  const { batcher: plain } = batcherFor(t, { maxRows: 1000, maxDelayMs: 60_000, maxQueued: 100 });
  let ran = false;
  plain.afterJournaled({ journaled: () => (ran = true), refused: () => t.fail('refused while open') });
  t.ok(ran, 'without a journal a waiter runs at once');
});

t.test('after close, a waiter is refused, not released: a record queued then is never kept, so its answer must not go', async (t) => {
  const dir = spoolDir(t);
  const { journal } = AuditJournal.open(join(dir, 'journal'));
  const { batcher } = batcherFor(t, { maxRows: 1000, maxDelayMs: 60_000, maxQueued: 100, journal, spool: AuditSpool.open(dir, 1 << 20) });
  const org = randomUUID();
  batcher.enqueue(auditRecord(org));
  const before: string[] = [];
  batcher.afterJournaled({ journaled: () => before.push('journaled'), refused: () => before.push('refused') });
  await batcher.close(5000);
  t.strictSame(before, ['journaled'], 'a call queued before close is answered (its record written or spooled)');
  batcher.enqueue(auditRecord(org)); // a call that ended after the flush
  const after: string[] = [];
  batcher.afterJournaled({ journaled: () => after.push('journaled'), refused: () => after.push('refused') });
  t.strictSame(after, ['refused']);
});

t.test('a batch neither the store nor the spool takes stays in memory and is retried', async (t) => {
  const dir = spoolDir(t);
  const { batcher, errors } = batcherFor(t, { maxRows: 4, maxDelayMs: 60_000, maxQueued: 100, spool: AuditSpool.open(dir, 1 << 20) });
  const org = randomUUID();
  audit.down();
  rmSync(dir, { recursive: true });
  enqueue(batcher, org, 4);
  await eventually(async () => (errors.includes('spool') ? true : undefined));
  t.equal(batcher.pending, 4, 'held in memory');
  t.equal(batcher.spooledBatches, 0);
  mkdirSync(dir);
  await eventually(async () => (batcher.spooledBatches === 1 ? true : undefined));
  t.equal(batcher.pending, 0, 'a later attempt spooled it once the spool could take it');
  audit.up();
  await audit.rowsLanded(org, 4);
});

t.test("a batch's bytes stay its own while its insert is retried; released chunks serve later batches without touching any row", async (t) => {
  // Rows of ~60 KB: a few fill a 256 KiB chunk (row-bytes.ts), so every batch spans chunks.
  const { batcher, errors } = batcherFor(t, { maxRows: 12, maxDelayMs: 20, maxQueued: 1000 });
  const org = randomUUID();
  const queued = new Map<string, string>();
  const enqueueRows = (n: number) => {
    for (let i = 0; i < n; i++) {
      const record = auditRecord(org, { reasoning: `${randomUUID()} `.repeat(1600) });
      queued.set(record.id, record.reasoning);
      batcher.enqueue(record);
    }
  };
  audit.down();
  enqueueRows(12); // refused, no spool: kept in memory and retried
  await eventually(async () => (errors.includes('insert') ? true : undefined));
  enqueueRows(12); // queued while the first waits for its retry, on chunks of its own
  audit.up();
  await audit.rowsLanded(org, 24);
  enqueueRows(24); // on the chunks the first two batches released
  await audit.rowsLanded(org, 48);
  const page = await store.list(org, {}, 100, 0);
  t.equal(page.total, 48);
  t.strictSame(new Set(page.rows.map((row) => row.id)), new Set(queued.keys()), 'every row once, none in another\'s place');
  t.ok(page.rows.every((row) => queued.get(row.id) === row.reasoning), 'each row as it was queued');
});

t.test('a store that hangs costs one insert timeout, not one per batch: the batches behind the failed one go straight to the spool', async (t) => {
  const dir = spoolDir(t);
  const { batcher } = batcherFor(t, { maxRows: 5, maxDelayMs: 60_000, maxQueued: 10_000, spool: AuditSpool.open(dir, 1 << 20) });
  const org = randomUUID();
  audit.hang(1500);
  const before = audit.attempts.length;
  enqueue(batcher, org, 25); // five batches; the first one's insert hangs
  const started = performance.now();
  await eventually(async () => (batcher.spooledBatches === 5 ? true : undefined), 6000);
  const took = performance.now() - started;
  t.ok(took < 3000, `all five spooled after ${took.toFixed(0)} ms (one timeout of 1.5 s, not five)`);
  t.equal(audit.attempts.length - before, 1, 'one insert tried');
  t.equal(batcher.pending, 0, 'nothing left in memory');
  audit.up();
  await audit.rowsLanded(org, 25);
});

t.test('close does not wait out its deadline for a spool the store cannot take: spooled batches are durable', async (t) => {
  const dir = spoolDir(t);
  const { batcher } = batcherFor(t, { maxRows: 5, maxDelayMs: 60_000, maxQueued: 10_000, spool: AuditSpool.open(dir, 1 << 20) });
  const org = randomUUID();
  audit.down();
  enqueue(batcher, org, 5);
  await eventually(async () => (batcher.spooledBatches === 1 ? true : undefined), 5000);
  enqueue(batcher, org, 2); // and two in memory
  const started = performance.now();
  t.equal(await batcher.close(8000), 0, 'nothing unwritten');
  const took = performance.now() - started;
  t.ok(took < 3000, `closed after ${took.toFixed(0)} ms, not the 8 s deadline`);
  const { rows } = await spooled(t, dir);
  t.equal(rows, 7, 'every record is in the spool');
});

t.test('saturated once maxQueued records are held, and no longer once they are written', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 2, maxDelayMs: 20, maxQueued: 3 });
  const org = randomUUID();
  audit.down();
  enqueue(batcher, org, 2);
  t.equal(batcher.saturated, false, 'two of three');
  enqueue(batcher, org, 1);
  t.equal(batcher.saturated, true, 'three of three');
  await t.rejects(batcher.enqueueDurable(auditRecord(org)), /saturated/, 'a durable enqueue is refused');
  enqueue(batcher, org, 1);
  t.equal(batcher.pending, 4, 'the record of admitted work is still accepted');
  audit.up();
  await audit.rowsLanded(org, 4);
  await eventually(async () => (batcher.pending === 0 ? true : undefined));
  t.equal(batcher.saturated, false);
  t.equal(batcher.pending, 0);
  await t.resolves(batcher.enqueueDurable(auditRecord(org)), 'a durable enqueue resolves once written');
  t.equal(await store.count(org), 5);
});

t.test('saturated once the held rows reach maxQueuedBytes, with far fewer rows than maxQueued', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 1000, maxDelayMs: 20, maxQueued: 10_000, maxQueuedBytes: 200_000 });
  const org = randomUUID();
  audit.down();
  const big = () => batcher.enqueue({ ...auditRecord(org), output: 'x'.repeat(64 * 1024) });
  big();
  big();
  t.equal(batcher.saturated, false, 'two 64 KiB rows: under 200,000 bytes');
  big();
  big();
  t.equal(batcher.pending, 4, 'four rows of the 10,000 allowed');
  t.equal(batcher.saturated, true, 'but over the byte bound');
  audit.up();
  await audit.rowsLanded(org, 4);
  // Released once the insert's answer (rows, then seals) reaches the batcher.
  await eventually(async () => (batcher.saturated ? undefined : true));
  t.equal(batcher.saturated, false, 'written: the bytes are released');
});

t.test('close writes everything queued while the store answers, and reports nothing unwritten', async (t) => {
  const { batcher } = batcherFor(t, { maxRows: 1000, maxDelayMs: 60_000, maxQueued: 10_000 });
  const org = randomUUID();
  enqueue(batcher, org, 7);
  t.equal(await batcher.close(5000), 0);
  t.equal(await store.count(org), 7);
});

t.test('close spools what the store does not take by the deadline, and reports nothing unwritten', async (t) => {
  const dir = spoolDir(t);
  const { batcher } = batcherFor(t, { maxRows: 1000, maxDelayMs: 60_000, maxQueued: 10_000, spool: AuditSpool.open(dir, 1 << 20) });
  const org = randomUUID();
  audit.down();
  enqueue(batcher, org, 7);
  const started = performance.now();
  t.equal(await batcher.close(300), 0);
  t.ok(performance.now() - started < 3000, 'the deadline bounded the wait');
  const { rows } = await spooled(t, dir);
  t.equal(rows, 7, 'every record is in the spool');
});

t.test('a replay whose insert outlasts close() stops there: the spool, let go, is the next start\'s', async (t) => {
  const dir = spoolDir(t);
  const org = randomUUID();
  const before = AuditSpool.open(dir, 1 << 20);
  for (let i = 0; i < 2; i++) await before.write([store.encode(auditRecord(org))], randomUUID());
  before.close();
  // The replay of the first batch takes 3 s: past close()'s 2 s wait for an insert in flight.
  audit.delayNextInsert(3000);
  const attempts = audit.attempts.length;
  const { batcher, errors } = batcherFor(t, { maxRows: 1000, maxDelayMs: 60_000, maxQueued: 100, spool: AuditSpool.open(dir, 1 << 20) });
  await eventually(async () => (audit.attempts.length > attempts ? true : undefined), 2000);
  t.equal(await batcher.close(0), 0);
  await sleep(1800); // the slow insert has landed by now
  t.equal(audit.attempts.length, attempts + 1, 'the second batch was not replayed after close()');
  t.equal(readdirSync(dir).filter((name) => parseSpoolFileName(name) !== null).length, 2, 'both files left for the next start (the first one\'s token makes its second copy a no-op)');
  t.strictSame(errors, []);
});

t.test('an insert that fails after close() took its batch over touches nothing: one spooled copy of each batch, no spool error', async (t) => {
  const dir = spoolDir(t);
  const { batcher, errors } = batcherFor(t, { maxRows: 5, maxDelayMs: 60_000, maxQueued: 10_000, spool: AuditSpool.open(dir, 1 << 20) });
  const org = randomUUID();
  // Past close()'s 2 s wait for an insert in flight: close spools this batch and
  // the next, then the insert fails. Before, the work loop spooled the first a
  // second time and settled it again, taking whichever batch was then first.
  audit.failNextInsertAfter(2600);
  enqueue(batcher, org, 5);
  await eventually(async () => (audit.attempts.length > 0 ? true : undefined), 2000);
  audit.down();
  enqueue(batcher, org, 5);
  t.equal(await batcher.close(0), 0, 'close spooled both batches');
  await sleep(1200); // the insert has failed by now
  const { rows, batches } = await spooled(t, dir);
  t.equal(batches, 2, 'two batches in the spool, each once');
  t.equal(rows, 10);
  t.notOk(errors.includes('spool'), 'no spool write after close');
  t.equal(batcher.pending, 0, 'nothing counted as held twice');
});

t.test('close reports the records neither the store nor the spool took', async (t) => {
  const dir = spoolDir(t);
  const { batcher } = batcherFor(t, { maxRows: 1000, maxDelayMs: 60_000, maxQueued: 10_000, spool: AuditSpool.open(dir, 1 << 20) });
  audit.down();
  rmSync(dir, { recursive: true });
  enqueue(batcher, randomUUID(), 7);
  t.equal(await batcher.close(300), 7);
});

t.test('a record queued after close() is reported lost, not put in a batch nothing will write', async (t) => {
  const { batcher, errors } = batcherFor(t, { maxRows: 5, maxDelayMs: 60_000, maxQueued: 100 });
  const org = randomUUID();
  await batcher.close(1000);
  batcher.enqueue(auditRecord(org));
  t.same(errors, ['closed'], 'reported');
  t.equal(batcher.pending, 0, 'not held');
  t.equal(batcher.stats.queued, 0, 'not counted as queued');
});
