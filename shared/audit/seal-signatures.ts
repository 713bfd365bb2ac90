// Seals' Ed25519 signatures, checked by a worker thread: each is ~120 µs here
// (OpenSSL through node:crypto), so a day of an organization whose calls come
// one a batch (86,400 seals a writer) held the event loop 12.9 s of its 14 s
// verification, and all-in-one the proxy with it (bench/micro/verify-audit.ts
// `86400 1` prints the loop's busy time). The worker takes them in batches,
// a few ahead, while the loop reads the entries and builds their roots. A
// server uses one worker (one core: all-in-one, the proxy keeps the other);
// `npm run verify-audit`, a process of its own, one a core (up to 4).
import { verify, type KeyObject } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { WorkerCalls } from '../worker-calls.js';
import { sealBody, type Seal } from './seal.js';

/** What checkSignatures finds for a seal. */
export const SIGNATURE_GOOD = 1;
export const SIGNATURE_BAD = 2;
/** Not checked: no trusted key has its fingerprint (verification names it unknown_key). */
export const SIGNATURE_UNKNOWN_KEY = 0;

/** Seals a batch: ~120 ms of the worker's time, ~2 ms of the loop's to build. */
const BATCH = 1000;
/** Batches handed over ahead, so that the worker never waits for the loop. */
const AHEAD = 3;
/** The worker stops after this long without a batch. */
const IDLE_MS = 30_000;

export interface SignatureBatch {
  keys: ReadonlyMap<string, KeyObject>;
  fingerprints: string[];
  bodies: string[];
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
 * For each seal, SIGNATURE_GOOD or SIGNATURE_BAD under the key its fingerprint
 * names, or SIGNATURE_UNKNOWN_KEY, checked by `workerCount` workers. Stops handing
 * batches over once `stop.stopped` (a verification that failed); the seals not
 * checked then read as unknown.
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
      const batch: SignatureBatch = { keys, fingerprints: part.map((s) => s.keyFingerprint), bodies: part.map(sealBody), signatures: part.map((s) => s.signature) };
      found.set(await checker.call(batch), from);
    }
  };
  await Promise.all(Array.from({ length: AHEAD * workerCount }, (_, n) => lane(n)));
  return found;
}

/** In the worker: each seal of the batch checked. */
export function checkBatch({ keys, fingerprints, bodies, signatures }: SignatureBatch): Uint8Array<ArrayBuffer> {
  const found = new Uint8Array(bodies.length);
  for (let i = 0; i < bodies.length; i++) {
    const key = keys.get(fingerprints[i]!);
    found[i] = key === undefined ? SIGNATURE_UNKNOWN_KEY : signatureVerifies(bodies[i]!, signatures[i]!, key) ? SIGNATURE_GOOD : SIGNATURE_BAD;
  }
  return found;
}

/** A signature as the sealer writes it: 64 bytes in standard base64, padded. Node's decoder takes other spellings (URL-safe, unpadded, with spaces), which would be an altered seal that verifies. */
const SIGNATURE_TEXT = /^[A-Za-z0-9+/]{86}==$/;

/** Whether `signature` (as the sealer spells it) signs `body` under `key`. */
export function signatureVerifies(body: string, signature: string, key: KeyObject): boolean {
  if (!SIGNATURE_TEXT.test(signature)) return false;
  try {
    return verify(null, Buffer.from(body), key, Buffer.from(signature, 'base64'));
  } catch {
    return false;
  }
}
