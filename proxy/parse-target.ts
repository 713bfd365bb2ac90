// Stage 2: what the request asks for, checked before anything else is looked up:
// the head's framing, the method, the target host, and room in the audit pipeline.
import type { AuditBatcher } from '../shared/audit/audit-batcher.js';
import type { ProxyExchange, StageResult } from './exchange.js';
import { parseTarget } from './target-address.js';

export const PROXY_METHODS = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS']);

export function checkRequest(ex: ProxyExchange, batcher: AuditBatcher): StageResult {
  if (ex.headError !== null) return ex.answerError(ex.headError.code, ex.headError.message);
  if (!PROXY_METHODS.has(ex.method)) return ex.answerError('method_not_allowed', `Method ${ex.method} is not proxied.`);
  const target = parseTarget(ex.rawTarget);
  if (target === null) return ex.answerError('invalid_target');
  ex.target = target;
  if (batcher.saturated) {
    // Fail closed: a call we could not audit is a call we do not make.
    return ex.answerError('unavailable', 'The audit pipeline is saturated; retry later.', undefined, 'denied');
  }
  return undefined;
}
