// Keep-alive connections upstream: one undici Pool per (address, port,
// hostname), so a connection goes to the address the guard checked while TLS is
// verified against the name the agent asked for (SNI and certificate). Bounded,
// least recently used closed first. One budget bounds the calls upstream in
// flight across every pool (UPSTREAM_CONNECTIONS_TOTAL): a connection is opened
// only for a call in flight, so many origins cannot together open pools ×
// UPSTREAM_CONNECTIONS sockets; a call beyond it waits for one to finish.
import { isIPv6 } from 'node:net';
import { createSecureContext, rootCertificates } from 'node:tls';
import { LRUCache } from 'lru-cache';
import { Pool } from 'undici';
import type { Config } from '../shared/config.js';

const MAX_POOLS = 1024;

/** Slots for calls upstream in flight, shared by every origin; FIFO waiting. */
export interface UpstreamBudget {
  readonly inFlight: number;
  readonly waiting: number;
  /** Runs `go` now, or once a slot frees; `timedOut` instead after `waitMs`. Returns a cancel for the wait. */
  acquire(go: () => void, timedOut: () => void, waitMs: number): () => void;
  /** Called once per `go` that ran, when its call upstream is over. */
  release(): void;
}

export function createUpstreamBudget(max: number): UpstreamBudget {
  let inFlight = 0;
  const waiting: (() => void)[] = [];
  return {
    get inFlight() {
      return inFlight;
    },
    get waiting() {
      return waiting.length;
    },
    acquire(go, timedOut, waitMs) {
      if (inFlight < max) {
        inFlight++;
        go();
        return () => undefined;
      }
      const timer = setTimeout(() => {
        cancel();
        timedOut();
      }, waitMs);
      const start = (): void => {
        clearTimeout(timer);
        inFlight++;
        go();
      };
      const cancel = (): void => {
        clearTimeout(timer);
        const i = waiting.indexOf(start);
        if (i >= 0) waiting.splice(i, 1);
      };
      waiting.push(start);
      return cancel;
    },
    release() {
      inFlight--;
      if (inFlight < max) waiting.shift()?.();
    },
  };
}

export interface UpstreamPools {
  poolFor(address: string, port: number, hostname: string): Pool;
  readonly budget: UpstreamBudget;
  close(): Promise<void>;
}

export function createUpstreamPools(config: Readonly<Config>): UpstreamPools {
  const pools = new LRUCache<string, Pool>({
    max: MAX_POOLS,
    // Only an evicted pool is closed here; close() below closes the rest itself.
    dispose: (pool, _key, reason) => {
      if (reason === 'evict') void pool.close().catch(() => undefined);
    },
  });

  // One context for every connection: building one per connection would parse Node's roots each time.
  const secureContext = config.extraCa !== null ? createSecureContext({ ca: [...rootCertificates, config.extraCa] }) : undefined;

  return {
    budget: createUpstreamBudget(config.upstreamConnectionsTotal),
    poolFor(address, port, hostname) {
      const key = `${address}|${port}|${hostname}`;
      let pool = pools.get(key);
      if (pool === undefined) {
        const origin = `https://${isIPv6(address) ? `[${address}]` : address}:${port}`;
        pool = new Pool(origin, {
          connections: config.upstreamConnections,
          headersTimeout: config.upstreamHeadersTimeoutMs,
          bodyTimeout: config.upstreamBodyTimeoutMs,
          maxHeaderSize: 64 * 1024,
          connect: {
            timeout: config.upstreamConnectTimeoutMs,
            ...(secureContext !== undefined ? { secureContext } : {}),
            // The certificate is checked against the name the agent asked for, not the pinned address.
            ...(hostname !== address ? { servername: hostname } : {}),
          },
        });
        pools.set(key, pool);
      }
      return pool;
    },
    async close() {
      const all = [...pools.values()];
      pools.clear();
      await Promise.allSettled(all.map((pool) => pool.close()));
    },
  };
}
