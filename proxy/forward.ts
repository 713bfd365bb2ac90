// Stage: the call goes upstream over undici, to the address the guard checked,
// with TLS verified against the target hostname (upstream-pools.ts). A small
// body is sent in one piece once it has all arrived; a large one streams.
import type { Config } from '../shared/config.js';
import type { ProxyExchange, Stage } from './exchange.js';
import { UpstreamResponse } from './stream-response.js';
import type { UpstreamPools } from './upstream-pools.js';

export function createForward(deps: { config: Readonly<Config>; pools: UpstreamPools }): Stage {
  const { config, pools } = deps;

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
    const dispatchNow = (): void => {
      if (ex.aborted) {
        pools.budget.release();
        return;
      }
      const handler = new UpstreamResponse(ex, config.outputCaptureBytes, retry, pools.budget.release);
      ex.forwardedAt = performance.now();
      try {
        pools.poolFor(ex.address, target.port, target.hostname).dispatch(
          { path, method: ex.method, headers, body: payload as never, blocking: false, ...(ex.acceptsEventStream ? { bodyTimeout: config.upstreamStreamIdleMs } : {}) },
          handler as never,
        );
      } catch (err) {
        pools.budget.release();
        // undici refuses a path or header it would not put on the wire (its message names which, never a value).
        ex.answerError('invalid_request', `The request cannot be forwarded: ${(err as Error).message}.`);
      }
    };
    // Past UPSTREAM_CONNECTIONS_TOTAL calls in flight, a call waits for one to end, as long as a connect may take.
    const send = (): void => {
      pools.budget.acquire(dispatchNow, () => {
        if (!ex.aborted && !ex.finished) {
          ex.answerError('upstream_unreachable', 'The target could not be reached (the proxy\'s upstream connection limit stayed full).', undefined, 'allowed');
        }
      }, config.upstreamConnectTimeoutMs);
    };
    // A refused connection sent nothing: the next address the guard checked is
    // tried, as a client connecting to a name does. Not with a streamed body,
    // whose bytes cannot be sent twice.
    const retry = payload === null || Buffer.isBuffer(payload)
      ? (): boolean => {
          const next = ex.addresses.indexOf(ex.address) + 1;
          if (next === 0 || next >= ex.addresses.length) return false;
          ex.address = ex.addresses[next]!;
          send();
          return true;
        }
      : null;
    send();
    return undefined;
  }

  return (ex) => {
    const body = ex.body;
    if (body !== null && body.buffer !== null && !body.complete) {
      return new Promise((resolve) => body.whenComplete(() => resolve(ex.aborted ? false : dispatch(ex))));
    }
    return dispatch(ex);
  };
}
