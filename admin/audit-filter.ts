// The filters of GET /audit as one parser and one in-memory matcher: the live
// stream (GET /audit/stream) takes the same query parameters, refuses the same
// bad values with the same 400, and applies them to each new entry in memory
// with the meaning the store's WHERE clause gives them.
import { GuardError } from '../shared/errors.js';
import { isUuid } from '../shared/http.js';
import { AUDIT_EXACT_FILTERS, type AuditDecision, type AuditFilter, type AuditRecord } from '../shared/types.js';
import { isoInstant } from '../shared/iso-instant.js';

const DECISIONS: readonly AuditDecision[] = ['allowed', 'denied'];

/** The filter the query names (limit and offset are paging, not filters, and are not read here). */
export function auditFilterFromQuery(q: URLSearchParams): AuditFilter {
  const filter: AuditFilter = {};
  const agentId = q.get('agent_id');
  if (agentId !== null) {
    if (!isUuid(agentId)) throw new GuardError('invalid_request', "Query parameter 'agent_id' must be a UUID.", { field: 'agent_id' });
    filter.agentId = agentId.toLowerCase();
  }
  const decision = q.get('decision');
  if (decision !== null) {
    if (!DECISIONS.includes(decision as AuditDecision)) {
      throw new GuardError('invalid_request', "Query parameter 'decision' must be one of: allowed, denied.", { field: 'decision' });
    }
    filter.decision = decision as AuditDecision;
  }
  for (const [field, param] of AUDIT_EXACT_FILTERS) {
    const value = q.get(param);
    if (value !== null) filter[field] = value;
  }
  // An id, as agent_id: its case is not the id's (an id in capitals matched nothing). Empty: the entries without one, as for the other exact filters.
  if (filter.approvalId !== undefined && filter.approvalId !== '') {
    if (!isUuid(filter.approvalId)) throw new GuardError('invalid_request', "Query parameter 'approval_id' must be a UUID.", { field: 'approval_id' });
    filter.approvalId = filter.approvalId.toLowerCase();
  }
  for (const name of ['since', 'until'] as const) {
    const raw = q.get(name);
    if (raw !== null) filter[name] = isoInstant(raw, name, 'Query parameter');
  }
  return filter;
}

/**
 * Whether a record passes the filter, as the store's list() decides it: exact
 * matches, a null column read as '' (the store keeps null as ''), and the
 * half-open window [since, until) on the call's timestamp.
 */
export function matchesAuditFilter(record: AuditRecord, filter: AuditFilter): boolean {
  if (filter.agentId !== undefined && record.agentId !== filter.agentId) return false;
  if (filter.decision !== undefined && record.decision !== filter.decision) return false;
  for (const [field] of AUDIT_EXACT_FILTERS) {
    const wanted = filter[field];
    if (wanted !== undefined && (record[field] ?? '') !== wanted) return false;
  }
  // ISO 8601 UTC with milliseconds on both sides (isoInstant and the store's form), so text order is time order.
  if (filter.since !== undefined && record.timestamp < filter.since) return false;
  if (filter.until !== undefined && record.timestamp >= filter.until) return false;
  return true;
}
