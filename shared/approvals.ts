// Held calls (CONTRACT.md "Held calls: a person approves"): what the proxy, the
// admin API and the webhook say about an approval, each in one place.
import type { Approval } from './types.js';

/** Held request bodies up to this size are kept for the approved forward; a larger one is 413 at once. */
export const HELD_BODY_MAX_BYTES = 1024 * 1024;

/** An approval as GET /approvals lists it (and the webhook sends it). */
export function approvalJson(a: Approval) {
  return {
    id: a.id,
    agent_id: a.agentId,
    agent_name: a.agentName,
    tool_name: a.toolName,
    host: a.host,
    action: a.action,
    path: a.path,
    query: a.query,
    reasoning: a.reasoning,
    task_id: a.taskId,
    rule_matched: a.ruleMatched,
    status: a.status,
    created_at: a.createdAt,
    expires_at: a.expiresAt,
    decided_at: a.decidedAt,
    decided_by: a.decidedBy,
    note: a.note,
    body_sha256: a.bodySha256,
    body_bytes: a.bodyBytes,
  };
}

/**
 * `/approvals/{id}` under PUBLIC_URL's path: the 202's Location, a reference
 * relative to PUBLIC_URL (an origin, so usually just the path).
 */
export function approvalLocation(publicUrl: string, id: string): string {
  let base = '';
  try {
    base = new URL(publicUrl).pathname.replace(/\/+$/, '');
  } catch {
    // No public URL yet: the path alone.
  }
  return `${base}/approvals/${id}`;
}
