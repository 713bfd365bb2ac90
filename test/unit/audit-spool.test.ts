// The audit spool's rules, on a fresh directory per test; where a rule involves
// replay, through the batcher into the real ClickHouse store over the HTTP
// stand-in, which goes down and comes back on demand (test/support/audit-store-on-demand.ts).
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { AuditBatcher } from '../../shared/audit/audit-batcher.js';
import { spoolFileName } from '../../shared/audit/audit-codec.js';
import { AuditSpool, UNREADABLE_DIR } from '../../shared/audit/audit-spool.js';
import { auditRecord } from '../support/audit-records.js';
import { openAuditStoreOnDemand } from '../support/audit-store-on-demand.js';
import { eventually } from '../support/eventually.js';
import { fillDisk, mountSmallDisk } from '../support/small-disk.js';

const audit = await openAuditStoreOnDemand();
t.teardown(() => audit.close());
const { store } = audit;

// A small disk to fill (test/support/small-disk.ts).
const { dir: mountPoint, skip: noSmallDisk } = mountSmallDisk(t, 'spool-full');

function spoolDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-spool-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function openSpool(t: Test, dir: string, maxBytes = 1 << 20): AuditSpool {
  const spool = AuditSpool.open(dir, maxBytes);
  t.teardown(() => spool.close());
  return spool;
}

/** A batcher replaying the spool in `dir`, with the stages of its errors collected. */
function replaying(t: Test, dir: string): { spool: AuditSpool; batcher: AuditBatcher; stages: string[] } {
  const stages: string[] = [];
  const spool = openSpool(t, dir);
  const batcher = new AuditBatcher(store, {
    maxRows: 100, maxDelayMs: 60_000, maxQueued: 1000, spool,
    onError: (_err, _rows, stage) => stages.push(stage),
  });
  t.teardown(() => batcher.close(0));
  return { spool, batcher, stages };
}

function lines(org: string, n: number): string[] {
  return Array.from({ length: n }, () => store.encode(auditRecord(org)));
}

t.test('a spooled batch reads back as the lines written, under its token', async (t) => {
  const spool = openSpool(t, spoolDir(t));
  const written = lines(randomUUID(), 3);
  const token = randomUUID();
  await spool.write(written, token);
  t.equal(spool.batches.length, 1);
  t.equal(spool.batches[0]?.token, token);
  t.equal(await spool.read(spool.batches[0]!), written.join(''));
  t.equal(spool.bytes, spool.batches[0]?.bytes, 'bytes counts the file');
});

t.test('spooled batches survive a restart: a new spool on the directory finds them oldest first and a batcher replays them', async (t) => {
  const dir = spoolDir(t);
  const org = randomUUID();
  const first = openSpool(t, dir);
  const tokens = [randomUUID(), randomUUID()];
  await first.write(lines(org, 2), tokens[0]!);
  await first.write(lines(org, 3), tokens[1]!);
  const bytes = first.bytes;
  first.close();

  const second = openSpool(t, dir);
  t.strictSame(second.batches.map((b) => b.token), tokens, 'both batches, in the order written');
  t.equal(second.bytes, bytes);
  const later = randomUUID();
  await second.write(lines(org, 1), later);
  t.equal(readdirSync(dir).filter((name) => name.endsWith('.rows.zst')).sort().at(-1), second.batches.at(-1)?.file,
    'a batch written after the restart sorts after the ones found');

  const batcher = new AuditBatcher(store, { maxRows: 100, maxDelayMs: 60_000, maxQueued: 1000, spool: second });
  t.teardown(() => batcher.close(0));
  await audit.rowsLanded(org, 6);
  await eventually(async () => (batcher.spooledBatches === 0 ? true : undefined));
  t.equal(batcher.stats.replayed, 6, 'replayed without a record being enqueued');
  t.strictSame(readdirSync(dir).filter((name) => name.endsWith('.rows.zst')), [], 'the replayed files are deleted');
});

t.test('a half-written file (.tmp) is deleted at open; files of other names are left alone', async (t) => {
  const dir = spoolDir(t);
  const halfWritten = `${spoolFileName(0, randomUUID())}.tmp`;
  writeFileSync(join(dir, halfWritten), 'partial');
  writeFileSync(join(dir, 'notes.txt'), 'not a batch');
  const spool = openSpool(t, dir);
  t.equal(existsSync(join(dir, halfWritten)), false, 'the unacknowledged write is gone');
  t.equal(existsSync(join(dir, 'notes.txt')), true);
  t.strictSame(spool.batches, [], 'neither is a batch');
});

