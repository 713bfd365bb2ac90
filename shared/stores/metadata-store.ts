// The metadata store: users, orgs, agents, credentials, policies, approvals. The domain is
// written once, here: records and their ids and timestamps, the contract's conflicts,
// the changes that invalidate cached entries and telling subscribers about them. The
// drivers (sqlite/, mongo/) do only I/O and transactions (metadata-driver.ts); every
// store made here passes test/integration/metadata-store.contract.ts.
import { randomUUID } from 'node:crypto';
import { GuardError } from '../errors.js';
import { hostOfAuthority, withDefaultPort } from '../target.js';
import {
  CRED_TYPES,
  LOG_OUTPUTS,
  type Agent,
  type Approval,
  type ApprovalStatus,
  type CredType,
  type Credential,
  type LogOutputs,
  type MetadataChange,
  type PolicyRecord,
  type SealedCredential,
  type User,
} from '../types.js';
import { MetadataChangeFeed, type ChangeFeed } from './change-feed.js';
import type { AgentRow, ApprovalRow, CredentialRow, MetadataDriver, PolicyRow, RateSync, RateSyncResult, SealHeadRow, StoredApprovalStatus, UserRow } from './metadata-driver.js';
import type { ChainHead } from '../audit/audit-verify.js';

/**
 * The most agents, and credentials, one organization may hold. GET /agents and
 * GET /credentials answer them all in one array, read in one query (with SQLite,
 * synchronously, on the event loop the proxy shares all-in-one), and signing up
 * is free: a million agents made one list take seconds and hundreds of MB.
 * 10,000 list in 50–90 ms (test/integration/admin-agents.test.ts).
 */
export const ORG_AGENTS_MAX = 10_000;
export const ORG_CREDENTIALS_MAX = 10_000;

function orgFull(what: 'agents' | 'credentials', max: number): GuardError {
  return new GuardError('conflict', `The organization has ${max.toLocaleString('en-US')} ${what}, the most allowed; delete one to create another.`, { limit: `${what}_per_org` });
}

export interface NewAgent {
  orgId: string;
  name: string;
  logOutputs: LogOutputs;
  keyHash: string; // hex SHA-256 of the full API key
  apiKeyPrefix: string;
}

export interface NewCredential {
  orgId: string;
  name: string;
  hostname: string;
  credType: CredType;
  headerName: string | null;
  queryParam: string | null;
  sealedValue: string;
}

/** A held call as the proxy records it; the store adds the id, status and times. */
export type NewApproval = Omit<Approval, 'id' | 'status' | 'createdAt' | 'expiresAt' | 'decidedAt' | 'decidedBy' | 'note'> & {
  /** The rule's approval_timeout: expires_at = created_at + this. */
  timeoutS: number;
};

export interface ApprovalFilter {
  status?: ApprovalStatus;
  agentId?: string;
  /** created_at in [createdSince, createdUntil) (ISO instants). */
  createdSince?: string;
  createdUntil?: string;
  limit: number;
}

export interface MetadataStore {
  /** Creates an org owned by a new user. Throws GuardError('conflict') when the email is taken. */
  createUserWithOrg(email: string, passwordHash: string): Promise<User>;
  findUserByEmail(email: string): Promise<User | undefined>;
  findUserById(id: string): Promise<User | undefined>;

  createAgent(agent: NewAgent): Promise<Agent>;
  /** The org's agents, oldest first. */
  listAgents(orgId: string): Promise<Agent[]>;
  /** undefined when the id is unknown or belongs to another org. */
  getAgent(orgId: string, agentId: string): Promise<Agent | undefined>;
  /** The hot path's key lookup (on a cache miss). */
  findAgentByKeyHash(keyHash: string): Promise<Agent | undefined>;
  /** Whether the agent exists (the proxy asks when it finds no policy: a deleted agent has none either). */
  agentExists(agentId: string): Promise<boolean>;
  /** Deletes the agent and its policy; false when not found in that org. */
  deleteAgent(orgId: string, agentId: string): Promise<boolean>;

