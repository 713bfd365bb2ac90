// The tamper-evident audit's read side (CONTRACT.md "Tamper-evident audit"): the
// public key seals are signed with, the seals of a window, and verification of a
// window against them (shared/audit/audit-verify.ts).
import { GuardError } from '../shared/errors.js';
import { verifyAudit, verifyJson } from '../shared/audit/audit-verify.js';
import { sealJson } from '../shared/audit/seal.js';
import { defaultSince, isoInstant } from '../shared/iso-instant.js';
import type { AdminContext, Handler } from './context.js';
import { json, queryInteger } from './http.js';
import { JOBS_WAITING_MAX, JOBS_WAITING_PER_ORG, OneAtATime } from './one-at-a-time.js';

/** The default window of seals and verify: the last day. */
const DEFAULT_WINDOW_MS = 86_400_000;
export const SEALS_LIMIT_DEFAULT = 1000;
export const SEALS_LIMIT_MAX = 10_000;
/**
 * GET /audit/verify reads entries in pages of about this many (whole minutes),
 * so the event loop serves calls between pages: each page's work on the loop is
 * parsing its per-batch groups.
 */
const VERIFY_PAGE_ROWS = 50_000;
/**
 * The most seals one GET /audit/verify checks. A verification holds its window's
 * seals and batches in memory, ~3 KB a seal: an org whose calls come one a batch
 * has a seal per call, 86,400 a day per writing process (249 MB of heap, and 15 s
 * of Ed25519), and a week of them would exhaust the heap of the process, all-in-one
 * the proxy's. `npm run verify-audit` (its own process) has no such bound.
 */
export const VERIFY_MAX_SEALS = 100_000;

/** `since` and `until` (ISO 8601) with their defaults; 400 when bad or empty. */
export function windowOf(query: URLSearchParams): { since: Date; until: Date } {
  const untilRaw = query.get('until');
  const sinceRaw = query.get('since');
  const until = new Date(untilRaw === null ? Date.now() : isoInstant(untilRaw, 'until', 'Query parameter'));
  const since = sinceRaw === null ? defaultSince(until, DEFAULT_WINDOW_MS) : new Date(isoInstant(sinceRaw, 'since', 'Query parameter'));
  if (since.getTime() >= until.getTime()) {
    throw new GuardError('invalid_request', "Query parameter 'since' must be before 'until'.", { field: 'since' });
  }
  return { since, until };
}

export function auditSealHandlers(ctx: AdminContext) {
  const keys = new Map([[ctx.signingKey.fingerprint, ctx.signingKey.publicKey]]);
  /** One verification at a time per process: each reads a window's every entry. */
  const verifications = new OneAtATime('audit verifications', JOBS_WAITING_MAX, JOBS_WAITING_PER_ORG);

  const publicKey: Handler = async () => ({
    status: 200,
    headers: { 'content-type': 'application/x-pem-file', 'x-key-fingerprint': ctx.signingKey.fingerprint },
    body: ctx.signingKey.publicPem,
  });

  const seals: Handler = async (req, caller) => {
    const window = windowOf(req.query);
    const limit = queryInteger(req.query, 'limit', SEALS_LIMIT_DEFAULT, 1, SEALS_LIMIT_MAX);
    const [found, total] = await Promise.all([ctx.auditStore.listSeals(caller.orgId, window, limit), ctx.auditStore.countSeals(caller.orgId, window)]);
    return json(200, found.map(sealJson), { 'x-total-count': String(total) });
  };

  const verify: Handler = async (req, caller) => {
    const window = windowOf(req.query);
    const seals = await ctx.auditStore.countSeals(caller.orgId, window);
    if (seals > VERIFY_MAX_SEALS) {
      throw new GuardError('invalid_request', `The window holds ${seals.toLocaleString('en-US')} seals; at most ${VERIFY_MAX_SEALS.toLocaleString('en-US')} are verified at once here. Verify it in narrower windows (since, until), or offline with npm run verify-audit.`, { field: 'since', seals, max_seals: VERIFY_MAX_SEALS });
    }
    const result = await verifications.run(caller.orgId, async () => {
      const [heads, sealingSince, orgCreatedAt] = await Promise.all([ctx.store.listSealHeads(caller.orgId), ctx.store.sealingSince(), ctx.store.orgCreatedAt(caller.orgId)]);
      return verifyAudit(ctx.auditStore, caller.orgId, { ...window, keys, heads, pageRows: VERIFY_PAGE_ROWS, ...(sealingSince === null ? {} : { sealingSince }), ...(orgCreatedAt === null ? {} : { orgCreatedAt }) });
    }, req.signal);
    return json(200, verifyJson(result));
  };

  return { publicKey, seals, verify };
}
