// The audit journal (shared/audit/audit-journal.ts) on a real directory: a line
// is in the file when append returns; seal closes a segment with
// its token; a restart recovers sealed and unsealed segments; a torn last line
// is dropped.
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { AuditJournal } from '../../shared/audit/audit-journal.js';

function dir(t: Test): string {
  const d = mkdtempSync(join(tmpdir(), 'tcg-journal-'));
  t.teardown(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

const turn = () => new Promise((r) => setImmediate(r));

t.test('a line is in the file when append returns, before anything else runs', async (t) => {
  // The proxy appends a call's record inside the cork that sends the call's last
  // bytes: a line written later in the turn could follow the answer out.
  const d = dir(t);
  const { journal, recovered } = AuditJournal.open(d);
  t.strictSame(recovered, []);
  const [segment] = readdirSync(d);
  for (let i = 0; i < 5; i++) {
    journal.append(`row-${i}\tx\n`);
    t.match(readFileSync(join(d, segment!), 'utf8'), new RegExp(`row-${i}\\tx\\n$`), `row ${i} is on disk at once`);
  }
  t.strictSame(journal.stats, { writes: 5, lines: 5 }, 'one write a line');
  journal.close();
});

t.test('seal writes the token at once and starts a new segment; forget deletes the sealed one', async (t) => {
  const d = dir(t);
  const { journal } = AuditJournal.open(d);
  journal.append('a\n');
  const sealed = journal.seal('token-1');
  t.equal(readFileSync(join(d, sealed), 'utf8'), 'a\n#sealed token-1\n', 'rows and the seal, written synchronously');
  journal.append('b\n');
  await turn();
  t.equal(readdirSync(d).length, 2);
  journal.forget(sealed);
  t.strictSame(readdirSync(d).length, 1, 'the written batch is gone from the journal');
  journal.close();
});

t.test('a restart recovers sealed segments with their token and unsealed ones with a fresh token, oldest first', async (t) => {
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
  t.match(recovered[1]!.token, /^[0-9a-f-]{36}$/, 'a fresh token for a batch whose insert never began');
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
