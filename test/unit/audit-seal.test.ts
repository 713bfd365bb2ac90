// Seals (shared/audit/seal.ts): the RFC 6962 Merkle tree hash against the RFC's
// recursive definition, the fields a seal reads from an encoded row, a batch body
// split into rows and seal lines, and chained, signed seals.
import { createHash, generateKeyPairSync, randomUUID, verify } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import { countEncodedRows, encodeAuditRow } from '../../shared/audit/audit-codec.js';
import { entryHash } from '../../shared/audit/entry-json.js';
import {
  encodeSealLine,
  leafHash,
  unsealedRows,
  GENESIS_HASH,
  merkleRoot,
  sealBody,
  SealColumns,
  Sealer,
  SEAL_SLICE_HASHES,
  sealHeadsOf,
  SEAL_LINE_PREFIX,
  signingKeyFromPem,
  splitBatchBody,
} from '../../shared/audit/seal.js';
import { auditRecord } from '../support/audit-records.js';
import { sealsToPrint } from '../../admin/audit.js';
import type { Seal } from '../../shared/audit/seal.js';

const sha = (...parts: Buffer[]) => createHash('sha256').update(Buffer.concat(parts)).digest();

/** RFC 6962 §2.1, as written: MTH(D[n]) = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n])), k the largest power of two < n. */
function reference(leaves: Buffer[]): Buffer {
  if (leaves.length === 0) return sha();
  if (leaves.length === 1) return sha(Buffer.from([0]), leaves[0]!);
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return sha(Buffer.from([1]), reference(leaves.slice(0, k)), reference(leaves.slice(k)));
}

t.test('merkleRoot is RFC 6962\'s tree hash, for every size from 0 to 70 and random leaves', async (t) => {
  t.equal(merkleRoot([]), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'the empty tree: SHA-256 of nothing');
  const leaves = Array.from({ length: 70 }, (_, i) => createHash('sha256').update(`leaf ${i}`).digest('hex'));
  for (let n = 0; n <= 70; n++) {
    t.equal(merkleRoot(leaves.slice(0, n)), reference(leaves.slice(0, n).map((h) => Buffer.from(h, 'hex'))).toString('hex'), `${n} leaves`);
  }
  fc.assert(fc.property(fc.array(fc.uint8Array({ minLength: 32, maxLength: 32 }), { maxLength: 40 }), (raw) => {
    const hex = raw.map((b) => Buffer.from(b).toString('hex'));
    return merkleRoot(hex) === reference(raw.map((b) => Buffer.from(b))).toString('hex');
  }));
  t.not(merkleRoot([leaves[0]!, leaves[1]!]), merkleRoot([leaves[1]!, leaves[0]!]), 'order matters');
});

/** What a seal reads of a row line read back, as pushLine reads it; null when it is left unsealed. */
function readBack(line: string) {
  const columns = new SealColumns();
  return columns.pushLine(line) ? columns.row(0) : null;
}

t.test("a row line gives the sealer its id, timestamp, org, batch id and its entry hash's Merkle leaf; an older line gives nothing", async (t) => {
  const record = auditRecord(randomUUID(), { reasoning: 'tab\there\nnewline', output: 'x'.repeat(70_000) });
  const batch = randomUUID();
  const line = encodeAuditRow(record, batch);
  t.strictSame(readBack(line), {
    id: record.id,
    ms: Date.parse(record.timestamp),
    orgId: record.orgId,
    batchId: batch,
    // RFC 6962's leaf hash, SHA-256(0x00 ‖ the entry hash's bytes), as 32 latin1 characters.
    leaf: createHash('sha256').update(Buffer.concat([Buffer.from([0]), Buffer.from(entryHash(record), 'hex')])).digest('binary'),
  });
  t.equal(readBack(encodeAuditRow(record)), null, 'no batch id: unsealed');
  const fresh = (l: string, r: Parameters<SealColumns['pushFresh']>[1]) => {
    const columns = new SealColumns();
    columns.pushFresh(l, r, batch);
    return columns.row(0);
  };
  t.strictSame(fresh(line, record), readBack(line), 'the batcher\'s positional read agrees');
  t.strictSame(fresh(line, { ...record, timestampMs: Date.parse(record.timestamp) }), readBack(line), 'and so does the proxy\'s record, which has its instant as a number');
  fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 50 }), fc.string({ maxLength: 20 }), fc.option(fc.string({ maxLength: 30 }), { nil: null }), (reasoning, agentName, output) => {
    const r = auditRecord(randomUUID(), { reasoning, agentName, output });
    const l = encodeAuditRow(r, batch);
    const row = fresh(l, r);
    return JSON.stringify(row) === JSON.stringify(readBack(l)) && row.leaf === leafHash(entryHash(r));
  }));
  // A line as the version before seals wrote it: no batch_id column at all.
  t.equal(readBack(line.slice(0, line.lastIndexOf('\t')) + '\n'), null, 'an earlier version\'s line');
  t.equal(readBack('garbage\n'), null);
});

