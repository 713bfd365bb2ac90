// The audit journal (shared/audit/audit-journal.ts) on a real directory: a
// turn's lines are written in one write, and what waits for them runs only
// after it; seal closes a segment with
// its token; a restart recovers sealed and unsealed segments; a torn last line
// is dropped.
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { AuditJournal } from '../../shared/audit/audit-journal.js';
import { fillDisk, mountSmallDisk } from '../support/small-disk.js';

function dir(t: Test): string {
  const d = mkdtempSync(join(tmpdir(), 'tcg-journal-'));
  t.teardown(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

const turn = () => new Promise((r) => setImmediate(r));

t.test("a turn's lines are written in one write, and a waiter runs only once its line is on disk", async (t) => {
  // The proxy queues a call's record, then hands the call's last send to
  // afterWrite: the answer must not leave before its line is in the file.
  const d = dir(t);
  const { journal, recovered } = AuditJournal.open(d);
  t.strictSame(recovered, []);
  const [segment] = readdirSync(d);
  const onDisk = () => readFileSync(join(d, segment!), 'utf8');
  const seen: string[] = [];
  for (let i = 0; i < 5; i++) {
    journal.append(`row-${i}\tx\n`);
    journal.afterWrite({ journaled: () => seen.push(onDisk().includes(`row-${i}\tx\n`) ? `row-${i} on disk` : `row-${i} missing`) });
  }
  t.equal(onDisk(), '', 'nothing written yet within the turn');
  t.strictSame(seen, [], 'no waiter ran before the write');
  await turn();
  t.strictSame(seen, [0, 1, 2, 3, 4].map((i) => `row-${i} on disk`), 'each waiter ran after its line was written');
  t.strictSame(journal.stats, { writes: 1, lines: 5, failures: 0 }, 'one write for the turn');
  let ranAtOnce = false;
  journal.afterWrite({ journaled: () => (ranAtOnce = true) });
  t.ok(ranAtOnce, 'with nothing gathered, a waiter runs at once');
  journal.close();
});

t.test('seal and close write what is gathered first; close runs the waiters', async (t) => {
  const d = dir(t);
  const { journal } = AuditJournal.open(d);
  journal.append('a\n');
  journal.append('b\n');
  let ran = false;
  journal.afterWrite({ journaled: () => (ran = true) });
  const sealed = journal.seal('token-0');
  t.equal(readFileSync(join(d, sealed), 'utf8'), 'a\nb\n#sealed token-0\n', 'gathered lines before the seal marker, in one write');
  journal.append('c\n');
  journal.afterWrite({ journaled: () => (ran = true) });
  journal.close();
  t.ok(ran, 'close wrote the line and ran its waiter');
  const [open] = readdirSync(d).filter((name) => name !== sealed);
  t.equal(readFileSync(join(d, open!), 'utf8'), 'c\n');
});

t.test('a failed write is reported, not thrown, and the waiters still run', async (t) => {
  const d = dir(t);
  const { journal } = AuditJournal.open(d);
  const errors: unknown[] = [];
  journal.onError = (err) => errors.push(err);
  // The next segment is /dev/full: every write to it fails with ENOSPC.
  symlinkSync('/dev/full', join(d, '000000000001.journal'));
  journal.seal('token-x');
  journal.append('b\n');
  let ran = false;
  journal.afterWrite({ journaled: () => (ran = true) });
  await turn();
  t.ok(ran, 'the waiter ran: an answer is not held back by a broken disk');
  t.equal(errors.length, 1, 'the failure was reported');
  t.match(errors[0], { code: 'ENOSPC' });
  t.match(journal.stats, { writes: 1, failures: 1 }, 'the seal written, the line failed');
  journal.close();
});

t.test('a waiter that throws is reported and the others still run; after close, seal does nothing and waiters run at once', async (t) => {
  const d = dir(t);
  const { journal } = AuditJournal.open(d);
  const errors: unknown[] = [];
  journal.onError = (err) => errors.push(err);
  const ran: number[] = [];
  journal.append('a\n');
  journal.afterWrite({ journaled: () => ran.push(1) });
  journal.afterWrite({ journaled: () => { throw new Error('a send that throws'); } });
  journal.afterWrite({ journaled: () => ran.push(3) });
  await turn();
  t.strictSame(ran, [1, 3], 'the waiters around the one that threw ran');
  t.match(errors, [{ message: 'a send that throws' }], 'and the throw was reported');
  journal.close();
  t.equal(journal.seal('late'), '', 'a seal after close writes and opens nothing');
  journal.append('late\n');
  let late = false;
  journal.afterWrite({ journaled: () => (late = true) });
  t.ok(late, 'a waiter after close runs at once: nothing more will be written');
  journal.forget(''); // what the batcher does with that seal's segment: nothing
  t.equal(readdirSync(d).length, 1, 'the one segment, with its line, stays for the next start');
});

t.test('a restart recovers sealed segments with their token and unsealed ones with a token of their lines, oldest first', async (t) => {
  const d = dir(t);
  const first = AuditJournal.open(d).journal;
  first.append('one\n');
  first.seal('token-a');
  first.append('two\n');
  first.append('three\n');
  await turn(); // written, then "killed": no close
  const { journal, recovered } = AuditJournal.open(d);
  t.equal(recovered.length, 2);
  t.match(recovered[0], { lines: ['one\n'], token: 'token-a', sealed: true });
  t.match(recovered[1], { lines: ['two\n', 'three\n'], sealed: false });
  t.match(recovered[1]!.token, /^[0-9a-f-]{36}$/, 'a token (of its lines) for a batch whose insert never began');
  for (const batch of recovered) journal.forget(batch.segment);
  journal.append('four\n');
  await turn();
  t.equal(readdirSync(d).length, 1, 'only the new segment is left');
  t.ok(readdirSync(d)[0]! > recovered[1]!.segment, 'numbered after the recovered ones');
  journal.close();
});

t.test('a torn last line (a kill during the write) is dropped; an empty segment is removed', async (t) => {
  const d = dir(t);
  const first = AuditJournal.open(d).journal;
  first.append('whole\n');
  await turn();
  const [segment] = readdirSync(d);
  appendFileSync(join(d, segment!), 'torn-with-no-newl');
  first.close();
  const empty = AuditJournal.open(d);
  empty.journal.close(); // leaves an empty segment behind
  const { journal, recovered } = AuditJournal.open(d);
  t.equal(recovered.length, 1);
  t.strictSame(recovered[0]!.lines, ['whole\n']);
  t.equal(readdirSync(d).length, 2, 'the recovered segment and the new one: the empty one was removed');
  journal.close();
});

t.test('a cut segment is unsealed until finish appends its seal lines and token; a restart in between reads it as a batch whose insert never began', async (t) => {
  const d = dir(t);
  const { journal } = AuditJournal.open(d);
  journal.append('row-1\n');
  journal.append('row-2\n');
  const cut = journal.cut();
  journal.append('next\n');
  journal.flush();
  t.equal(readFileSync(join(d, cut), 'utf8'), 'row-1\nrow-2\n', 'the rows written, no seal yet');
  const before = AuditJournal.open(d);
  before.journal.close();
  const unsealed = before.recovered.find((b) => b.segment === cut)!;
  t.match(unsealed, { lines: ['row-1\n', 'row-2\n'], sealed: false }, 'killed before finish: unsealed, a fresh token');
  t.not(unsealed.token, 'token-1');
  journal.finish(cut, ['#seal-line\n'], 'token-1');
  t.equal(readFileSync(join(d, cut), 'utf8'), 'row-1\nrow-2\n#seal-line\n#sealed token-1\n', 'the seal lines, then the marker');
  const after = AuditJournal.open(d);
  after.journal.close();
  t.match(after.recovered.find((b) => b.segment === cut), { lines: ['row-1\n', 'row-2\n', '#seal-line\n'], token: 'token-1', sealed: true });
  t.match(after.recovered.map((b) => b.lines), [['row-1\n', 'row-2\n', '#seal-line\n'], ['next\n']], 'the next segment holds the later line');
  journal.close();
  journal.finish(cut, ['#late\n'], 'token-2');
  t.notMatch(readFileSync(join(d, cut), 'utf8'), /late/, 'nothing is appended after close');
});

t.test('an unsealed segment found at start is sealed with its fresh token (a torn tail cut off first), so a second start reads the same token', async (t) => {
  const d = dir(t);
  const first = AuditJournal.open(d).journal;
  first.append('row-1\n');
  first.append('row-2\n');
  await turn();
  const [segment] = readdirSync(d);
  appendFileSync(join(d, segment!), 'torn-with-no-newl'); // then "killed"
  const start = AuditJournal.open(d);
  const batch = start.recovered[0]!;
  t.match(batch, { lines: ['row-1\n', 'row-2\n'], sealed: false, torn: true });
  start.journal.sealRecovered(batch, ['#seal-line\n']);
  t.equal(readFileSync(join(d, segment!), 'utf8'), `row-1\nrow-2\n#seal-line\n#sealed ${batch.token}\n`, 'the torn tail cut, then the seal lines and the token');
  start.journal.close(); // "killed" again before the batch was forgotten
  const again = AuditJournal.open(d);
  t.match(again.recovered.find((b) => b.segment === segment), { lines: ['row-1\n', 'row-2\n', '#seal-line\n'], token: batch.token, sealed: true, torn: false }, 'the same token: a second spool write of it is deduplicated');
  again.journal.sealRecovered(again.recovered[0]!, ['#other\n']);
  t.notMatch(readFileSync(join(d, segment!), 'utf8'), /other/, 'a sealed segment is left as it is');
  again.journal.close();
});

// A small disk to fill (test/support/small-disk.ts).
const { dir: mountPoint, skip: noSmallDisk } = mountSmallDisk(t, 'journal-full');

t.test('a write that fails part way on a full disk is cut back: lines written once space is freed do not follow a fragment', { skip: noSmallDisk }, async (t) => {
  const d = join(mountPoint, 'journal');
  const errors: unknown[] = [];
  const { journal } = AuditJournal.open(d);
  journal.onError = (err) => errors.push(err);
  const whole = Array.from({ length: 3 }, (_, i) => `${'w'.repeat(100)}${i}\n`);
  for (const line of whole) journal.append(line);
  await turn();
  // The disk fills up: a filler takes every free block.
  fillDisk(join(mountPoint, 'filler'));
  journal.append(`${'x'.repeat(16_384)}\n`); // part of it fits in the segment's last block
  await turn();
  t.equal(errors.length, 1, 'the failed write is reported');
  unlinkSync(join(mountPoint, 'filler')); // space again
  journal.append('after\n');
  await turn();
  journal.close();
  const { recovered, journal: reopened } = AuditJournal.open(d);
  reopened.close();
  t.strictSame(recovered[0]?.lines, [...whole, 'after\n'], 'the lines written whole, and nothing of the one that failed');
});