  /** Throws GuardError('conflict') when the org already has a credential for the hostname. */
  createCredential(credential: NewCredential): Promise<Credential>;
  listCredentials(orgId: string): Promise<Credential[]>;
  deleteCredential(orgId: string, credentialId: string): Promise<boolean>;
  /** The credential the proxy injects for (org, hostname[:port]), with its sealed value. */
  /**
   * The credential injected for a target authority (`host` for port 443,
   * `host:port` otherwise): the one written with that port, else the host's
   * credential without a port, which matches every port.
   */
  findCredentialForHost(orgId: string, authority: string): Promise<SealedCredential | undefined>;
  /** Any one stored credential, with its sealed value. */
  anyCredential(): Promise<SealedCredential | undefined>;

  getPolicy(agentId: string): Promise<PolicyRecord | undefined>;
  /** Throws GuardError('not_found') when the agent does not exist (e.g. deleted meanwhile). */
  setPolicy(agentId: string, rulesYaml: string): Promise<PolicyRecord>;

  /**
   * Records a held call (pending) with its body (null: none); undefined, and
   * nothing recorded, when its agent already has `maxPending` pending approvals.
   */
  createApproval(approval: NewApproval, body: Buffer | null, maxPending?: number): Promise<Approval | undefined>;
  /** undefined when the id is unknown or belongs to another org. */
  getApproval(orgId: string, id: string): Promise<Approval | undefined>;
  approvalBody(orgId: string, id: string): Promise<Buffer | null>;
  /** Newest first. */
  listApprovals(orgId: string, filter: ApprovalFilter): Promise<Approval[]>;
  /**
   * A person's decision on a pending approval: the approval as decided. Throws
   * GuardError('not_found') when the org has no such approval and
   * GuardError('conflict') when it is no longer pending (the first decision stands).
   * Publishes an `approval` change, which reaches a proxy holding the call.
   */
  decideApproval(orgId: string, id: string, verdict: 'approved' | 'denied', decidedBy: string, note: string | null): Promise<Approval>;
  /** approved → used, once: true for exactly one caller, false when not approved or expired. */
  useApproval(orgId: string, id: string): Promise<boolean>;
  /**
   * used → approved again, for a call whose claim won but which never went
   * upstream (nothing was written to it): the approval is not spent. False when
   * it is not used. Its body stays dropped: a retry forwards its own, which
   * must match the held one's SHA-256.
   */
  returnApproval(orgId: string, id: string): Promise<boolean>;

  /** Changes that invalidate cached agents, policies or credentials, and approval decisions. */
  readonly changes: ChangeFeed;

  /** Rate limits across proxies (MetadataDriver.syncRateCounts); StoreUnavailableError when the store cannot be reached. */
  syncRateCounts(sync: RateSync): Promise<RateSyncResult>;

  /**
   * Audit chain heads, kept apart from ClickHouse so that a chain cut short there
   * shows (shared/audit/audit-verify.ts): each moves only forward.
   */
  recordSealHeads(heads: readonly SealHeadRow[]): Promise<void>;
  listSealHeads(orgId: string): Promise<ChainHead[]>;
  /** Every org with a recorded chain head: an offline verification checks these too, even with no row left in ClickHouse. */
  sealHeadOrgs(): Promise<string[]>;
  /** When this deployment began to seal audit batches: older entries without a batch id are legacy. */
  sealingSince(): Promise<Date | null>;
  /** When the org was created; null for no such org. An entry dated earlier was not written by the guard. */
  orgCreatedAt(orgId: string): Promise<Date | null>;

  /** Cheap round-trip used by readiness checks; GuardError('unavailable') when it fails. */
  ping(): Promise<void>;
  /** Stops the change feed and closes the driver. Idempotent. */
  close(): Promise<void>;
}

