// A batch's rows as UTF-8 bytes in reused chunks (shared/audit/row-bytes.ts):
// what goes in comes out byte for byte, across chunk boundaries, whatever the
// characters, and a released batch's chunks serve the next batch.
import fc from 'fast-check';
import t from 'tap';
import { RowBytes } from '../../shared/audit/row-bytes.js';

t.test('rows come out as their UTF-8 bytes, in order, across chunks, whatever their characters and sizes', async (t) => {
  fc.assert(fc.property(fc.array(fc.oneof(fc.string({ unit: 'binary', maxLength: 200 }), fc.string({ unit: 'grapheme', maxLength: 40 }).map((s) => s.repeat(2000))), { maxLength: 60 }), (texts) => {
    const rows = new RowBytes();
    const lines = texts.map((s) => `${s}\n`);
    for (const line of lines) rows.push(line);
    const bytes = Buffer.concat(rows.parts());
    const ok = rows.count === lines.length && bytes.equals(Buffer.from(lines.join(''), 'utf8')) && rows.toString() === lines.join('');
    rows.release();
    return ok;
  }), { numRuns: 60 });
  const big = 'é'.repeat(300_000) + '\n'; // longer than a chunk: a chunk of its own
  const rows = new RowBytes();
  rows.push('a\n');
  rows.push(big);
  rows.push('b\n');
  t.equal(rows.toString(), `a\n${big}b\n`);
  t.equal(rows.count, 3);
});

t.test('rows of a full output (~64 KiB of ASCII) share a chunk: their exact size decides, not the worst case of 3 bytes a character', async (t) => {
  const rows = new RowBytes();
  for (let i = 0; i < 4; i++) rows.push('o'.repeat(60_000) + '\n');
  t.equal(rows.parts().length, 1, 'four 60 KB rows in one 256 KiB chunk');
  rows.push('o'.repeat(60_000) + '\n');
  t.equal(rows.parts().length, 2, 'the fifth opens the next');
  rows.release();
});

t.test("a released batch's chunks serve the next batch; nothing is read of them after", async (t) => {
  const first = new RowBytes();
  first.push('x'.repeat(1000) + '\n');
  const chunk = first.parts()[0]!.buffer;
  first.release();
  t.throws(() => first.parts(), /read after release/, 'released: its bytes cannot be read again');
  first.release(); // twice: nothing more given back
  const second = new RowBytes();
  second.push('y\n');
  t.equal(second.parts()[0]!.buffer, chunk, 'the same memory, reused');
  t.equal(second.toString(), 'y\n');
  second.release();
});
