// Starts the Node comparator (bench/node-peer-server.ts: fastify + @fastify/http-proxy).
import type { Target } from '../target.js';
import { startForwarder } from './forwarder.js';

export function startNodePeer(upstreamOrigin: string, bearer: string): Promise<Target> {
  return startForwarder('node-peer', 'node-peer-server', 'BENCH_NODE_PEER_READY', upstreamOrigin, bearer);
}
