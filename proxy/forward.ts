// Stage: the call goes upstream over undici, to the address the guard checked,
// with TLS verified against the target hostname (upstream-pools.ts). A small
// body is sent in one piece once it has all arrived; a large one streams.
import type { Dispatcher } from 'undici';
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
    // A captured output is redacted of the credential, which it cannot be in a compressed body:
    // the response is asked for as it is (RFC 9110 §12.5.3).
    if (ex.agent!.logOutputs === 'full') ex.replaceHeader('accept-encoding', 'identity');
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
    const request: Dispatcher.DispatchOptions = { path, method: ex.method as Dispatcher.HttpMethod, headers, body: payload as never, blocking: false };
    if (ex.acceptsEventStream) request.bodyTimeout = config.upstreamStreamIdleMs;
    // A refused connection sent nothing: the next address the guard checked may be
    // tried, as a client connecting to a name does. Not with a streamed body,
    // whose bytes cannot be sent twice.
    const retry = ex.addresses.length > 1 && (payload === null || Buffer.isBuffer(payload)) ? (): boolean => retryNextAddress(ex, request) : null;
    acquireThenSend(ex, request, retry);
    return undefined;
  }

  /** Past UPSTREAM_CONNECTIONS_TOTAL calls in flight, a call waits for one to end, as long as a connect may take. */
  function acquireThenSend(ex: ProxyExchange, request: Dispatcher.DispatchOptions, retry: (() => boolean) | null): void {
    if (pools.budget.tryAcquire()) {
      send(ex, request, retry);
      return;
    }
    pools.budget.wait(
      () => send(ex, request, retry),
      () => {
        if (!ex.aborted && !ex.finished) {
          ex.answerError('upstream_unreachable', 'The target could not be reached (the proxy\'s upstream connection limit stayed full).', undefined, 'allowed');
        }
      },
      config.upstreamConnectTimeoutMs,
    );
  }

  /** Holding a slot of the budget: dispatches to the exchange's current address. */
  function send(ex: ProxyExchange, request: Dispatcher.DispatchOptions, retry: (() => boolean) | null): void {
    // Answered while it waited for a slot (shutdown's 503): the call must not reach the tool after all.
    if (ex.aborted || ex.finished) {
      pools.budget.release();
      return;
    }
    const handler = new UpstreamResponse(ex, config.outputCaptureBytes, retry, pools.budget);
    ex.forwardedAt = performance.now();
    try {
      pools.poolFor(ex.address, ex.target!.port, ex.target!.hostname).dispatch(request, handler as never);
    } catch (err) {
      pools.budget.release();
      // undici refuses a path or header it would not put on the wire (its message names which, never a value).
      ex.answerError('invalid_request', `The request cannot be forwarded: ${(err as Error).message}.`);
    }
  }

  function retryNextAddress(ex: ProxyExchange, request: Dispatcher.DispatchOptions): boolean {
    const next = ex.addresses.indexOf(ex.address) + 1;
    if (next === 0 || next >= ex.addresses.length) return false;
    ex.address = ex.addresses[next]!;
    acquireThenSend(ex, request, () => retryNextAddress(ex, request));
    return true;
  }

  return (ex) => {
    const body = ex.body;
    if (body !== null && body.buffer !== null && !body.complete) {
      return new Promise((resolve) => body.whenComplete(() => resolve(ex.aborted ? false : dispatch(ex))));
    }
    return dispatch(ex);
  };
}