export function createMetadataStore(driver: MetadataDriver): MetadataStore {
  const changes = new MetadataChangeFeed(driver);

  return {
    changes,

    async createUserWithOrg(email, passwordHash) {
      const user: User = { id: randomUUID(), orgId: randomUUID(), email, passwordHash, createdAt: now() };
      const outcome = await driver.insertUserWithOrg(
        // The org is named after its owner's email until orgs can be renamed.
        { id: user.orgId, name: user.email, created_at: user.createdAt },
        { id: user.id, org_id: user.orgId, email, password_hash: passwordHash, created_at: user.createdAt },
      );
      if (outcome === 'unique_violation') throw new GuardError('conflict', 'An account with that email already exists.');
      return user;
    },

    findUserByEmail: async (email) => mapped(await driver.userByEmail(email), toUser),
    findUserById: async (id) => mapped(await driver.userById(id), toUser),

    async createAgent(agent) {
      const created: Agent = {
        id: randomUUID(),
        orgId: agent.orgId,
        name: agent.name,
        apiKeyPrefix: agent.apiKeyPrefix,
        logOutputs: oneOf(LOG_OUTPUTS, agent.logOutputs, 'logOutputs'),
        createdAt: now(),
      };
      const outcome = await driver.insertAgent({
        id: created.id,
        org_id: created.orgId,
        name: created.name,
        log_outputs: created.logOutputs,
        key_hash: agent.keyHash,
        api_key_prefix: created.apiKeyPrefix,
        created_at: created.createdAt,
      }, ORG_AGENTS_MAX);
      if (outcome === 'org_full') throw orgFull('agents', ORG_AGENTS_MAX);
      return created;
    },

    listAgents: async (orgId) => (await driver.agentsByOrg(orgId)).map(toAgent),
    getAgent: async (orgId, agentId) => mapped(await driver.agentInOrg(orgId, agentId), toAgent),
    findAgentByKeyHash: async (keyHash) => mapped(await driver.agentByKeyHash(keyHash), toAgent),
    agentExists: async (agentId) => driver.agentExists(agentId),

    async deleteAgent(orgId, agentId) {
      const change = await driver.deleteAgentInOrg(orgId, agentId, (keyHash) => ({ kind: 'agent', agentId, keyHash }));
      if (change === undefined) return false;
      changes.publish(change);
      return true;
    },

    async createCredential(credential) {
      const created: Credential = {
        id: randomUUID(),
        orgId: credential.orgId,
        name: credential.name,
        hostname: credential.hostname,
        credType: oneOf(CRED_TYPES, credential.credType, 'credType'),
        headerName: credential.headerName,
        queryParam: credential.queryParam,
        createdAt: now(),
      };
      // A proxy may hold a cached "no credential for this host".
      const change: MetadataChange = { kind: 'credential', orgId: created.orgId, hostname: created.hostname };
      const outcome = await driver.insertCredential(
        {
          id: created.id,
          org_id: created.orgId,
          name: created.name,
          hostname: created.hostname,
          cred_type: created.credType,
          header_name: created.headerName,
          query_param: created.queryParam,
          sealed_value: credential.sealedValue,
          created_at: created.createdAt,
        },
        change,
        ORG_CREDENTIALS_MAX,
      );
      if (outcome === 'unique_violation') throw new GuardError('conflict', 'A credential for that hostname already exists.');
      if (outcome === 'org_full') throw orgFull('credentials', ORG_CREDENTIALS_MAX);
      changes.publish(change);
      return created;
    },

    listCredentials: async (orgId) => (await driver.credentialsByOrg(orgId)).map(toCredential),

    async deleteCredential(orgId, credentialId) {
      const change = await driver.deleteCredentialInOrg(orgId, credentialId, (hostname) => ({ kind: 'credential', orgId, hostname }));
      if (change === undefined) return false;
      changes.publish(change);
      return true;
    },

    async findCredentialForHost(orgId, authority) {
      // The one for this host and port wins (`host:443` for a target on the
      // default port, which its authority leaves unwritten); else the host's
      // portless one, which covers every port.
      const host = hostOfAuthority(authority);
      const row = (await driver.credentialForHost(orgId, withDefaultPort(authority))) ?? (await driver.credentialForHost(orgId, host));
      return row && { ...toCredential(row), sealedValue: row.sealed_value };
    },

    async anyCredential() {
      const row = await driver.anyCredential();
      return row && { ...toCredential(row), sealedValue: row.sealed_value };
    },

    getPolicy: async (agentId) => mapped(await driver.policyByAgent(agentId), toPolicy),

    async setPolicy(agentId, rulesYaml) {
      const policy: PolicyRecord = { agentId, rulesYaml, updatedAt: now() };
      const change: MetadataChange = { kind: 'policy', agentId };
      const outcome = await driver.upsertPolicy({ agent_id: agentId, rules_yaml: rulesYaml, updated_at: policy.updatedAt }, change);
      if (outcome === 'missing_parent') throw new GuardError('not_found', 'Agent not found.');
      changes.publish(change);
      return policy;
    },

    async createApproval(approval, body, maxPending = Number.MAX_SAFE_INTEGER) {
      const createdAt = new Date();
      const { timeoutS, ...fields } = approval;
      const row: ApprovalRow = {
        id: randomUUID(),
        org_id: fields.orgId,
        agent_id: fields.agentId,
        agent_name: fields.agentName,
        tool_name: fields.toolName,
        action: fields.action,
        host: fields.host,
        path: fields.path,
        query: fields.query,
        reasoning: fields.reasoning,
        task_id: fields.taskId,
        rule_matched: fields.ruleMatched,
        status: 'pending',
        created_at: createdAt.toISOString(),
        expires_at: new Date(createdAt.getTime() + timeoutS * 1000).toISOString(),
        decided_at: null,
        decided_by: null,
        note: null,
        body_sha256: fields.bodySha256,
        body_bytes: fields.bodyBytes,
      };
      if ((await driver.insertApproval(row, body, maxPending)) === 'too_many') return undefined;
      return toApproval(row, createdAt.toISOString());
    },

    getApproval: async (orgId, id) => mapped(await driver.approvalInOrg(orgId, id), (row) => toApproval(row, now())),
    approvalBody: async (orgId, id) => driver.approvalBody(orgId, id),

    async listApprovals(orgId, filter) {
      const at = now();
      const status = filter.status;
      const rows = await driver.approvals({
        org_id: orgId,
        // `expired` is not stored: a pending or approved row past its expires_at.
        statuses: status === undefined ? null : status === 'expired' ? ['pending', 'approved'] : [status],
        expires_after: status === 'pending' || status === 'approved' ? at : null,
        expired_by: status === 'expired' ? at : null,
        agent_id: filter.agentId ?? null,
        created_since: filter.createdSince ?? null,
        created_until: filter.createdUntil ?? null,
        limit: filter.limit,
      });
      return rows.map((row) => toApproval(row, at));
    },

    async decideApproval(orgId, id, verdict, decidedBy, note) {
      const change: MetadataChange = { kind: 'approval', orgId, approvalId: id };
      const at = now();
      const outcome = await driver.decideApproval(orgId, id, { status: verdict, decided_at: at, decided_by: decidedBy, note, now: at }, change);
      if (outcome === 'missing') throw new GuardError('not_found', 'Approval not found.');
      // Told before anything else can fail: a call held in this process waits on it.
      if (outcome === 'written') changes.publish(change);
      const row = await driver.approvalInOrg(orgId, id);
      if (row === undefined) throw new GuardError('not_found', 'Approval not found.');
      const approval = toApproval(row, now());
      if (outcome === 'not_pending') throw new GuardError('conflict', `The approval is ${approval.status}; only a pending one can be decided.`, { status: approval.status });
      return approval;
    },

    useApproval: async (orgId, id) => driver.useApproval(orgId, id, now()),
    returnApproval: async (orgId, id) => driver.returnApproval(orgId, id),

    syncRateCounts: async (sync) => driver.syncRateCounts(sync),

    recordSealHeads: async (heads) => driver.recordSealHeads(heads),
    sealingSince: async () => {
      const at = await driver.sealingStartedAt();
      return at === null ? null : new Date(at);
    },
    orgCreatedAt: async (orgId) => {
      const at = await driver.orgCreatedAt(orgId.toLowerCase());
      return at === null ? null : new Date(at);
    },
    listSealHeads: async (orgId) => (await driver.sealHeads(orgId)).map((h) => ({ writer: h.writer, seq: h.seq, sealHash: h.seal_hash })),
    sealHeadOrgs: async () => driver.sealHeadOrgs(),

    async ping() {
      try {
        await driver.ping();
      } catch {
        throw new GuardError('unavailable', 'The metadata database is not available.');
      }
    },

    async close() {
      changes.stop();
      await driver.close();
    },
  };
}

