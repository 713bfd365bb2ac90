// Keep-alive connections upstream: one undici Pool per (address, port,
// hostname), so a connection goes to the address the guard checked while TLS is
// verified against the name the agent asked for (SNI and certificate). Bounded,
// least recently used closed first.
import { isIPv6 } from 'node:net';
import { createSecureContext, rootCertificates } from 'node:tls';
import { LRUCache } from 'lru-cache';
import { Pool } from 'undici';
import type { Config } from '../shared/config.js';

const MAX_POOLS = 1024;

export interface UpstreamPools {
  poolFor(address: string, port: number, hostname: string): Pool;
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
