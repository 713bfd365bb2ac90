// The output hash of an agent with `log_outputs: hash` (proxy/exchange.ts
// hashChunk): a body that arrives whole in one chunk is hashed in one
// crypto.hash call, anything else through a Hash object fed chunk by chunk,
// then digested. `node dist/bench/micro/output-hash.js`.
import { randomBytes } from 'node:crypto';
import type { ProxyExchange } from '../../proxy/exchange.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';
import { socketlessExchange } from './socketless-exchange.js';

/** The body's hex digest as the exchange hashes it for the audit record, `whole` when `chunks` is the entire body in one. */
function outputHash(ex: ProxyExchange, chunks: readonly Buffer[], whole: boolean): string {
  ex.outputHash = null;
  ex.outputDigest = null;
  for (let i = 0; i < chunks.length; i++) ex.hashChunk(chunks[i]!, whole);
  // What the exchange's audit record reads (its #outputDigest).
  return ex.outputDigest ?? ex.outputHash!.digest('hex');
}

export const measureOutputHash: MicroCases = () => {
  const ex = socketlessExchange();
  ex.hashing = true;
  const small = [randomBytes(211)]; // the bench upstream's /small
  const body64k = randomBytes(64 * 1024);
  const whole64k = [body64k];
  const chunked64k = [0, 1, 2, 3].map((n) => body64k.subarray(n * 16 * 1024, (n + 1) * 16 * 1024));
  return [
    measure('output hash (211-byte body in one chunk: one crypto.hash)', () => outputHash(ex, small, true)),
    // What the one-shot saves (exchange.ts): the same 211 bytes through a Hash object.
    measure('output hash (211-byte body through a Hash: createHash, update, digest)', () => outputHash(ex, small, false)),
    measure('output hash (64 KiB body in one chunk: one crypto.hash)', () => outputHash(ex, whole64k, true)),
    measure('output hash (64 KiB body in 16 KiB chunks: createHash, 4 updates, digest)', () => outputHash(ex, chunked64k, false)),
  ];
};

runWhenMain(import.meta.url, measureOutputHash);
