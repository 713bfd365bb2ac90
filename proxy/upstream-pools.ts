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
import { Pool } from '../shared/undici.js';
import type { Config } from '../shared/config.js';

const MAX_POOLS = 1024;

/** Slots for calls upstream in flight, shared by every origin; FIFO waiting. */
export interface UpstreamBudget {
  readonly inFlight: number;
  readonly waiting: number;
  /** Takes a slot when one is free (the common case: no closure, no timer). */
  tryAcquire(): boolean;
  /** Runs `go` holding a slot once one frees, or `timedOut` after `waitMs`. */
  wait(go: () => void, timedOut: () => void, waitMs: number): void;
  /** Frees a slot taken by tryAcquire or given to a `go`, once its call upstream is over. */
  release(): void;
}

export function createUpstreamBudget(max: number): UpstreamBudget {
  let inFlight = 0;
  const waiting: (() => void)[] = [];
  // A freed slot goes to a waiting call a turn later, once undici has marked the
  // connection free, so a waiting call to the same origin reuses it.
  const wakeWaiting = (): void => {
    while (inFlight < max && waiting.length > 0) waiting.shift()!();
  };
  return {
    get inFlight() {
      return inFlight;
    },
    get waiting() {
      return waiting.length;
    },
    tryAcquire() {
      if (inFlight >= max) return false;
      inFlight++;
      return true;
    },
    wait(go, timedOut, waitMs) {
      const start = (): void => {
        clearTimeout(timer);
        inFlight++;
        go();
      };
      const timer = setTimeout(() => {
        waiting.splice(waiting.indexOf(start), 1);
        timedOut();
      }, waitMs);
      waiting.push(start);
    },
    release() {
      inFlight--;
      if (waiting.length > 0) setImmediate(wakeWaiting);
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

  let last: { address: string; port: number; hostname: string; pool: Pool } | null = null;

  return {
    budget: createUpstreamBudget(config.upstreamConnectionsTotal),
    poolFor(address, port, hostname) {
      // Consecutive calls mostly go where the last one went: compared, not keyed by a string built per call.
      if (last !== null && address === last.address && port === last.port && hostname === last.hostname) return last.pool;
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
      last = { address, port, hostname, pool };
      return pool;
    },
    async close() {
      const all = [...pools.values()];
      pools.clear();
      last = null;
      // Destroyed, not closed: shutdown has ended every call by now, and close()
      // waits for a request still connecting (no abort of its own yet: onConnect)
      // until UPSTREAM_CONNECT_TIMEOUT_MS, up to 10 minutes.
      await Promise.allSettled(all.map((pool) => pool.destroy()));
    },
  };
}
