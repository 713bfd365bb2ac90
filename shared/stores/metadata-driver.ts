// What a metadata driver does for the core (metadata-store.ts): I/O and transactions,
// nothing else. The core builds every record, id, timestamp and change, maps rows to
// records and refusals to the contract's errors, and tells subscribers; a driver
// stores rows, appends each change to its change log in the transaction of the write
// that made it, reports the refusals the contract names as values, and throws
// StoreUnavailableError (store-boundary.ts) when its database cannot be reached.
//
// Rows carry the SQLite columns' snake_case names, which the MongoDB documents share
// (with `_id` for `id`). SQLite answers synchronously and MongoDB with promises: the
// core awaits either.
import type { MetadataChange } from '../types.js';
import type { ChangeEntry, ChangeLog } from './change-feed.js';

type Awaitable<T> = T | Promise<T>;

export interface OrgRow {
  id: string;
  name: string;
  created_at: string;
}

export interface UserRow {
  id: string;
  org_id: string;
  email: string;
  password_hash: string;
  created_at: string;
}

export interface AgentRow {
  id: string;
  org_id: string;
  name: string;
  log_outputs: string;
  api_key_prefix: string;
  created_at: string;
}

/** The key hash is written, and looked up by, but never read back. */
export interface NewAgentRow extends AgentRow {
  key_hash: string;
}

export interface CredentialRow {
  id: string;
  org_id: string;
  name: string;
  hostname: string;
  cred_type: string;
  header_name: string | null;
  query_param: string | null;
  created_at: string;
}

export interface SealedCredentialRow extends CredentialRow {
  sealed_value: string;
}

export interface PolicyRow {
  agent_id: string;
  rules_yaml: string;
  updated_at: string;
}

/** A change as the log holds it: one nullable column for each field of any kind. */
export interface ChangeRow {
  kind: string;
  agent_id: string | null;
  key_hash: string | null;
  org_id: string | null;
  hostname: string | null;
  approval_id: string | null;
}

/** Stored approval statuses; `expired` is computed from expires_at by the core. */
export type StoredApprovalStatus = 'pending' | 'approved' | 'denied' | 'used';

/** The last seal of one audit chain (org, writer) known to have landed (shared/audit/seal.ts). */
export interface SealHeadRow {
  org_id: string;
  writer: string;
  seq: number;
  seal_hash: string;
  at: string;
}

export interface ApprovalRow {
  id: string;
  org_id: string;
  agent_id: string;
  agent_name: string;
  tool_name: string;
  action: string;
  host: string;
  path: string;
  query: string;
  reasoning: string;
  task_id: string;
  rule_matched: string;
  status: StoredApprovalStatus;
  created_at: string;
  expires_at: string;
  decided_at: string | null;
  decided_by: string | null;
  note: string | null;
  body_sha256: string;
  body_bytes: number;
}

/** Which of an org's approvals to list, newest first (the core turns a status into this). */
export interface ApprovalQuery {
  org_id: string;
  /** Stored statuses to include (one or two). */
  statuses: readonly StoredApprovalStatus[] | null;
  /** Only rows whose expires_at is after this ISO instant (not expired), or at/before it (expired). */
  expires_after: string | null;
  expired_by: string | null;
  agent_id: string | null;
  /** created_at in [created_since, created_until). */
  created_since: string | null;
  created_until: string | null;
  limit: number;
}

/** A decision: the row moves from pending (and unexpired at `now`) to `status`. */
export interface ApprovalDecision {
  status: 'approved' | 'denied';
  decided_at: string;
  decided_by: string;
  note: string | null;
  /** ISO instant: a row expiring at or before it is no longer pending. */
  now: string;
}

/** A rate-limit counter's count in one slot: added up across proxies by the store. */
export interface RateCountRow {
  limit_key: string;
  agent_id: string;
  slot: number;
  count: number;
  /** Epoch ms after which the row counts nowhere and may be deleted. */
  expires_at: number;
}

