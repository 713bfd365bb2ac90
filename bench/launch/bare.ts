// Starts the floor comparator (bench/bare-forwarder-server.ts: uWebSockets.js + undici, no features).
import type { Target } from '../target.js';
import { startForwarder } from './forwarder.js';

export function startBare(upstreamOrigin: string, bearer: string): Promise<Target> {
  return startForwarder('bare', 'bare-forwarder-server', 'BENCH_BARE_READY', upstreamOrigin, bearer);
}
