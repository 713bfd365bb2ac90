// Stage 2: what the request asks for, checked before anything else is looked up:
// the head's framing, the method, the target host, and room in the audit pipeline.
import type { AuditBatcher } from '../shared/audit/audit-batcher.js';
import type { ProxyExchange, StageResult } from './exchange.js';
import { parseTarget } from './target-address.js';

export const PROXY_METHODS = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS']);

export function checkRequest(ex: ProxyExchange, batcher: AuditBatcher): StageResult {
  if (ex.headError !== null) {
    const { code, message } = ex.headError;
    if (code !== 'invalid_request') return ex.answerError(code, message);
    return refuseFraming(ex, message);
  }
  if (!PROXY_METHODS.has(ex.method)) return ex.answerError('method_not_allowed', `Method ${ex.method} is not proxied.`);
  const target = parseTarget(ex.rawTarget);
  if (target === null) return ex.answerError('invalid_target');
  ex.target = target;
  const policyPath = normalizePolicyPath(target.path);
  if (policyPath === null) return ex.answerError('invalid_target', 'The target path has dot segments (. or ..), which the proxy does not forward.');
  ex.policyPath = policyPath;
  if (batcher.saturated) {
    // Fail closed: a call we could not audit is a call we do not make.
    return ex.answerError('unavailable', 'The audit pipeline is saturated; retry later.', undefined, 'denied');
  }
  return undefined;
}

/**
 * A head with two Content-Lengths, two Hosts or a Transfer-Encoding other than
 * chunked (listen.ts sets these as `invalid_request`) has framing another HTTP
 * hop may read differently: uWS frames the body by the first Content-Length, so
 * the bytes after it would be parsed as a next request on this connection
 * (request smuggling). The answer closes the connection, and it is written on a
 * later turn of the event loop: uWS goes on parsing what is already buffered
 * after a response ended inside the request handler (even with close), while a
 * request that arrives with this response still pending makes uWS drop the
 * connection. Either way no byte after the refused head is served.
 */
function refuseFraming(ex: ProxyExchange, message: string): Promise<false> {
  ex.auditDecision = 'denied';
  return new Promise((resolve) => {
    setImmediate(() => resolve(ex.answerError('invalid_request', message, undefined, 'denied', true)));
  });
}

const ESCAPE = /%([0-9A-Fa-f]{2})/g;
const UNRESERVED_OR_SLASH = /[A-Za-z0-9\-._~/]/;

/**
 * The path the policy sees: percent-escapes of unreserved characters and of '/'
 * decoded (RFC 3986 §6.2.2.2), so `/%61dmin` and `/admin%2Fx` meet a rule on
 * `/admin/**` the way an upstream that decodes them would, and runs of '/'
 * collapse (`//admin` is `/admin` to most servers). The upstream still
 * gets the path exactly as sent. Null when a segment is `.` or `..` (raw or
 * encoded): such paths mean different things to different servers, so they are
 * refused rather than guessed at.
 */
export function normalizePolicyPath(path: string): string | null {
  const decoded = path.includes('%')
    ? path.replace(ESCAPE, (escape, hex: string) => {
      const char = String.fromCharCode(parseInt(hex, 16));
      return UNRESERVED_OR_SLASH.test(char) ? char : escape.toUpperCase();
    })
    : path;
  const collapsed = decoded.includes('//') ? decoded.replace(/\/{2,}/g, '/') : decoded;
  if (collapsed.includes('/.')) {
    for (const segment of collapsed.split('/')) {
      if (segment === '.' || segment === '..') return null;
    }
  }
  return collapsed;
}
