// Starts the Node comparator (bench/node-peer-server.ts: fastify + @fastify/http-proxy).
import { benchScript } from '../paths.js';
import { startProcess } from '../processes.js';
import type { Target } from '../target.js';

export async function startNodePeer(upstreamOrigin: string, bearer: string): Promise<Target> {
  const { proc, match } = await startProcess({
    name: 'node-peer',
    command: process.execPath,
    args: benchScript('node-peer-server'),
    env: { ...process.env, UPSTREAM_ORIGIN: upstreamOrigin, BEARER: bearer },
    ready: /BENCH_NODE_PEER_READY port=(\d+)/,
    readyTimeoutMs: 15_000,
  });
  return {
    name: 'node-peer',
    origin: `http://127.0.0.1:${match[1]}`,
    pathFor: (upstreamPath) => upstreamPath,
    proc,
  };
}
