// Stage 6: the call goes upstream over undici, to the address the guard checked,
// with TLS verified against the target hostname (SNI and certificate). One pool
// of keep-alive connections per (address, port, hostname), bounded, LRU-closed.
import { isIPv6 } from 'node:net';
import { createSecureContext, rootCertificates } from 'node:tls';
import { LRUCache } from 'lru-cache';
import { Pool } from 'undici';
import type { Config } from '../shared/config.js';
import type { ProxyExchange, StageResult } from './exchange.js';
import { UpstreamResponse } from './stream-response.js';

const MAX_POOLS = 1024;

export interface Forwarder {
  forward(ex: ProxyExchange): StageResult;
  close(): Promise<void>;
}

export function createForwarder(config: Readonly<Config>): Forwarder {
  const pools = new LRUCache<string, Pool>({
    max: MAX_POOLS,
    // Only an evicted pool is closed here; close() below closes the rest itself.
    dispose: (pool, _key, reason) => {
      if (reason === 'evict') void pool.close().catch(() => undefined);
    },
  });

  // One context for every connection: building one per connection would parse Node's roots each time.
  const secureContext = config.extraCa !== null ? createSecureContext({ ca: [...rootCertificates, config.extraCa] }) : undefined;

  function poolFor(address: string, port: number, hostname: string): Pool {
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
  }

  function dispatch(ex: ProxyExchange): undefined {
    const target = ex.target!;
    const headers = ex.headers;
    headers.push('host', target.authority);
    // The request id travels upstream, so both sides' logs meet (RFC-less but common: X-Request-Id).
    if (!ex.hasRequestId) headers.push('x-request-id', ex.id);
    const body = ex.body;
    let payload: Buffer | NodeJS.ReadableStream | null = null;
    if (body !== null) {
      if (body.buffer !== null) {
        payload = body.buffer;
        headers.push('content-length', String(body.buffer.length));
      } else {
        payload = body.stream;
        if (ex.contentLength >= 0) headers.push('content-length', String(ex.contentLength));
      }
    }
    let path = ex.query.length > 0 ? `${target.path}?${ex.query}` : target.path;
    const credential = ex.credential;
    if (credential !== null && credential.credType === 'query') {
      path += (ex.query.length > 0 ? '&' : '?') + credential.value;
    }
    const handler = new UpstreamResponse(ex, config.outputCaptureBytes);
    ex.forwardedAt = performance.now();
    try {
      poolFor(ex.address, target.port, target.hostname).dispatch(
        { path, method: ex.method, headers, body: payload as never, blocking: false },
        handler as never,
      );
    } catch (err) {
      // undici refuses a path or header it would not put on the wire (its message names which, never a value).
      ex.answerError('invalid_request', `The request cannot be forwarded: ${(err as Error).message}.`);
    }
    return undefined;
  }

  return {
    forward(ex) {
      const body = ex.body;
      if (body !== null && body.buffer !== null && !body.complete) {
        // A small body is sent in one piece once it has all arrived.
        return new Promise((resolve) => body.whenComplete(() => resolve(ex.aborted ? false : dispatch(ex))));
      }
      return dispatch(ex);
    },
    async close() {
      const all = [...pools.values()];
      pools.clear();
      await Promise.allSettled(all.map((pool) => pool.close()));
    },
  };
}
