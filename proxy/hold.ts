// Stages for held calls (CONTRACT.md "Held calls: a person approves"), and the
// registry of calls waiting for a decision.
//
// hold: a call whose policy decision is `approve` is bound to an approval (a new
// one, or the one its X-Approval-Id names on a retry: same method, host, path,
// query and body SHA-256) and waits, open, until a person decides or
// APPROVAL_HOLD_S passes (then 202). Waiting costs one timer and one map entry:
// a decision reaches the waiting calls through the metadata change feed (at once
// in this process, within CHANGE_POLL_MS from another), never by polling per call.
//
// claim: just before the forward (after the limits), an approved call claims its
// approval (approved → used, one conditional update in the store), so of two
// retries racing through any proxies exactly one is forwarded.
import { hash } from 'node:crypto';
import { approvalLocation, HELD_BODY_MAX_BYTES } from '../shared/approvals.js';
import { APPROVAL_ID_HEADER, isUuid } from '../shared/http.js';
import type { Logger } from '../shared/log.js';
import type { Metrics } from '../shared/metrics.js';
import { LIMIT_RULE_PREFIX, PENDING_APPROVALS_LIMIT as PENDING_LIMIT } from '../shared/policy/index.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';
import type { Approval } from '../shared/types.js';
import type { ApprovalWebhook } from './approval-webhook.js';
import type { ProxyExchange, Stage } from './exchange.js';

const EMPTY: Buffer = Buffer.alloc(0);

/**
 * Bodies of held calls kept in memory by one process, at most: past it a new
 * held call is answered 202 at once (its body is in the store for the retry),
 * so that open connections cannot pin unbounded memory.
 */
export const HELD_BODIES_MAX_BYTES = 256 * 1024 * 1024;

/** Retry-After of a 202: the retry is held again, so soon is fine; without a hold the agent polls. */
const RETRY_AFTER_HELD_S = 1;
const RETRY_AFTER_UNHELD_S = 5;

export interface HeldCalls {
  /** Calls waiting for a decision now. */
  readonly size: number;
  /** Approvals this process created. */
  readonly created: number;
  /** Shutdown: every waiting call is answered 202 at once (its approval stays pending). */
  releaseAll(): void;
  /** Stops hearing decisions. */
  close(): void;
}

interface Waiter {
  readonly ex: ProxyExchange;
  readonly approval: Approval;
  readonly resolve: (result: undefined | false) => void;
  /** The held body's bytes, counted in heldBytes while it waits. */
  readonly bytes: number;
  timer: NodeJS.Timeout | null;
}