t.test("a batch's rows come out in (timestamp, id) order, as a general sort puts them", async (t) => {
  const byTimeThenId = (a: { ms: number; id: string }, b: { ms: number; id: string }) => a.ms - b.ms || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  const columnsOf = (entries: { ms: number; id: string }[]) => {
    const columns = new SealColumns();
    // A line as the encoder makes it, as far as the columns read it: the id first, the entry hash and batch id last.
    for (const e of entries) columns.pushFresh(`${e.id}\t${'0'.repeat(64)}\t${'b'.repeat(36)}\n`, { id: e.id, orgId: 'o', timestamp: '', timestampMs: e.ms }, 'b'.repeat(36));
    return columns;
  };
  const ordered = (entries: { ms: number; id: string }[]) => {
    const columns = columnsOf(entries);
    return columns.order(entries.map((_, i) => i)).map((i) => ({ ms: columns.msAt(i), id: columns.row(i).id }));
  };
  // Ids of one to 36 characters (shorter ones sort before their extensions, as text does).
  const entry = fc.record({ ms: fc.integer({ min: 0, max: 40 }), id: fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f', 'ab', randomUUID(), randomUUID()) });
  // Dense (the counting sort), spread thin (the general sort), with ties in both.
  for (const spread of [1, 1_000_000]) {
    fc.assert(fc.property(fc.array(entry, { maxLength: 300 }), (raw) => {
      const entries = raw.map((e, i) => ({ ms: e.ms * spread, id: `${e.id}${i % 3}`.slice(0, 36) }));
      const expected = [...entries].sort(byTimeThenId);
      return JSON.stringify(ordered(entries)) === JSON.stringify(expected);
    }));
  }
  const odd = [{ ms: 2.5, id: 'b' }, { ms: 1, id: 'a' }, { ms: 2.25, id: 'c' }];
  t.strictSame(ordered(odd).map((e) => e.id), ['a', 'c', 'b'], 'milliseconds that are not whole numbers take the general sort, losing none');
  const inOrder = [0, 1];
  t.equal(columnsOf([{ ms: 1, id: 'a' }, { ms: 2, id: 'a' }]).order(inOrder), inOrder, 'rows already in order are returned as they are');
});

const key = signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());

t.test("the batcher's columns seal a batch as its lines read back do, and are reused once cleared", async (t) => {
  const batch = randomUUID();
  const [orgA, orgB] = [randomUUID(), randomUUID()];
  const records = Array.from({ length: 2500 }, (_, i) => auditRecord(i % 7 === 0 ? orgB : orgA, { timestamp: new Date(Date.parse('2026-11-26T10:00:00.000Z') + ((i * 37) % 900)).toISOString() }));
  const lines = records.map((r) => encodeAuditRow(r, batch));
  const columns = new SealColumns();
  columns.pushFresh(encodeAuditRow(auditRecord(orgA), batch), auditRecord(orgA), batch);
  columns.clear();
  lines.forEach((line, i) => columns.pushFresh(line, records[i]!, batch));
  const now = new Date();
  const fromColumns = new Sealer(key).sealColumns(columns, now).seals;
  const fromLines = new Sealer(key).sealLines(lines, now).seals;
  const comparable = (s: Seal) => ({ orgId: s.orgId, batchId: s.batchId, count: s.count, firstAt: s.firstAt, lastAt: s.lastAt, root: s.root });
  t.strictSame(fromColumns.map(comparable), fromLines.map(comparable), 'the same seals, grown past the columns\' first size');
  for (const org of [orgA, orgB]) {
    const mine = records.filter((r) => r.orgId === org).sort((x, y) => (x.timestamp < y.timestamp ? -1 : x.timestamp > y.timestamp ? 1 : x.id < y.id ? -1 : 1));
    t.equal(fromColumns.find((s) => s.orgId === org)!.root, merkleRoot(mine.map(entryHash)), 'the root over the org\'s entries in (timestamp, id) order');
  }
});

t.test('a sealer makes one seal per org per batch, chained per org, signed, over the batch in (timestamp, id) order', async (t) => {
  const sealer = new Sealer(key);
  const [orgA, orgB] = [randomUUID(), randomUUID()];
  const batch = randomUUID();
  const records = [
    auditRecord(orgA, { timestamp: '2026-11-24T10:00:00.002Z' }),
    auditRecord(orgB, { timestamp: '2026-11-24T10:00:00.001Z' }),
    auditRecord(orgA, { timestamp: '2026-11-24T10:00:00.001Z' }),
    auditRecord(orgA, { timestamp: '2026-11-24T10:00:00.001Z' }),
  ];
  const lines = records.map((r) => encodeAuditRow(r, batch));
  const first = sealer.sealLines(lines);
  t.equal(first.seals.length, 2, 'one seal per org');
  const a = first.seals.find((s) => s.orgId === orgA)!;
  const inOrder = records.filter((r) => r.orgId === orgA).sort((x, y) => (x.timestamp < y.timestamp ? -1 : x.timestamp > y.timestamp ? 1 : x.id < y.id ? -1 : 1));
  t.match(a, { seq: 1, prevHash: GENESIS_HASH, batchId: batch, count: 3, firstAt: '2026-11-24T10:00:00.001Z', lastAt: '2026-11-24T10:00:00.002Z', keyFingerprint: key.fingerprint, writer: sealer.writer });
  t.equal(a.root, merkleRoot(inOrder.map(entryHash)), 'the root over (timestamp, id) order');
  const body = sealBody(a);
  t.equal(a.sealHash, createHash('sha256').update(body).digest('hex'));
  t.ok(verify(null, Buffer.from(body), key.publicKey, Buffer.from(a.signature, 'base64')), 'signed');
  t.strictSame(Object.keys(JSON.parse(body)), [...Object.keys(JSON.parse(body))].sort(), 'canonical: keys sorted');

  const second = sealer.sealLines([encodeAuditRow(auditRecord(orgA), randomUUID())]);
  t.match(second.seals[0], { seq: 2, prevHash: a.sealHash }, 'the next seal of the org links to the last');
  t.equal(sealer.sealLines([encodeAuditRow(auditRecord(orgA))]).seals.length, 0, 'rows without a batch id are not sealed');
  const kept = sealer.snapshot();
  sealer.sealLines([encodeAuditRow(auditRecord(orgA), randomUUID())]);
  sealer.restore(kept);
  t.match(sealer.sealLines([encodeAuditRow(auditRecord(orgA), randomUUID())]).seals[0], { seq: 3, prevHash: second.seals[0]!.sealHash }, 'seals dropped by restore are not linked to');
});

t.test('a batch body: rows, then seal lines; split, counted and read for chain heads', async (t) => {
  const sealer = new Sealer(key);
  const org = randomUUID();
  const rows = [0, 1, 2].map(() => encodeAuditRow(auditRecord(org), 'b4c0ffee-0000-4000-8000-000000000000'));
  const { lines, seals } = sealer.sealLines(rows);
  t.ok(lines.every((l) => l.startsWith(SEAL_LINE_PREFIX) && l.endsWith('\n')));
  const body = rows.join('') + lines.join('');
  t.equal(countEncodedRows(body), 3, 'seal lines are not records');
  t.equal(countEncodedRows(rows.join('')), 3);
  t.equal(countEncodedRows(lines.join('')), 0);
  const split = splitBatchBody(body);
  t.equal(split.rows, rows.join(''));
  t.equal(split.seals, encodeSealLine(seals[0]!).slice(SEAL_LINE_PREFIX.length));
  t.strictSame(splitBatchBody(rows.join('')), { rows: rows.join(''), seals: '' });
  t.match(sealHeadsOf(body), [{ org_id: org, writer: sealer.writer, seq: 1, seal_hash: seals[0]!.sealHash }]);
  t.strictSame(sealHeadsOf(rows.join('')), []);
  // Several batches in one body (a bulk load): seal lines between rows are split out too.
  const more = [0, 1].map(() => encodeAuditRow(auditRecord(org), 'b4c0ffee-0000-4000-8000-000000000001'));
  const second = sealer.sealLines(more);
  const interleaved = lines.join('') + body + more.join('') + second.lines.join('');
  t.equal(countEncodedRows(interleaved), 5);
  t.strictSame(splitBatchBody(interleaved), {
    rows: rows.join('') + more.join(''),
    seals: [...lines, ...lines, ...second.lines].map((l) => l.slice(SEAL_LINE_PREFIX.length)).join(''),
  });
  t.match(sealHeadsOf(interleaved), [{ seq: 2 }], 'the chain\'s highest seq');
});

t.test('a recovered segment: the rows no seal line covers are found, by org and batch', async (t) => {
  const sealer = new Sealer(key);
  const [orgA, orgB] = [randomUUID(), randomUUID()];
  const batch = randomUUID();
  const rows = [orgA, orgB, orgA].map((org) => encodeAuditRow(auditRecord(org), batch));
  const { lines } = sealer.sealLines(rows);
  t.strictSame(unsealedRows(rows), rows, 'no seal lines: every row');
  t.strictSame(unsealedRows([...rows, ...lines]), [], 'all sealed');
  const sealA = lines.find((l) => l.includes(orgA))!;
  t.strictSame(unsealedRows([...rows, sealA]), [rows[1]], 'cut off after org A\'s seal: org B\'s row');
  t.strictSame(unsealedRows([encodeAuditRow(auditRecord(orgA))]), [], 'a row without a batch id is never sealed');
});

t.test('the PDF prints at most N seals: the last of each chain, then the newest, oldest first', async (t) => {
  const seal = (writer: string, seq: number, minute: number) => ({ id: `${writer}-${seq}`, writer, seq, firstAt: `2026-11-24T10:${String(minute).padStart(2, '0')}:00.000Z`, lastAt: `2026-11-24T10:${String(minute).padStart(2, '0')}:30.000Z` }) as unknown as Seal;
  const a = [1, 2, 3, 4, 5].map((seq) => seal('a', seq, seq * 2));
  const b = [1, 2].map((seq) => seal('b', seq, seq));
  const printed = sealsToPrint([...a, ...b], 3).map((s) => s.id);
  t.strictSame(printed, ['b-2', 'a-4', 'a-5'], 'both chains\' last seals, then the newest other, in time order');
  t.equal(sealsToPrint([...a, ...b], 100).length, 7, 'all when they fit');
});

t.test('a signing key must be an Ed25519 PKCS#8 PEM; the message never repeats it', async (t) => {
  t.throws(() => signingKeyFromPem('not a key'), /not a PKCS#8 PEM/);
  const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  t.throws(() => signingKeyFromPem(rsa), /must be an Ed25519 key/);
  t.match(key.publicPem, /^-----BEGIN PUBLIC KEY-----/);
  t.match(key.fingerprint, /^[0-9a-f]{64}$/);
});

t.test('sealSteps makes the same seals as sealColumns, yielding between slices of the tree so the batcher can spread them over turns', async (t) => {
  const batch = randomUUID();
  const [orgA, orgB] = [randomUUID(), randomUUID()];
  const rows = 5 * SEAL_SLICE_HASHES + 3;
  const records = Array.from({ length: rows }, (_, i) => auditRecord(i % 5 === 0 ? orgB : orgA, { timestamp: new Date(Date.parse('2026-11-27T06:00:00.000Z') + (i % 700)).toISOString() }));
  const columns = new SealColumns();
  records.forEach((r) => columns.pushFresh(encodeAuditRow(r, batch), r, batch));
  const now = new Date();
  const steps = new Sealer(key).sealSteps(columns, now);
  let yields = 0;
  let step = steps.next();
  for (; step.done !== true; step = steps.next()) yields++;
  // A tree over n leaves takes n - 1 node hashes: at least that many slices' worth.
  t.ok(yields >= Math.floor((rows - 2) / SEAL_SLICE_HASHES), `yielded ${yields} times over ${rows - 2} node hashes`);
  const comparable = (s: Seal) => ({ orgId: s.orgId, count: s.count, firstAt: s.firstAt, lastAt: s.lastAt, root: s.root, seq: s.seq });
  t.strictSame(step.value.seals.map(comparable), new Sealer(key).sealColumns(columns, now).seals.map(comparable), 'the seals of the synchronous form');
  const mine = records.filter((r) => r.orgId === orgA).sort((x, y) => (x.timestamp < y.timestamp ? -1 : x.timestamp > y.timestamp ? 1 : x.id < y.id ? -1 : 1));
  t.equal(step.value.seals.find((s) => s.orgId === orgA)!.root, merkleRoot(mine.map(entryHash)), 'the root over the org\'s entries in (timestamp, id) order');
});
