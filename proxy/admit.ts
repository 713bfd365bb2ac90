// Stage: may this call be taken at all? Not while the service shuts down, not
// with a head whose framing or size we refuse, not with a method we do not
// proxy, and not while the audit pipeline is saturated (a call we could not
// audit is a call we do not make).
import type { ErrorCode } from '../shared/errors.js';
import { isProxyMethod } from '../shared/http.js';
import type { ProxyExchange, Stage, StageResult } from './exchange.js';

export function createAdmit(deps: {
  /** False once shutdown began (calls on kept-alive connections are then refused). */
  admitting: () => boolean;
  /** The audit queue is full (fail closed). */
  saturated: () => boolean;
  /**
   * The audit queue is past its headroom too (AuditBatcher.overfull): the 503
   * goes without a record, and is counted instead. Absent: always recorded.
   */
  overfull?: () => boolean;
  /** Counts a refusal answered without a record. */
  unrecorded?: () => void;
}): Stage {
  return (ex) => {
    if (!deps.admitting()) return ex.answerError('unavailable', 'The service is shutting down; retry.', undefined, 'denied', true);
    if (ex.headError !== null) {
      const { code, message } = ex.headError;
      return hasUntrustedFraming(ex) ? refuseFraming(ex, message) : ex.answerError(code, message);
    }
    if (!isProxyMethod(ex.method)) return ex.answerError('method_not_allowed', `Method ${ex.method} is not proxied.`);
    if (deps.saturated()) {
      if (deps.overfull?.() === true) {
        ex.unaudited = true;
        deps.unrecorded?.();
      }
      return ex.answerError('unavailable', 'The audit pipeline is saturated; retry later.', undefined, 'denied');
    }
    return undefined;
  };
}

/**
 * A head with two Content-Lengths, two Hosts or a Transfer-Encoding other than
 * chunked (server/request-head.ts sets these as `invalid_request`) has framing
 * another HTTP hop may read differently: uWS frames the body by the first
 * Content-Length, so the bytes after it would be parsed as a next request on
 * this connection (request smuggling). The answer closes the connection, and it
 * is written on a later turn of the event loop: uWS goes on parsing what is
 * already buffered after a response ended inside the request handler (even
 * with close), while a request that arrives with this response still pending
 * makes uWS drop the connection. Either way no byte after the refused head is
 * served.
 */
export function refuseFraming(ex: ProxyExchange, message: string, code: ErrorCode = 'invalid_request'): StageResult {
  ex.auditDecision = 'denied';
  return new Promise((resolve) => {
    setImmediate(() => resolve(ex.answerError(code, message, undefined, 'denied', true)));
  });
}

/** A head with framing refuseFraming refuses: it must close its connection, whatever else refuses it first. */
export function hasUntrustedFraming(ex: ProxyExchange): boolean {
  return ex.headError !== null && ex.headError.code === 'invalid_request';
}