export function createHeldCalls(deps: {
  store: MetadataStore;
  /** APPROVAL_HOLD_S. */
  holdS: number;
  /** Policy changes heard so far (caches.ts policyChanges). */
  policyChanges: () => number;
  /** APPROVAL_MAX_PENDING. */
  maxPending: number;
  /** Null when METRICS_ENABLED is off. */
  metrics: Metrics | null;
  publicUrl: () => string;
  webhook: ApprovalWebhook | null;
  log: Logger;
}): { hold: Stage; claim: Stage; ended: (ex: ProxyExchange) => void; held: HeldCalls } {
  const { store, holdS, log } = deps;
  /** Waiting calls by approval id (two retries of one approval may wait at once). */
  const waiting = new Map<string, Set<Waiter>>();
  let size = 0;
  let heldBytes = 0;
  let created = 0;
  /** Shutdown has begun: nothing is held any more. */
  let closing = false;

  const unsubscribe = store.changes.subscribe({
    apply(change) {
      if (change.kind === 'approval' && waiting.has(change.approvalId)) void reread(change.orgId, change.approvalId);
      else if (change.kind === 'agent' && size > 0) void recheckAgents(change.agentId);
      else if (change.kind === 'policy' && size > 0) releaseAgent(change.agentId);
    },
    // The feed lost its place: any decision, an agent's deletion or a policy's
    // change may have been missed. A policy's: every held call is answered 202,
    // its retry decided afresh.
    clear() {
      release(everyWaiting());
    },
  });

  /**
   * The agent's policy changed: its held calls were decided by the old one.
   * Approved, one was forwarded though the new policy denied it (a retry with
   * the same approval was refused). Each is answered 202 now, its approval as
   * it is: the retry is decided by the policy in force, as every retry is. The
   * feed delivers a change before any decision made after it.
   */
  function releaseAgent(agentId: string): void {
    release(heldOf(agentId));
  }

  /** Each call answered 202 now, its approval as it is (its retry decides). */
  function release(waiters: readonly Waiter[]): void {
    for (const waiter of waiters) waiter.ex.holdRelease?.(true);
  }

  /** The waiting calls (a copy: answering one changes the registry). */
  function everyWaiting(): Waiter[] {
    return [...waiting.values()].flatMap((waiters) => [...waiters]);
  }

  /** The agent's waiting calls. */
  function heldOf(agentId: string): Waiter[] {
    return everyWaiting().filter((w) => w.ex.agent!.id === agentId);
  }

  /**
   * A held call whose agent was deleted meanwhile is answered as a call with an
   * unknown key would be (401): an approval given later must not forward a call
   * of an agent that no longer exists, with its organization's credential.
   */
  async function recheckAgents(agentId: string): Promise<void> {
    const held = heldOf(agentId);
    if (held.length > 0 && (await agentGone(held[0]!.ex.agent!.orgId, agentId))) for (const waiter of held) answerAgentGone(waiter);
  }

  /** The agent is deleted; false when it is there or cannot be read (its calls wait on). */
  async function agentGone(orgId: string, agentId: string): Promise<boolean> {
    try {
      return (await store.getAgent(orgId, agentId)) === undefined;
    } catch (err) {
      log.warn('a held call\'s agent could not be read again; its calls wait on', { agent_id: agentId, err });
      return false;
    }
  }

  function answerAgentGone(waiter: Waiter): void {
    // Released while the agent was read (its approval came first, on a store
    // whose reads take a round-trip): that call is on its way, past the check
    // agent-deletions.ts made while it was held, so it is ended as that ends a
    // deleted agent's calls (next turn: it may be in a stage's synchronous run).
    if (waiting.get(waiter.approval.id)?.has(waiter) !== true) {
      setImmediate(() => waiter.ex.endForAgentDeleted());
      return;
    }
    stopWaiting(waiter);
    waiter.resolve(waiter.ex.answerError('invalid_api_key'));
  }

  async function reread(orgId: string, id: string): Promise<void> {
    let approval: Approval | undefined;
    try {
      approval = await store.getApproval(orgId, id);
    } catch (err) {
      // The waiting calls still end at their timer; a later change or the retry sees the decision.
      log.warn('a decided approval could not be read; its held calls wait on', { approval_id: id, err });
      return;
    }
    if (approval === undefined || approval.status === 'pending') return;
    for (const waiter of [...(waiting.get(id) ?? [])]) {
      stopWaiting(waiter);
      waiter.resolve(settle(waiter.ex, approval));
    }
  }

  function stopWaiting(waiter: Waiter): void {
    const waiters = waiting.get(waiter.approval.id);
    if (waiters?.delete(waiter)) {
      size--;
      heldBytes -= waiter.bytes;
      if (waiters.size === 0) waiting.delete(waiter.approval.id);
    }
    if (waiter.timer !== null) clearTimeout(waiter.timer);
    waiter.timer = null;
    waiter.ex.holdRelease = null;
  }

  function answerPending(ex: ProxyExchange, approval: Approval): false {
    const toExpiry = Math.ceil((Date.parse(approval.expiresAt) - Date.now()) / 1000);
    const retryAfter = Math.max(1, Math.min(holdS > 0 ? RETRY_AFTER_HELD_S : RETRY_AFTER_UNHELD_S, toExpiry));
    return ex.answerPending(approval, retryAfter, approvalLocation(deps.publicUrl(), approval.id));
  }

  /**
   * Holds the call until a decision, the hold's end or the approval's expiry,
   * whichever comes first. Once registered, the approval and the agent are read
   * again: a decision committed, or the agent deleted, between the read that
   * found them and the registration (a change the feed delivered to nobody) is
   * not missed.
   */
  function wait(ex: ProxyExchange, approval: Approval, bytes: number): undefined | false | Promise<undefined | false> {
    const untilExpiry = Date.parse(approval.expiresAt) - Date.now();
    if (untilExpiry <= 0) return settle(ex, { ...approval, status: 'expired' });
    // A policy changed since this one decided (while the body came, slowly as
    // the agent likes, or the approval was made): that change released no held
    // call, this one was not registered yet. Its retry is decided afresh. Any
    // agent's change counts (they are rare; a cache entry's age or refetch does
    // not): the window is the call's way from its decision to here.
    const policyChanged = deps.policyChanges() !== ex.policyEpoch;
    if (holdS === 0 || closing || policyChanged || heldBytes + bytes > HELD_BODIES_MAX_BYTES) return answerPending(ex, approval);
    return new Promise((resolve) => {
      const waiter: Waiter = { ex, approval, resolve, bytes, timer: null };
      let waiters = waiting.get(approval.id);
      if (waiters === undefined) waiting.set(approval.id, (waiters = new Set()));
      waiters.add(waiter);
      size++;
      heldBytes += bytes;
      waiter.timer = setTimeout(() => {
        stopWaiting(waiter);
        resolve(Date.now() >= Date.parse(approval.expiresAt) ? settle(ex, { ...approval, status: 'expired' }) : answerPending(ex, approval));
      }, Math.min(holdS * 1000, untilExpiry));
      ex.holdRelease = (answer) => {
        stopWaiting(waiter);
        resolve(answer ? answerPending(ex, approval) : false);
      };
      void reread(approval.orgId, approval.id);
      // And the agent: deleted while the body was read or the approval made,
      // its change reached no waiting call.
      void recheckAgent(waiter);
    });
  }

  /** recheckAgents for one waiter just registered (no walk of every held call). */
  async function recheckAgent(waiter: Waiter): Promise<void> {
    const agent = waiter.ex.agent!;
    if (await agentGone(agent.orgId, agent.id)) answerAgentGone(waiter);
  }

  async function hold(ex: ProxyExchange): Promise<undefined | false> {
    // The body is hashed (the approval is bound to it) and kept for the forward.
    let bytes: Buffer = EMPTY;
    const body = ex.body;
    if (body !== null) {
      const tooLarge = `A call that needs approval may have a body of at most ${HELD_BODY_MAX_BYTES} bytes.`;
      if (ex.contentLength > HELD_BODY_MAX_BYTES) return ex.answerError('payload_too_large', tooLarge);
      const collected = await body.collect(HELD_BODY_MAX_BYTES);
      if (ex.finished) return false;
      if (collected === null) return ex.answerError('payload_too_large', tooLarge);
      bytes = collected;
    }
    const bodySha256 = hash('sha256', bytes, 'hex');
    const agent = ex.agent!;
    const target = ex.target!;

    if (ex.approvalId !== null) {
      const id = ex.approvalId.trim().toLowerCase();
      const approval = isUuid(id) ? await store.getApproval(agent.orgId, id) : undefined;
      if (ex.finished) return false;
      if (approval === undefined || approval.agentId !== agent.id) return ex.answerError('not_found', 'No such approval for this agent.');
      ex.approval = approval;
      const differs = approval.action !== ex.method ? 'method' : approval.host !== target.authority ? 'host' : approval.path !== target.path ? 'path' : approval.query !== ex.query ? 'query' : approval.bodySha256 !== bodySha256 ? 'body' : null;
      if (differs !== null) {
        return ex.answerError('approval_mismatch', `The call's ${differs} differs from the one approval ${approval.id} is for.`, { field: differs });
      }
      if (approval.status !== 'pending') return settle(ex, approval);
      return wait(ex, approval, bytes.length);
    }

    const approval = await store.createApproval(
      {
        orgId: agent.orgId,
        agentId: agent.id,
        agentName: agent.name,
        toolName: target.hostname,
        action: ex.method,
        host: target.authority,
        path: target.path,
        query: ex.query,
        reasoning: ex.reasoning,
        taskId: ex.taskId,
        ruleMatched: ex.ruleMatched,
        bodySha256,
        bodyBytes: bytes.length,
        timeoutS: ex.decision!.approvalTimeoutS,
      },
      bytes.length > 0 ? bytes : null,
      deps.maxPending,
    );
    if (approval === undefined) return tooManyPending(ex, deps.maxPending, deps.metrics);
    created++;
    deps.webhook?.notify(approval);
    ex.approval = approval;
    if (ex.finished) return false;
    return wait(ex, approval, bytes.length);
  }

  /** The claim is the last await before the forward: nothing that can fail comes between using the approval and sending the call. */
  async function claim(ex: ProxyExchange): Promise<undefined | false> {
    const approval = ex.approval!;
    // A retry forwards the body that was held (its own matched its SHA-256), read
    // first; one dropped meanwhile (expired by another process's clock) leaves the
    // retry's own, the same bytes: never an empty body under the call's length.
    const stored = ex.approvalId !== null && ex.body !== null ? await store.approvalBody(approval.orgId, approval.id) : null;
    if (ex.finished) return false;
    let won = await store.useApproval(approval.orgId, approval.id);
    if (!won && !ex.finished) {
      const now = await store.getApproval(approval.orgId, approval.id);
      if (ex.finished) return false;
      // Given back meanwhile (returnUnsent: its call never went upstream): claimed again, once.
      if (now?.status === 'approved') won = await store.useApproval(approval.orgId, approval.id);
      // Lost the race (used), or expired meanwhile; never forwarded without the claim.
      if (!won) return ex.finished ? false : settle(ex, now !== undefined && (now.status === 'expired' || now.status === 'denied') ? now : { ...approval, status: 'used' });
    }
    if (ex.finished) {
      // Ended while claiming (client gone, shutdown, agent deleted): the call never went upstream.
      if (won) returnUnsent(ex);
      return false;
    }
    if (stored !== null) ex.body!.buffer = stored;
    ex.claimed = true;
    return undefined;
  }

  /**
   * A call whose claim won but which ended without undici writing it upstream
   * (the tool unreachable or refusing TLS, a header undici will not send, the
   * client gone first): its approval is approved again, not spent on a call the
   * tool never saw; the agent's retry forwards it.
   */
  function returnUnsent(ex: ProxyExchange): void {
    const approval = ex.approval!;
    store.returnApproval(approval.orgId, approval.id).then(
      (returned) => {
        if (returned) log.info('an approved call did not reach its tool; its approval is approved again', { approval_id: approval.id });
      },
      (err: unknown) => log.warn('an approved call did not reach its tool; its approval could not be given back and stays used', { approval_id: approval.id, err }),
    );
  }

  return {
    hold: (ex) => {
      if (ex.decision?.decision !== 'approve') return undefined;
      // Not an allowed call until approved: one that ends before (its client
      // leaves while its body arrives, shutdown) is audited denied.
      ex.auditDecision = 'denied';
      return hold(ex);
    },
    claim: (ex) => (ex.approved ? claim(ex) : undefined),
    /** At the call's end: gives its approval back when it never went upstream. */
    ended: (ex: ProxyExchange) => {
      if (ex.claimed && !ex.upstreamWritten) returnUnsent(ex);
    },
    held: {
      get size() {
        return size;
      },
      get created() {
        return created;
      },
      releaseAll() {
        closing = true;
        release(everyWaiting());
      },
      close: unsubscribe,
    },
  };
}

