// Starts the floor comparator (bench/bare-forwarder-server.ts: uWebSockets.js + undici, no features).
import { benchScript } from '../paths.js';
import { startProcess } from '../processes.js';
import type { Target } from '../target.js';

export async function startBare(upstreamOrigin: string, bearer: string): Promise<Target> {
  const { proc, match } = await startProcess({
    name: 'bare',
    command: process.execPath,
    args: benchScript('bare-forwarder-server'),
    env: { ...process.env, UPSTREAM_ORIGIN: upstreamOrigin, BEARER: bearer },
    ready: /BENCH_BARE_READY port=(\d+)/,
    readyTimeoutMs: 15_000,
  });
  return {
    name: 'bare',
    origin: `http://127.0.0.1:${match[1]}`,
    pathFor: (upstreamPath) => upstreamPath,
    proc,
  };
}
