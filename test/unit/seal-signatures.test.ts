// Seals checked by worker threads (shared/audit/seal-signatures.ts):
// each result in its seal's place, across batches, lanes and workers.
import { generateKeyPairSync, hash, randomUUID, sign } from 'node:crypto';
import t from 'tap';
import { checkSignatures, SEAL_SIGNATURE_BAD, SEAL_GOOD, SEAL_UNKNOWN_KEY } from '../../shared/audit/seal-signatures.js';
import { sealBody, type Seal } from '../../shared/audit/seal.js';

const trusted = generateKeyPairSync('ed25519');
const other = generateKeyPairSync('ed25519');

/** Seal `i`, signed by `key` under fingerprint `fingerprint`; `altered`: its signature is of another body. */
function seal(i: number, key: typeof trusted, fingerprint: string, altered = false): Seal {
  const at = new Date(Date.UTC(2026, 10, 29) + i).toISOString();
  const fields = { id: randomUUID(), orgId: randomUUID(), writer: randomUUID(), seq: i + 1, batchId: randomUUID(), firstAt: at, lastAt: at, count: 1, root: 'a'.repeat(64), prevHash: 'b'.repeat(64), keyFingerprint: fingerprint, createdAt: at };
  const body = sealBody(fields);
  return { ...fields, sealHash: hash('sha256', body, 'hex'), signature: sign(null, Buffer.from(altered ? `${body} ` : body), key.privateKey).toString('base64') };
}

// 3,500 seals: 4 batches of up to 1,000, more than one lane each worker.
const seals = Array.from({ length: 3500 }, (_, i) => (i % 7 === 0 ? seal(i, trusted, 'trusted', true) : i % 11 === 0 ? seal(i, other, 'other') : seal(i, trusted, 'trusted')));
const expected = seals.map((_, i) => (i % 7 === 0 ? SEAL_SIGNATURE_BAD : i % 11 === 0 ? SEAL_UNKNOWN_KEY : SEAL_GOOD));
const keys = new Map([['trusted', trusted.publicKey]]);

for (const workers of [1, 2]) {
  t.test(`${workers} worker${workers === 1 ? '' : 's'}: each seal's result in its place`, async (t) => {
    const found = await checkSignatures(seals, keys, { stopped: false }, workers);
    t.equal(found.length, seals.length);
    t.same([...found], expected, 'good, altered and unknown-key seals told apart, in order');
  });
}

t.test('a signature spelled otherwise than the sealer writes it is bad, though its bytes verify', async (t) => {
  // A signature with a '+' or '/' in it (most have one), so that its URL-safe spelling differs.
  let s = seal(0, trusted, 'trusted');
  for (let i = 1; !/[+/]/.test(s.signature); i++) s = seal(i, trusted, 'trusted');
  const unpadded = { ...s, signature: s.signature.replace(/=+$/, '') };
  const urlSafe = { ...s, signature: s.signature.replace(/\+/g, '-').replace(/\//g, '_') };
  const found = await checkSignatures([s, unpadded, urlSafe], keys, { stopped: false });
  t.same([...found], [SEAL_GOOD, SEAL_SIGNATURE_BAD, SEAL_SIGNATURE_BAD], 'as written, unpadded, URL-safe');
});

t.test('once stopped, no more batches are handed over', async (t) => {
  const many = Array.from({ length: 10_000 }, (_, i) => seal(i, trusted, 'trusted'));
  const stop = { stopped: false };
  const checking = checkSignatures(many, keys, stop);
  stop.stopped = true;
  const found = await checking;
  t.equal(found.filter((x) => x === SEAL_GOOD).length, 3000, 'the three batches already handed over, and no more');
});