function now(): string {
  return new Date().toISOString();
}

function mapped<R, T>(row: R | undefined, map: (row: R) => T): T | undefined {
  return row === undefined ? undefined : map(row);
}

/**
 * The read mappers below trust the stored enums (SQLite CHECK constraints, MongoDB
 * validators); this keeps a value the types forbid from reaching either.
 */
function oneOf<T extends string>(allowed: readonly T[], value: T, field: string): T {
  if (!allowed.includes(value)) throw new RangeError(`${field} must be one of ${allowed.join(', ')}, not ${JSON.stringify(value)}`);
  return value;
}

function toUser(row: UserRow): User {
  return { id: row.id, orgId: row.org_id, email: row.email, passwordHash: row.password_hash, createdAt: row.created_at };
}

function toAgent(row: AgentRow): Agent {
  return {
    id: row.id,
    orgId: row.org_id,
    name: row.name,
    apiKeyPrefix: row.api_key_prefix,
    logOutputs: row.log_outputs as LogOutputs,
    createdAt: row.created_at,
  };
}

function toCredential(row: CredentialRow): Credential {
  return {
    id: row.id,
    orgId: row.org_id,
    name: row.name,
    hostname: row.hostname,
    credType: row.cred_type as CredType,
    // A MongoDB document written without the field reads as missing, not null.
    headerName: row.header_name ?? null,
    queryParam: row.query_param ?? null,
    createdAt: row.created_at,
  };
}

/** `at`: the instant the status is computed for (a pending or approved row past its expiry reads `expired`). */
function toApproval(row: ApprovalRow, at: string): Approval {
  const stored = oneOf(STORED_APPROVAL_STATUSES, row.status, 'status');
  return {
    id: row.id,
    orgId: row.org_id,
    agentId: row.agent_id,
    agentName: row.agent_name,
    toolName: row.tool_name,
    action: row.action,
    host: row.host,
    path: row.path,
    query: row.query,
    reasoning: row.reasoning,
    taskId: row.task_id,
    ruleMatched: row.rule_matched,
    status: (stored === 'pending' || stored === 'approved') && row.expires_at <= at ? 'expired' : stored,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    decidedAt: row.decided_at ?? null,
    decidedBy: row.decided_by ?? null,
    note: row.note ?? null,
    bodySha256: row.body_sha256,
    bodyBytes: Number(row.body_bytes),
  };
}

const STORED_APPROVAL_STATUSES: readonly StoredApprovalStatus[] = ['pending', 'approved', 'denied', 'used'];

function toPolicy(row: PolicyRow): PolicyRecord {
  return { agentId: row.agent_id, rulesYaml: row.rules_yaml, updatedAt: row.updated_at };
}
