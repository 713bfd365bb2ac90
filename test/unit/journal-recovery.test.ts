// Start-up recovery of the audit journal (shared/audit/journal-recovery.ts) on
// real directories: a killed process's segments go to the spool once, whatever
// point the start that recovers them is killed at.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { encodeAuditRow, countEncodedRows } from '../../shared/audit/audit-codec.js';
import { AuditJournal } from '../../shared/audit/audit-journal.js';
import { AuditSpool } from '../../shared/audit/audit-spool.js';
import { recoverJournal } from '../../shared/audit/journal-recovery.js';
import { Sealer, signingKeyFromPem } from '../../shared/audit/seal.js';
import { createLogger } from '../../shared/log.js';
import { auditRecord } from '../support/audit-records.js';

const turn = () => new Promise((r) => setImmediate(r));
const key = signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());

t.test('an unsealed segment spooled by a start killed before it forgot the segment is not spooled again by the next', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tcg-recovery-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const spoolDir = join(root, 'spool');
  const journalDir = join(spoolDir, 'journal');
  // A process journals three records of an open batch and is killed: one unsealed segment.
  const writer = AuditJournal.open(journalDir).journal;
  const org = randomUUID();
  const batchId = randomUUID();
  for (let i = 0; i < 3; i++) writer.append(encodeAuditRow(auditRecord(org), batchId));
  await turn();
  const [segment] = readdirSync(journalDir);
  copyFileSync(join(journalDir, segment!), join(root, 'segment-as-left'));

  // The next start spools it, and is killed before the segment is forgotten: the segment is back as it was.
  const log = createLogger('error', () => {});
  let spool = AuditSpool.open(spoolDir, 1 << 20);
  (await recoverJournal(spool, journalDir, new Sealer(key), log)).close();
  spool.close();
  t.equal(spool.batches.length, 1, 'spooled');
  const firstToken = spool.batches[0]!.token;
  copyFileSync(join(root, 'segment-as-left'), join(journalDir, segment!));

  // The start after that finds the batch in the spool and the segment again.
  spool = AuditSpool.open(spoolDir, 1 << 20);
  t.teardown(() => spool.close());
  (await recoverJournal(spool, journalDir, new Sealer(key), log)).close();
  t.strictSame(spool.batches.map((b) => b.token), [firstToken], 'one spooled batch, under the token the segment gets at every start');
  t.equal(countEncodedRows(await spool.read(spool.batches[0]!)), 3, 'its three records');
  t.notOk(readdirSync(journalDir).includes(segment!), 'the segment is gone');
});

t.test('a killed process\'s records are spooled at start even when the spool is already full', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tcg-recovery-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const spoolDir = join(root, 'spool');
  const journalDir = join(spoolDir, 'journal');
  const org = randomUUID();
  // A long outage filled the spool (one batch over a 1-byte bound), then the process was killed mid-batch.
  let spool = AuditSpool.open(spoolDir, 1);
  await spool.write([encodeAuditRow(auditRecord(org), randomUUID())], randomUUID());
  spool.close();
  const writer = AuditJournal.open(journalDir).journal;
  const batchId = randomUUID();
  for (let i = 0; i < 2; i++) writer.append(encodeAuditRow(auditRecord(org), batchId));
  await turn();
  const [segment] = readdirSync(journalDir);

  spool = AuditSpool.open(spoolDir, 1);
  t.teardown(() => spool.close());
  t.ok(spool.full, 'the spool is full before the start recovers the journal');
  (await recoverJournal(spool, journalDir, new Sealer(key), createLogger('error', () => {}))).close();
  t.equal(spool.batches.length, 2, 'the journal\'s batch is spooled behind the one waiting, not kept for a later start');
  t.equal(countEncodedRows(await spool.read(spool.batches[1]!)), 2, 'its two records');
  t.notOk(readdirSync(journalDir).includes(segment!), 'the segment is forgotten');
  await t.rejects(spool.write([encodeAuditRow(auditRecord(org), randomUUID())], randomUUID()), /full/, 'new batches still meet the bound');
});