t.test('a corrupt spool file is reported, moved aside for an operator (kept, never deleted), and the batches behind it are replayed', async (t) => {
  const dir = spoolDir(t);
  const org = randomUUID();
  const corrupt = spoolFileName(0, randomUUID());
  writeFileSync(join(dir, corrupt), 'not zstd');
  const first = AuditSpool.open(dir, 1 << 20);
  await first.write(lines(org, 3), randomUUID()); // behind the corrupt one
  first.close();
  const { spool, batcher, stages } = replaying(t, dir);
  await audit.rowsLanded(org, 3);
  await eventually(async () => (batcher.spooledBatches === 0 ? true : undefined));
  t.strictSame(stages, ['unreadable'], 'reported once');
  t.equal(readFileSync(join(dir, UNREADABLE_DIR, corrupt), 'utf8'), 'not zstd', 'the file is kept, as it was, for an operator');
  t.equal(existsSync(join(dir, corrupt)), false, 'out of the spool');
  t.equal(spool.bytes, 0, 'its bytes no longer count against SPOOL_MAX_BYTES');
  const reopened = AuditSpool.open(join(dir, UNREADABLE_DIR), 1 << 20);
  t.teardown(() => reopened.close());
  t.equal(reopened.batches.length, 1, 'an operator can replay it from there once mended (a spool of its own)');
});

t.test('a read that fails for another reason than damage (here EISDIR) is retried, not set aside; a file gone is set aside', async (t) => {
  const dir = spoolDir(t);
  const odd = spoolFileName(0, randomUUID());
  mkdirSync(join(dir, odd)); // a directory where a batch's file should be: reading it fails, decoding never starts
  const { spool, batcher, stages } = replaying(t, dir);
  await eventually(async () => (stages.filter((s) => s === 'replay').length >= 2 ? true : undefined));
  t.notOk(stages.includes('unreadable'), 'not taken for a damaged file');
  t.equal(existsSync(join(dir, UNREADABLE_DIR, odd)), false, 'not set aside');
  t.equal(batcher.spooledBatches, 1, 'still waiting in the spool');
  rmSync(join(dir, odd), { recursive: true });
  await eventually(async () => (batcher.spooledBatches === 0 ? true : undefined), 10_000);
  t.ok(stages.includes('unreadable'), 'gone: reported, and the spool goes on');
});

t.test('a spool write that fails part way leaves no temporary file to hold the disk', { skip: noSmallDisk }, async (t) => {
  const dir = join(mountPoint, 'spool');
  const spool = openSpool(t, dir);
  // The disk fills up: a filler takes all but a few blocks.
  fillDisk(join(mountPoint, 'filler'));
  // Random rows do not compress: far more than the space left.
  const big = Array.from({ length: 20 }, () => `${randomBytes(4096).toString('hex')}\n`);
  await t.rejects(spool.write(big, randomUUID()), { code: 'ENOSPC' });
  t.strictSame(readdirSync(dir).filter((name) => name.endsWith('.tmp')), [], 'no part left behind');
  t.equal(spool.batches.length, 0);
  unlinkSync(join(mountPoint, 'filler'));
  await spool.write(lines(randomUUID(), 1), randomUUID());
  t.equal(spool.batches.length, 1, 'space again: the next write lands');
});

t.test('a fresh batch the spool cannot take (a full disk) goes to the store, and the replay behind it goes on', { skip: noSmallDisk }, async (t) => {
  const spool = openSpool(t, join(mountPoint, 'spool-behind'));
  const stages: string[] = [];
  const batcher = new AuditBatcher(store, { maxRows: 2, maxDelayMs: 60_000, maxQueued: 1000, spool, onError: (_err, _rows, stage) => stages.push(stage) });
  t.teardown(async () => {
    audit.up();
    await batcher.close(0);
  });
  const org = randomUUID();
  audit.down();
  for (let i = 0; i < 2; i++) batcher.enqueue(auditRecord(org));
  await eventually(async () => (batcher.spooledBatches === 1 && batcher.pending === 0 ? true : undefined));
  fillDisk(join(mountPoint, 'filler-behind'));
  t.teardown(() => rmSync(join(mountPoint, 'filler-behind'), { force: true }));
  // Back while the retry waits; a fresh batch of rows that do not compress comes first.
  audit.up();
  for (let i = 0; i < 2; i++) batcher.enqueue(auditRecord(org, { reasoning: randomBytes(8192).toString('hex') }));
  await audit.rowsLanded(org, 4);
  t.ok(stages.includes('spool'), 'the spool refused the fresh batch');
  await eventually(async () => (batcher.spooledBatches === 0 && batcher.pending === 0 ? true : undefined));
  t.equal(batcher.pending, 0, 'nothing left in memory');
});