/** One proxy's rate-limit sync: its heartbeat, the counts it adds, and what it reads back. */
export interface RateSync {
  node_id: string;
  /** Epoch ms (the heartbeat and the expiry cut-off). */
  now: number;
  /** Nodes whose heartbeat is older than this (epoch ms) are not live. */
  live_after: number;
  /** Added to the rows' counts (a row is created at its first count). */
  add: RateCountRow[];
  /** Rows changed at or after this (epoch ms) are read back, with their totals. */
  changed_since: number;
}

export interface RateSyncResult {
  /** Live node ids, sorted. */
  nodes: string[];
  /** Totals of the rows changed since `changed_since` and not expired. */
  rows: RateCountRow[];
}

/** The refusals the contract answers with its own errors; anything else is thrown. */
export type Refusal = 'unique_violation' | 'missing_parent' | 'org_full';

export interface MetadataDriver extends ChangeLog {
  /** Both rows in one transaction; 'unique_violation' (and neither row kept) when the email is taken. */
  insertUserWithOrg(org: OrgRow, user: UserRow): Awaitable<'written' | 'unique_violation'>;
  userByEmail(email: string): Awaitable<UserRow | undefined>;
  userById(id: string): Awaitable<UserRow | undefined>;

  /**
   * 'org_full' (and nothing written) when the org has `maxInOrg` agents. A
   * duplicate key hash (a 240-bit collision) is thrown as the driver's own error.
   */
  insertAgent(row: NewAgentRow, maxInOrg: number): Awaitable<'written' | 'org_full'>;
  /** Oldest first; agents created in one millisecond in the order they were inserted. */
  agentsByOrg(orgId: string): Awaitable<AgentRow[]>;
  agentInOrg(orgId: string, agentId: string): Awaitable<AgentRow | undefined>;
  agentByKeyHash(keyHash: string): Awaitable<AgentRow | undefined>;
  agentExists(agentId: string): Awaitable<boolean>;
  /**
   * Deletes the org's agent and its policy and appends `changeOf(its key hash)`, in one
   * transaction. The change it appended, or undefined when the org has no such agent.
   */
  deleteAgentInOrg(orgId: string, agentId: string, changeOf: (keyHash: string) => MetadataChange): Awaitable<MetadataChange | undefined>;

  /** The row and `change` in one transaction; 'unique_violation' when the org has the hostname, 'org_full' when it has `maxInOrg` credentials. */
  insertCredential(row: SealedCredentialRow, change: MetadataChange, maxInOrg: number): Awaitable<'written' | 'unique_violation' | 'org_full'>;
  /** Oldest first, as agentsByOrg. */
  credentialsByOrg(orgId: string): Awaitable<CredentialRow[]>;
  credentialForHost(orgId: string, hostname: string): Awaitable<SealedCredentialRow | undefined>;
  /** Any one stored credential (the start checks that SECRET_KEY opens it). */
  anyCredential(): Awaitable<SealedCredentialRow | undefined>;
  /** As deleteAgentInOrg, with the credential's hostname. */
  deleteCredentialInOrg(orgId: string, credentialId: string, changeOf: (hostname: string) => MetadataChange): Awaitable<MetadataChange | undefined>;

  policyByAgent(agentId: string): Awaitable<PolicyRow | undefined>;
  /** Inserts or replaces the policy and appends `change`, in one transaction; 'missing_parent' when the agent does not exist. */
  upsertPolicy(row: PolicyRow, change: MetadataChange): Awaitable<'written' | 'missing_parent'>;

