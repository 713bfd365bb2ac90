// Approvals (CONTRACT.md "Held calls: a person approves"): the org's held calls,
// listed and decided by a person. A decision reaches the proxy holding the call
// through the metadata store's change feed (MetadataStore.decideApproval).
import { approvalJson } from '../shared/approvals.js';
import { GuardError } from '../shared/errors.js';
import { isUuid } from '../shared/http.js';
import { APPROVAL_STATUSES, type ApprovalStatus } from '../shared/types.js';
import type { AdminContext, Handler } from './context.js';
import { json, queryInteger, readJsonObject, stringField } from './http.js';

export const APPROVALS_LIMIT_DEFAULT = 100;
export const APPROVALS_LIMIT_MAX = 1000;
const NOTE_MAX_CHARS = 2000;

export function approvalHandlers(ctx: AdminContext) {
  const list: Handler = async (req, caller) => {
    const q = req.query;
    const status = q.get('status');
    if (status !== null && !APPROVAL_STATUSES.includes(status as ApprovalStatus)) {
      throw new GuardError('invalid_request', `Query parameter 'status' must be one of: ${APPROVAL_STATUSES.join(', ')}.`, { field: 'status' });
    }
    const agentId = q.get('agent_id');
    if (agentId !== null && !isUuid(agentId)) throw new GuardError('invalid_request', "Query parameter 'agent_id' must be a UUID.", { field: 'agent_id' });
    const limit = queryInteger(q, 'limit', APPROVALS_LIMIT_DEFAULT, 1, APPROVALS_LIMIT_MAX);
    const approvals = await ctx.store.listApprovals(caller.orgId, {
      ...(status !== null ? { status: status as ApprovalStatus } : {}),
      ...(agentId !== null ? { agentId: agentId.toLowerCase() } : {}),
      limit,
    });
    return json(200, approvals.map(approvalJson));
  };

  const get: Handler = async (_req, caller, params) => json(200, approvalJson(await requireApproval(ctx, caller.orgId, params.id)));

  const decide = (verdict: 'approved' | 'denied'): Handler => async (req, caller, params) => {
    // The approval before the body, as for an agent's policy (docs/api.md decision 5): an unknown id is 404 whatever the body.
    const id = (await requireApproval(ctx, caller.orgId, params.id)).id;
    // The body is optional: no body (or an empty one) is a decision without a note.
    const body = req.body.length === 0 ? {} : readJsonObject(req);
    const note = stringField(body, 'note', { optional: true, max: NOTE_MAX_CHARS }) ?? null;
    const user = await ctx.store.findUserById(caller.userId);
    if (user === undefined) throw new GuardError('unauthorized', 'The account of this token no longer exists.');
    return json(200, approvalJson(await ctx.store.decideApproval(caller.orgId, id, verdict, user.email, note)));
  };

  return { list, get, approve: decide('approved'), deny: decide('denied') };
}

async function requireApproval(ctx: AdminContext, orgId: string, id: string | undefined) {
  const approval = id !== undefined && isUuid(id) ? await ctx.store.getApproval(orgId, id.toLowerCase()) : undefined;
  if (approval === undefined) throw new GuardError('not_found', 'No approval with that id.');
  return approval;
}
