// Picks the load generator: wrk when it is on PATH (a C client: far less CPU
// than a Node one on 2 shared cores), else autocannon; `--loadgen` overrides.
import { onPath } from '../processes.js';
import { createAutocannon } from './autocannon.js';
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

/** wrk2 (fixed-rate, coordinated-omission-corrected latency) when it is on PATH, else why not. */
export function pickFixedRateGenerator(): { generator: LoadGenerator | null; note: string } {
  const wrk2 = onPath('wrk2');
  if (wrk2 === null) return { generator: null, note: 'wrk2 is not on PATH (the bench installs nothing); fixed-rate latency not measured' };
  return { generator: createWrk(wrk2, { threads: WRK_THREADS, fixedRate: true }), note: `wrk2 (${wrk2})` };
}