  /**
   * The row and its held body (null: none) in one write, unless the agent already
   * has `maxPending` approvals pending and unexpired at `row.created_at`:
   * 'too_many' then, and nothing written. Atomic on SQLite; on MongoDB a burst
   * may pass the bound by the writes in flight.
   */
  insertApproval(row: ApprovalRow, body: Buffer | null, maxPending: number): Awaitable<'written' | 'too_many'>;
  approvalInOrg(orgId: string, id: string): Awaitable<ApprovalRow | undefined>;
  /** The held body; null when the call had none (or the approval is unknown). */
  approvalBody(orgId: string, id: string): Awaitable<Buffer | null>;
  /** Newest first; ties in creation time in insertion order, reversed. */
  approvals(query: ApprovalQuery): Awaitable<ApprovalRow[]>;
  /**
   * Records the decision and appends `change` in one transaction, only when the row
   * is pending and not expired: 'written', 'missing' (no such row in the org) or
   * 'not_pending'. Of two racing deciders exactly one writes.
   */
  decideApproval(orgId: string, id: string, decision: ApprovalDecision, change: MetadataChange): Awaitable<'written' | 'missing' | 'not_pending'>;
  /**
   * approved → used, only when approved and expiring after `now`; false otherwise.
   * Atomic: of two retries racing through any processes exactly one gets true.
   */
  useApproval(orgId: string, id: string, now: string): Awaitable<boolean>;
  /** used → approved again (its call never went upstream); false when it is not used. */
  returnApproval(orgId: string, id: string): Awaitable<boolean>;

  /**
   * Rate limits across proxies: renews the node's heartbeat, adds its counts and
   * reads back the changed totals, in one transaction (SQLite) or in order
   * (MongoDB: each add is atomic); drops expired rows now and then.
   */
  syncRateCounts(sync: RateSync): Awaitable<RateSyncResult>;

  /** Moves each chain's head forward (never back: a head with a lower seq than the stored one is ignored). */
  recordSealHeads(heads: readonly SealHeadRow[]): Awaitable<void>;
  sealHeads(orgId: string): Awaitable<SealHeadRow[]>;
  /** Every org with a recorded chain head. */
  sealHeadOrgs(): Awaitable<string[]>;
  /** When this database began to seal audit batches (ISO); null when unknown. */
  sealingStartedAt(): Awaitable<string | null>;
  /** When the org was created (ISO); null for no such org. */
  orgCreatedAt(orgId: string): Awaitable<string | null>;

  /** One cheap round-trip. */
  ping(): Awaitable<void>;
  /** Idempotent. */
  close(): Awaitable<void>;
}

export function changeRow(change: MetadataChange): ChangeRow {
  const row: ChangeRow = { kind: change.kind, agent_id: null, key_hash: null, org_id: null, hostname: null, approval_id: null };
  switch (change.kind) {
    case 'agent':
      row.agent_id = change.agentId;
      row.key_hash = change.keyHash;
      break;
    case 'policy':
      row.agent_id = change.agentId;
      break;
    case 'credential':
      row.org_id = change.orgId;
      row.hostname = change.hostname;
      break;
    case 'approval':
      row.org_id = change.orgId;
      row.approval_id = change.approvalId;
      break;
  }
  return row;
}

/** Throws on a row no writer of this schema makes: the log is then not ours to guess at. */
export function changeEntry(seq: number, row: ChangeRow): ChangeEntry {
  const { kind, agent_id: agentId, key_hash: keyHash, org_id: orgId, hostname, approval_id: approvalId } = row;
  if (kind === 'agent' && typeof agentId === 'string' && typeof keyHash === 'string') {
    return { seq, change: { kind, agentId, keyHash } };
  }
  if (kind === 'policy' && typeof agentId === 'string') return { seq, change: { kind, agentId } };
  if (kind === 'credential' && typeof orgId === 'string' && typeof hostname === 'string') {
    return { seq, change: { kind, orgId, hostname } };
  }
  if (kind === 'approval' && typeof orgId === 'string' && typeof approvalId === 'string') {
    return { seq, change: { kind, orgId, approvalId } };
  }
  throw new Error(`Malformed change row ${seq} of kind ${kind}.`);
}