t.test('a full spool refuses a write; the batcher is saturated until the replay frees it', async (t) => {
  const org = randomUUID();
  const spool = openSpool(t, spoolDir(t), 1);
  const stages: string[] = [];
  const batcher = new AuditBatcher(store, {
    maxRows: 2, maxDelayMs: 60_000, maxQueued: 1000, spool,
    onError: (_err, _rows, stage) => stages.push(stage),
  });
  t.teardown(async () => {
    audit.up();
    await batcher.close(0);
  });
  audit.down();
  for (let i = 0; i < 2; i++) batcher.enqueue(auditRecord(org));
  await eventually(async () => (batcher.spooledBatches === 1 ? true : undefined));
  t.equal(spool.full, true, 'one batch reaches maxBytes');
  t.equal(batcher.saturated, true, 'a full spool saturates the batcher');
  await t.rejects(spool.write(lines(org, 1), randomUUID()), /full/, 'the spool refuses another batch');
  for (let i = 0; i < 2; i++) batcher.enqueue(auditRecord(org));
  // The next batch waits behind the spooled one (its seals would land first),
  // in memory since the spool is full, while the replay is tried.
  await eventually(async () => (stages.includes('replay') ? true : undefined));
  t.equal(batcher.pending, 2, 'the batch the full spool cannot take is held in memory');
  t.equal(batcher.spooledBatches, 1);
  t.notOk(stages.includes('spool'), 'not offered to the full spool (no error)');
  audit.up();
  await audit.rowsLanded(org, 4);
  await eventually(async () => (batcher.spooledBatches === 0 ? true : undefined));
  t.equal(spool.full, false);
  t.equal(batcher.saturated, false);
});

t.test('a spooled batch the store keeps refusing holds fresh batches behind it only until a newer batch lands', async (t) => {
  const dir = spoolDir(t);
  const before = AuditSpool.open(dir, 1 << 20);
  await before.write(['not a row the store can parse\n'], randomUUID());
  before.close();
  const spool = openSpool(t, dir);
  const stages: string[] = [];
  const batcher = new AuditBatcher(store, { maxRows: 2, maxDelayMs: 60_000, maxQueued: 1000, spool, onError: (_err, _rows, stage) => stages.push(stage) });
  t.teardown(() => batcher.close(0));
  const org = randomUUID();
  for (let i = 0; i < 2; i++) batcher.enqueue(auditRecord(org));
  await audit.rowsLanded(org, 2);
  const refusals = stages.filter((s) => s === 'replay').length;
  t.ok(refusals >= 3, `the fresh batch (spooled behind it) landed once the spooled one was refused three times (${refusals} refusals)`);
  // Its rows are read back before the replay removes its file.
  await eventually(async () => (batcher.spooledBatches === 1 ? true : undefined));
  t.equal(batcher.spooledBatches, 1, 'the refused batch stays in the spool, retried');
  for (let i = 0; i < 2; i++) batcher.enqueue(auditRecord(org));
  await audit.rowsLanded(org, 4);
  t.equal(batcher.spooledBatches, 1, 'later fresh batches go first too, without waiting for refusals');
});

t.test('an earlier version\'s spool.lock naming a live process refuses the start; a dead one\'s is removed', async (t) => {
  const dir = spoolDir(t);
  const live = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  t.teardown(() => live.kill('SIGKILL'));
  writeFileSync(join(dir, 'spool.lock'), String(live.pid));
  t.throws(() => AuditSpool.open(dir, 1 << 20), new RegExp(`in use by process ${live.pid} \\(an earlier version's spool.lock\\)`));
  live.kill('SIGKILL');
  await new Promise((resolve) => live.once('exit', resolve));
  openSpool(t, dir);
  t.notOk(existsSync(join(dir, 'spool.lock')), 'the dead process\'s lock is gone');
});

t.test('a spool held by a live process is refused, by this one too (two containers may both be pid 1); a killed holder\'s lock is let go', async (t) => {
  const dir = spoolDir(t);
  const mine = AuditSpool.open(dir, 1 << 20);
  t.throws(() => AuditSpool.open(dir, 1 << 20), new RegExp(`in use by process ${process.pid} on host`), 'a second open in the same process (the same pid) is refused');
  mine.close();
  // Another process holds it, then is killed: no close, no unlink.
  const holder = spawn(process.execPath, [...process.execArgv, '--input-type=module', '-e',
    `const { AuditSpool } = await import(${JSON.stringify(new URL('../../shared/audit/audit-spool.ts', import.meta.url).href)});
     AuditSpool.open(${JSON.stringify(dir)}, 1 << 20); console.log('held'); setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => holder.kill('SIGKILL'));
  await new Promise<void>((resolve, reject) => {
    holder.stdout!.on('data', (chunk: Buffer) => { if (chunk.toString().includes('held')) resolve(); });
    holder.once('exit', (code) => reject(new Error(`the holder exited (${code})`)));
  });
  t.throws(() => AuditSpool.open(dir, 1 << 20), new RegExp(`in use by process ${holder.pid} on host`), 'a live process\'s spool is refused');
  holder.kill('SIGKILL');
  await new Promise((resolve) => holder.once('exit', resolve));
  const after = openSpool(t, dir);
  t.equal(after.batches.length, 0, 'a killed holder\'s lock is taken over');
});
