// Picks the load generator: wrk when it is on PATH (a C client: far less CPU
// than a Node one on 2 shared cores), else autocannon; `--loadgen` overrides.
import { onPath } from '../processes.js';
import { createAutocannon, createOpenLoop } from './worker-generators.js';
import type { LoadGenerator } from './types.js';
import { createWrk } from './wrk.js';

/** Threads for wrk: one leaves the second core to the proxy and the upstream. */
export const WRK_THREADS = 1;

export function pickLoadGenerator(preference: 'auto' | 'wrk' | 'autocannon'): { generator: LoadGenerator; note: string } {
  const wrk = preference === 'autocannon' ? null : onPath('wrk');
  if (wrk !== null) return { generator: createWrk(wrk, { threads: WRK_THREADS, fixedRate: false }), note: `wrk (${wrk}, ${WRK_THREADS} thread)` };
  if (preference === 'wrk') throw new Error('--loadgen wrk: wrk is not on PATH');
  return { generator: createAutocannon(), note: preference === 'autocannon' ? 'autocannon (asked for)' : 'autocannon (wrk is not on PATH)' };
}

/**
 * The fixed-rate generator (coordinated-omission-corrected latency): wrk2 when
 * it is on PATH, else the bench's own open-loop generator (open-loop-worker.ts).
 */
export function pickFixedRateGenerator(): { generator: LoadGenerator; note: string } {
  const wrk2 = onPath('wrk2');
  if (wrk2 === null) return { generator: createOpenLoop(), note: 'the open-loop Node generator (bench/load/open-loop-worker.ts; wrk2 is not on PATH): latency from each request\'s scheduled instant, paced by a 1 ms timer' };
  return { generator: createWrk(wrk2, { threads: WRK_THREADS, fixedRate: true }), note: `wrk2 (${wrk2})` };
}