/**
 * The agent has APPROVAL_MAX_PENDING approvals waiting: a call that needs one more
 * is refused like a used-up rate limit, so that a looping agent cannot flood the
 * inbox and the webhook.
 */
function tooManyPending(ex: ProxyExchange, maxPending: number, metrics: Metrics | null): false {
  ex.ruleMatched = `${LIMIT_RULE_PREFIX}${PENDING_LIMIT}`;
  metrics?.recordRateLimited(PENDING_LIMIT, ex.agent!.id);
  ex.addAnswerHeader('retry-after', String(PENDING_RETRY_AFTER_S));
  return ex.answerError('rate_limited', `The agent has ${maxPending} approvals pending (APPROVAL_MAX_PENDING); decide or let some expire first.`, {
    limit: PENDING_LIMIT,
    retry_after: PENDING_RETRY_AFTER_S,
  });
}

const PENDING_RETRY_AFTER_S = 60;

/** The answer for a decided approval: approved goes on to be forwarded, anything else is refused. */
function settle(ex: ProxyExchange, approval: Approval): undefined | false {
  ex.approval = approval;
  switch (approval.status) {
    case 'approved':
      ex.approved = true;
      ex.auditDecision = 'allowed';
      // Whatever answers the call now (the upstream, or a limit), the agent learns which approval let it through.
      ex.addAnswerHeader(APPROVAL_ID_HEADER, approval.id);
      return undefined;
    case 'denied':
      // The approver's note when given; who denied it is for operators, not for the agent.
      return ex.answerError('approval_denied', approval.note || undefined); // an empty note is none
    case 'expired':
      return ex.answerError('approval_expired', `Approval ${approval.id} expired at ${approval.expiresAt}.`);
    case 'used':
      return ex.answerError('approval_used', `Approval ${approval.id} was already used for its call; a new call needs a new approval.`);
    case 'pending':
      // Not reached: callers wait on a pending approval instead.
      return ex.answerError('internal');
  }
}
