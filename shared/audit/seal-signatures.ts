// Seals checked by a worker thread (their hash and Ed25519 signature; the
// signature is ~120 µs here
// (OpenSSL through node:crypto), so a day of an organization whose calls come
// one a batch (86,400 seals a writer) held the event loop 12.9 s of its 14 s
// verification, and all-in-one the proxy with it (bench/micro/verify-audit.ts
// `86400 1` prints the loop's busy time). The worker takes them in batches,
// a few ahead, while the loop reads the entries and builds their roots. A
// server uses one worker (one core: all-in-one, the proxy keeps the other);
// `npm run verify-audit`, a process of its own, one a core (up to 4).
import { hash, verify, type KeyObject } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { WorkerCalls } from '../worker-calls.js';
import { sealBody, type Seal } from './seal.js';

/** What checking a seal finds (sealVerdict), or that it was not checked (a worker failed, or was stopped). */
export const SEAL_NOT_CHECKED = 0;
export const SEAL_GOOD = 1;
/** Its fields do not hash to its seal_hash. */
export const SEAL_HASH_BAD = 2;
/** No trusted key has its fingerprint. */
export const SEAL_UNKNOWN_KEY = 3;
/** Its signature does not verify under that key. */
export const SEAL_SIGNATURE_BAD = 4;
export type SealVerdict = typeof SEAL_GOOD | typeof SEAL_HASH_BAD | typeof SEAL_UNKNOWN_KEY | typeof SEAL_SIGNATURE_BAD;

/** Seals a batch: ~120 ms of the worker's time, ~2 ms of the loop's to build. */
const BATCH = 1000;
/** Batches handed over ahead, so that the worker never waits for the loop. */
const AHEAD = 3;
/** The worker stops after this long without a batch. */
const IDLE_MS = 30_000;

export interface SignatureBatch {
  keys: ReadonlyMap<string, KeyObject>;
  bodies: string[];
  sealHashes: string[];
  fingerprints: string[];
  signatures: string[];
}

/** Workers `npm run verify-audit` checks with: one a core, up to 4. */
export const COMMAND_SIGNATURE_WORKERS = Math.min(4, availableParallelism());

/** The workers, each started by its first batch; a server only ever starts the first. */
const workers: WorkerCalls<SignatureBatch, Uint8Array>[] = [];
function worker(n: number): WorkerCalls<SignatureBatch, Uint8Array> {
  while (workers.length <= n) {
    workers.push(new WorkerCalls(new URL(import.meta.url.endsWith('.ts') ? './seal-signatures-worker.ts' : './seal-signatures-worker.js', import.meta.url), { idleMs: IDLE_MS }));
  }
  return workers[n]!;
}

/**
 * Each seal's verdict (sealVerdict), found by `workerCount` workers. Stops handing
 * batches over once `stop.stopped` (a verification that failed); the seals not
 * checked then read SEAL_NOT_CHECKED.
 */
export async function checkSignatures(seals: readonly Seal[], keys: ReadonlyMap<string, KeyObject>, stop: { stopped: boolean }, workerCount = 1): Promise<Uint8Array> {
  const found = new Uint8Array(seals.length);
  let next = 0;
  const lane = async (n: number): Promise<void> => {
    const checker = worker(n % workerCount);
    while (next < seals.length && !stop.stopped) {
      const from = next;
      next = Math.min(seals.length, next + BATCH);
      const part = seals.slice(from, next);
      const batch: SignatureBatch = { keys, bodies: part.map(sealBody), sealHashes: part.map((s) => s.sealHash), fingerprints: part.map((s) => s.keyFingerprint), signatures: part.map((s) => s.signature) };
      found.set(await checker.call(batch), from);
    }
  };
  await Promise.all(Array.from({ length: AHEAD * workerCount }, (_, n) => lane(n)));
  return found;
}

/** In the worker: each seal of the batch checked. */
export function checkBatch({ keys, bodies, sealHashes, fingerprints, signatures }: SignatureBatch): Uint8Array<ArrayBuffer> {
  const found = new Uint8Array(bodies.length);
  for (let i = 0; i < bodies.length; i++) found[i] = sealVerdict(bodies[i]!, { sealHash: sealHashes[i]!, keyFingerprint: fingerprints[i]!, signature: signatures[i]! }, keys);
  return found;
}

/** A seal, given its body (sealBody): its hash first, then the key its fingerprint names, then its signature under that key. */
export function sealVerdict(body: string, s: Pick<Seal, 'sealHash' | 'keyFingerprint' | 'signature'>, keys: ReadonlyMap<string, KeyObject>): SealVerdict {
  if (hash('sha256', body, 'hex') !== s.sealHash) return SEAL_HASH_BAD;
  const key = keys.get(s.keyFingerprint);
  if (key === undefined) return SEAL_UNKNOWN_KEY;
  return signatureVerifies(body, s.signature, key) ? SEAL_GOOD : SEAL_SIGNATURE_BAD;
}

/** A signature as the sealer writes it: 64 bytes in standard base64, padded. Node's decoder takes other spellings (URL-safe, unpadded, with spaces), which would be an altered seal that verifies. */
const SIGNATURE_TEXT = /^[A-Za-z0-9+/]{86}==$/;

/** Whether `signature` (as the sealer spells it) signs `body` under `key`. */
function signatureVerifies(body: string, signature: string, key: KeyObject): boolean {
  if (!SIGNATURE_TEXT.test(signature)) return false;
  try {
    return verify(null, Buffer.from(body), key, Buffer.from(signature, 'base64'));
  } catch {
    return false;
  }
}
