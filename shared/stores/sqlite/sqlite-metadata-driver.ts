// The metadata driver over one SQLite file (better-sqlite3). Several processes on one
// machine may open the same file (split mode without MongoDB), so the file runs in
// WAL mode with a busy timeout, every write transaction is BEGIN IMMEDIATE, and every
// change that can invalidate a proxy's cache is also appended to the `changes` table
// for other processes to poll (`changesSince`).
//
// The work is synchronous, and so are the methods: the core awaits them either way.
// Every statement is prepared once, at open.
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { MetadataChange } from '../../types.js';
import type { ChangeEntry } from '../change-feed.js';
import {
  changeEntry,
  changeRow,
  type AgentRow,
  type ApprovalDecision,
  type ApprovalQuery,
  type ApprovalRow,
  type ChangeRow,
  type CredentialRow,
  type MetadataDriver,
  type NewAgentRow,
  type OrgRow,
  type PolicyRow,
  type RateCountRow,
  type RateSync,
  type RateSyncResult,
  type SealedCredentialRow,
  type SealHeadRow,
  type UserRow,
} from '../metadata-driver.js';
import { guardBoundary, unreachableClassifier } from '../store-boundary.js';

/**
 * The schema, one entry per version, applied in order. `PRAGMA user_version` holds how
 * many have been applied. Never edit an entry once released: append a new one.
 */
const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE orgs (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at TEXT NOT NULL
  ) STRICT;

  CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    org_id        TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    email         TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    created_at    TEXT NOT NULL
  ) STRICT;
  CREATE INDEX users_by_org ON users (org_id);

  -- key_hash UNIQUE is also the index of the proxy's key lookup.
  CREATE TABLE agents (
    id             TEXT PRIMARY KEY,
    org_id         TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    log_outputs    TEXT NOT NULL CHECK (log_outputs IN ('full', 'hash', 'none')),
    key_hash       TEXT NOT NULL UNIQUE,
    api_key_prefix TEXT NOT NULL,
    created_at     TEXT NOT NULL
  ) STRICT;
  CREATE INDEX agents_by_org_created ON agents (org_id, created_at);

  -- UNIQUE (org_id, hostname) is also the index of the injection lookup.
  CREATE TABLE credentials (
    id           TEXT PRIMARY KEY,
    org_id       TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    hostname     TEXT NOT NULL,
    cred_type    TEXT NOT NULL CHECK (cred_type IN ('bearer', 'header', 'query')),
    header_name  TEXT,
    query_param  TEXT,
    sealed_value TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    UNIQUE (org_id, hostname)
  ) STRICT;
  CREATE INDEX credentials_by_org_created ON credentials (org_id, created_at);

  CREATE TABLE policies (
    agent_id   TEXT PRIMARY KEY REFERENCES agents (id) ON DELETE CASCADE,
    rules_yaml TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;

  -- Cache invalidations for other processes. AUTOINCREMENT keeps seq increasing even
  -- after pruning; SQLite has one writer at a time, so seq order is commit order and a
  -- poller that remembers the last seq it saw never skips a later commit.
  CREATE TABLE changes (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    kind     TEXT NOT NULL CHECK (kind IN ('agent', 'policy', 'credential')),
    agent_id TEXT,
    key_hash TEXT,
    org_id   TEXT,
    hostname TEXT,
    at       TEXT NOT NULL
  ) STRICT;
  CREATE INDEX changes_by_at ON changes (at);
  `,
  `
  -- Rate-limit counts of every proxy added up, per (limit, agent, slot).
  CREATE TABLE rate_counts (
    limit_key  TEXT NOT NULL,
    agent_id   TEXT NOT NULL,
    slot       INTEGER NOT NULL,
    count      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (limit_key, agent_id, slot)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX rate_counts_by_updated ON rate_counts (updated_at);
  CREATE INDEX rate_counts_by_expiry ON rate_counts (expires_at);

  -- Proxies that share rate limits, and when each last synced.
  CREATE TABLE rate_nodes (
    node_id TEXT PRIMARY KEY,
    seen_at INTEGER NOT NULL
  ) STRICT;
  `,
  `
  -- Held calls and their decisions. agent_id is not a foreign key: an approval
  -- outlives its agent's deletion as the audit entries do. body is the held
  -- request body (at most 1 MiB), for the forward after a 202.
  CREATE TABLE approvals (
    id           TEXT PRIMARY KEY,
    org_id       TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    agent_id     TEXT NOT NULL,
    agent_name   TEXT NOT NULL,
    tool_name    TEXT NOT NULL,
    action       TEXT NOT NULL,
    host         TEXT NOT NULL,
    path         TEXT NOT NULL,
    query        TEXT NOT NULL,
    reasoning    TEXT NOT NULL,
    task_id      TEXT NOT NULL,
    rule_matched TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'used')),
    created_at   TEXT NOT NULL,
    expires_at   TEXT NOT NULL,
    decided_at   TEXT,
    decided_by   TEXT,
    note         TEXT,
    used_at      TEXT,
    body_sha256  TEXT NOT NULL,
    body_bytes   INTEGER NOT NULL,
    body         BLOB            -- dropped once used or denied
  ) STRICT;
  CREATE INDEX approvals_by_org_created ON approvals (org_id, created_at);
  CREATE INDEX approvals_by_agent_status ON approvals (agent_id, status, expires_at);

  -- The change log learns the 'approval' kind (a decision for a proxy holding the
  -- call). SQLite cannot alter a CHECK, so the table is rebuilt; its seq carries on
  -- from the highest ever issued, pruned rows included, so no follower skips one.
  CREATE TABLE changes_v3 (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL CHECK (kind IN ('agent', 'policy', 'credential', 'approval')),
    agent_id    TEXT,
    key_hash    TEXT,
    org_id      TEXT,
    hostname    TEXT,
    approval_id TEXT,
    at          TEXT NOT NULL
  ) STRICT;
  INSERT INTO changes_v3 (seq, kind, agent_id, key_hash, org_id, hostname, at)
    SELECT seq, kind, agent_id, key_hash, org_id, hostname, at FROM changes;
  DELETE FROM sqlite_sequence WHERE name = 'changes_v3';
  INSERT INTO sqlite_sequence (name, seq) SELECT 'changes_v3', seq FROM sqlite_sequence WHERE name = 'changes';
  DROP TABLE changes;
  ALTER TABLE changes_v3 RENAME TO changes;
  CREATE INDEX changes_by_at ON changes (at);
  `,
  // v4: audit chain heads (shared/audit/seal.ts), outside ClickHouse.
  `
  CREATE TABLE seal_heads (
    org_id    TEXT NOT NULL,
    writer    TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    seal_hash TEXT NOT NULL,
    at        TEXT NOT NULL,
    PRIMARY KEY (org_id, writer)
  ) STRICT;
  -- When this database began to seal audit batches: entries older than this
  -- without a batch id are legacy (shared/audit/audit-verify.ts).
  CREATE TABLE audit_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
  ) STRICT;
  INSERT INTO audit_meta (key, value) VALUES ('sealing_started_at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
  `,
  // v5: the held bodies of expired approvals are dropped (no call can use them
  // any more); this index finds them without a scan.
  `
  CREATE INDEX approvals_holding_body ON approvals (expires_at) WHERE body IS NOT NULL;
  `,
  // v6: listing by one status (the console's inbox and every PDF ask for the
  // pending ones) walked every approval of the org newest first, reading each
  // row, with its reasoning of up to 16 KiB, for its status: 0.2-0.6 s at 50,000
  // decided. In this index's order (the rowid last) the newest of a status come first.
  `
  CREATE INDEX approvals_by_org_status_created ON approvals (org_id, status, created_at);
  `,
];

/** The schema version this code writes; a file with a higher one is refused. */
export const SCHEMA_VERSION = MIGRATIONS.length;

/** How long a change row is kept for pollers. */
const CHANGE_RETENTION_MS = 60 * 60 * 1000;

/** The approvals of an org, newest first, with the optional filters; `status` adds the test by status. */
export function approvalsSql(status: string): string {
  return `SELECT ${APPROVAL_COLUMNS} FROM approvals
       WHERE org_id = @org_id ${status}
         AND (@expires_after IS NULL OR expires_at > @expires_after)
         AND (@expired_by IS NULL OR expires_at <= @expired_by)
         AND (@agent_id IS NULL OR agent_id = @agent_id)
         AND (@created_since IS NULL OR created_at >= @created_since)
         AND (@created_until IS NULL OR created_at < @created_until)
       ORDER BY created_at DESC, rowid DESC LIMIT @limit`;
}

/** Pruning runs inside a write transaction, at most this often per process. */
const CHANGE_PRUNE_INTERVAL_MS = 60 * 1000;
/** Expired rate counts and long-gone nodes are deleted at most this often per process. */
const RATE_PRUNE_INTERVAL_MS = 10 * 1000;
const RATE_NODE_RETENTION_MS = 60 * 60 * 1000;
/** How long a statement waits for another process's write lock before SQLITE_BUSY. */
const BUSY_TIMEOUT_MS = 5000;

const AGENT_COLUMNS = 'id, org_id, name, log_outputs, api_key_prefix, created_at';
const CREDENTIAL_COLUMNS = 'id, org_id, name, hostname, cred_type, header_name, query_param, created_at';
const APPROVAL_COLUMNS =
  'id, org_id, agent_id, agent_name, tool_name, action, host, path, query, reasoning, task_id, rule_matched, status, created_at, expires_at, decided_at, decided_by, note, body_sha256, body_bytes';

function prepareStatements(db: Database.Database) {
  return {
    insertOrg: db.prepare<[OrgRow]>('INSERT INTO orgs (id, name, created_at) VALUES (@id, @name, @created_at)'),
    insertUser: db.prepare<[UserRow]>(
      'INSERT INTO users (id, org_id, email, password_hash, created_at) VALUES (@id, @org_id, @email, @password_hash, @created_at)',
    ),
    userByEmail: db.prepare<[email: string], UserRow>(
      'SELECT id, org_id, email, password_hash, created_at FROM users WHERE email = ?',
    ),
    userById: db.prepare<[id: string], UserRow>(
      'SELECT id, org_id, email, password_hash, created_at FROM users WHERE id = ?',
    ),

    insertAgent: db.prepare<[NewAgentRow]>(
      `INSERT INTO agents (id, org_id, name, log_outputs, key_hash, api_key_prefix, created_at)
       VALUES (@id, @org_id, @name, @log_outputs, @key_hash, @api_key_prefix, @created_at)`,
    ),
    agentsInOrg: db.prepare<[orgId: string], { n: number }>('SELECT count(*) AS n FROM agents WHERE org_id = ?'),
    agentsByOrg: db.prepare<[orgId: string], AgentRow>(
      `SELECT ${AGENT_COLUMNS} FROM agents WHERE org_id = ? ORDER BY created_at, rowid`,
    ),
    agentInOrg: db.prepare<[orgId: string, id: string], AgentRow>(
      `SELECT ${AGENT_COLUMNS} FROM agents WHERE org_id = ? AND id = ?`,
    ),
    agentByKeyHash: db.prepare<[keyHash: string], AgentRow>(
      `SELECT ${AGENT_COLUMNS} FROM agents WHERE key_hash = ?`,
    ),
    agentExists: db.prepare<[id: string], { one: number }>('SELECT 1 AS one FROM agents WHERE id = ?'),
    agentKeyHashInOrg: db.prepare<[orgId: string, id: string], { key_hash: string }>(
      'SELECT key_hash FROM agents WHERE org_id = ? AND id = ?',
    ),
    deleteAgent: db.prepare<[id: string]>('DELETE FROM agents WHERE id = ?'),

    insertCredential: db.prepare<[SealedCredentialRow]>(
      `INSERT INTO credentials (id, org_id, name, hostname, cred_type, header_name, query_param, sealed_value, created_at)
       VALUES (@id, @org_id, @name, @hostname, @cred_type, @header_name, @query_param, @sealed_value, @created_at)`,
    ),
    credentialsInOrg: db.prepare<[orgId: string], { n: number }>('SELECT count(*) AS n FROM credentials WHERE org_id = ?'),
    credentialsByOrg: db.prepare<[orgId: string], CredentialRow>(
      `SELECT ${CREDENTIAL_COLUMNS} FROM credentials WHERE org_id = ? ORDER BY created_at, rowid`,
    ),
    credentialHostnameInOrg: db.prepare<[orgId: string, id: string], { hostname: string }>(
      'SELECT hostname FROM credentials WHERE org_id = ? AND id = ?',
    ),
    credentialForHost: db.prepare<[orgId: string, hostname: string], SealedCredentialRow>(
      `SELECT ${CREDENTIAL_COLUMNS}, sealed_value FROM credentials WHERE org_id = ? AND hostname = ?`,
    ),
    anyCredential: db.prepare<[], SealedCredentialRow>(`SELECT ${CREDENTIAL_COLUMNS}, sealed_value FROM credentials LIMIT 1`),
    deleteCredential: db.prepare<[id: string]>('DELETE FROM credentials WHERE id = ?'),

    policyByAgent: db.prepare<[agentId: string], PolicyRow>(
      'SELECT agent_id, rules_yaml, updated_at FROM policies WHERE agent_id = ?',
    ),
    upsertPolicy: db.prepare<[PolicyRow]>(
      `INSERT INTO policies (agent_id, rules_yaml, updated_at) VALUES (@agent_id, @rules_yaml, @updated_at)
       ON CONFLICT (agent_id) DO UPDATE SET rules_yaml = excluded.rules_yaml, updated_at = excluded.updated_at`,
    ),
    deletePolicy: db.prepare<[agentId: string]>('DELETE FROM policies WHERE agent_id = ?'),

    insertChange: db.prepare<[ChangeRow & { at: string }]>(
      `INSERT INTO changes (kind, agent_id, key_hash, org_id, hostname, approval_id, at)
       VALUES (@kind, @agent_id, @key_hash, @org_id, @hostname, @approval_id, @at)`,
    ),
    pruneChanges: db.prepare<[before: string]>('DELETE FROM changes WHERE at < ?'),
    changesSince: db.prepare<[seq: number, limit: number], ChangeRow & { seq: number }>(
      'SELECT seq, kind, agent_id, key_hash, org_id, hostname, approval_id FROM changes WHERE seq > ? ORDER BY seq LIMIT ?',
    ),
    // sqlite_sequence keeps the highest seq ever issued, even once its row is pruned.
    lastChangeSeq: db.prepare<[], { seq: number }>("SELECT seq FROM sqlite_sequence WHERE name = 'changes'"),

    heartbeat: db.prepare<[nodeId: string, now: number]>(
      'INSERT INTO rate_nodes (node_id, seen_at) VALUES (?, ?) ON CONFLICT (node_id) DO UPDATE SET seen_at = excluded.seen_at',
    ),
    liveNodes: db.prepare<[after: number], { node_id: string }>('SELECT node_id FROM rate_nodes WHERE seen_at > ? ORDER BY node_id'),
    pruneNodes: db.prepare<[before: number]>('DELETE FROM rate_nodes WHERE seen_at < ?'),
    addRateCount: db.prepare<[RateCountRow & { now: number }]>(
      `INSERT INTO rate_counts (limit_key, agent_id, slot, count, expires_at, updated_at)
       VALUES (@limit_key, @agent_id, @slot, @count, @expires_at, @now)
       ON CONFLICT (limit_key, agent_id, slot) DO UPDATE SET count = count + excluded.count, updated_at = excluded.updated_at`,
    ),
    rateCountsSince: db.prepare<[since: number, now: number], RateCountRow>(
      'SELECT limit_key, agent_id, slot, count, expires_at FROM rate_counts WHERE updated_at >= ? AND expires_at > ?',
    ),
    pruneRateCounts: db.prepare<[now: number]>('DELETE FROM rate_counts WHERE expires_at <= ?'),

    // One statement: the bound is checked and the row written under SQLite's one write lock.
    insertApproval: db.prepare<[ApprovalRow & { body: Buffer | null; max_pending: number }]>(
      `INSERT INTO approvals (${APPROVAL_COLUMNS}, body)
       SELECT ${APPROVAL_COLUMNS.split(', ').map((c) => `@${c}`).join(', ')}, @body
       WHERE (SELECT count(*) FROM approvals
              WHERE org_id = @org_id AND agent_id = @agent_id AND status = 'pending' AND expires_at > @created_at) < @max_pending`,
    ),
    dropExpiredBodies: db.prepare<[now: string]>('UPDATE approvals SET body = NULL WHERE body IS NOT NULL AND expires_at <= ?'),
    approvalInOrg: db.prepare<[orgId: string, id: string], ApprovalRow>(`SELECT ${APPROVAL_COLUMNS} FROM approvals WHERE org_id = ? AND id = ?`),
    approvalBody: db.prepare<[orgId: string, id: string], { body: Buffer | null }>('SELECT body FROM approvals WHERE org_id = ? AND id = ?'),
    approvals: db.prepare<[ApprovalQuery], ApprovalRow>(approvalsSql('')),
    // Statuses named: statements the index by status serves (an `@x IS NULL OR` test is one the planner cannot use an index for).
    approvalsOfStatus: db.prepare<[ApprovalQuery & { status_1: string }], ApprovalRow>(approvalsSql('AND status = @status_1')),
    approvalsOfStatuses: db.prepare<[ApprovalQuery & { status_1: string; status_2: string }], ApprovalRow>(approvalsSql('AND status IN (@status_1, @status_2)')),
    decideApproval: db.prepare<[ApprovalDecision & { org_id: string; id: string }]>(
      `UPDATE approvals SET status = @status, decided_at = @decided_at, decided_by = @decided_by, note = @note,
         body = CASE WHEN @status = 'denied' THEN NULL ELSE body END
       WHERE org_id = @org_id AND id = @id AND status = 'pending' AND expires_at > @now`,
    ),
    useApproval: db.prepare<[{ org_id: string; id: string; now: string }]>(
      // The body is dropped with the use: it was kept only for this forward.
      "UPDATE approvals SET status = 'used', used_at = @now, body = NULL WHERE org_id = @org_id AND id = @id AND status = 'approved' AND expires_at > @now",
    ),
    returnApproval: db.prepare<[{ org_id: string; id: string }]>(
      "UPDATE approvals SET status = 'approved', used_at = NULL WHERE org_id = @org_id AND id = @id AND status = 'used'",
    ),

    recordSealHead: db.prepare<[SealHeadRow]>(
      `INSERT INTO seal_heads (org_id, writer, seq, seal_hash, at) VALUES (@org_id, @writer, @seq, @seal_hash, @at)
       ON CONFLICT (org_id, writer) DO UPDATE SET seq = excluded.seq, seal_hash = excluded.seal_hash, at = excluded.at
       WHERE excluded.seq > seal_heads.seq`,
    ),
    sealHeads: db.prepare<[orgId: string], SealHeadRow>('SELECT org_id, writer, seq, seal_hash, at FROM seal_heads WHERE org_id = ?'),
    sealHeadOrgs: db.prepare<[], { org_id: string }>('SELECT DISTINCT org_id FROM seal_heads ORDER BY org_id'),
    sealingStartedAt: db.prepare<[], { value: string }>("SELECT value FROM audit_meta WHERE key = 'sealing_started_at'"),
    orgCreatedAt: db.prepare<[string], { created_at: string }>('SELECT created_at FROM orgs WHERE id = ?'),

    ping: db.prepare<[], { ok: number }>('SELECT 1 AS ok'),
  };
}

type Statements = ReturnType<typeof prepareStatements>;

/**
 * The failures that mean the file cannot be used now (another process holds the write
 * lock past the busy timeout, the file or its directory is gone or unreadable, the disk
 * failed or is full), by primary result code: better-sqlite3 reports extended codes
 * such as SQLITE_IOERR_WRITE or SQLITE_BUSY_SNAPSHOT.
 */
export const classifySqliteError = unreachableClassifier(
  'metadata database',
  (err) => err instanceof Database.SqliteError && /^SQLITE_(BUSY|CANTOPEN|IOERR|FULL)(_|$)/.test(err.code),
);
const classify = classifySqliteError;

export interface SqliteDriverOptions {
  /** How long a statement waits for another process's write lock before SQLITE_BUSY. */
  busyTimeoutMs?: number;
}

export class SqliteMetadataDriver implements MetadataDriver {
  readonly #db: Database.Database;
  readonly #sql: Statements;
  #lastPruneAt = 0;
  #lastRatePruneAt = 0;

  // Write transactions, built once. Each runs BEGIN IMMEDIATE: a deferred transaction
  // that reads and then writes gets SQLITE_BUSY at once when another process holds the
  // write lock, without waiting for busy_timeout.
  readonly #insertUserWithOrg;
  readonly #deleteAgentInOrg;
  readonly #insertAgent;
  readonly #insertCredential;
  readonly #deleteCredentialInOrg;
  readonly #upsertPolicy;
  readonly #syncRateCounts;
  readonly #decideApproval;
  readonly #recordSealHeads;

  private constructor(db: Database.Database) {
    this.#db = db;
    const sql = prepareStatements(db);
    this.#sql = sql;

    this.#insertUserWithOrg = db.transaction((org: OrgRow, user: UserRow) => {
      sql.insertOrg.run(org);
      sql.insertUser.run(user);
    }).immediate;

    this.#deleteAgentInOrg = db.transaction(
      (orgId: string, agentId: string, changeOf: (keyHash: string) => MetadataChange): MetadataChange | undefined => {
        const row = sql.agentKeyHashInOrg.get(orgId, agentId);
        if (row === undefined) return undefined;
        // The foreign key cascades too; deleting explicitly keeps this right even on a
        // connection opened without foreign_keys.
        sql.deletePolicy.run(agentId);
        sql.deleteAgent.run(agentId);
        return this.#recordChange(changeOf(row.key_hash));
      },
    ).immediate;

    // Counted and written in one immediate transaction: no other connection writes between.
    this.#insertAgent = db.transaction((row: NewAgentRow, maxInOrg: number): 'written' | 'org_full' => {
      if (sql.agentsInOrg.get(row.org_id)!.n >= maxInOrg) return 'org_full';
      sql.insertAgent.run(row);
      return 'written';
    }).immediate;

    this.#insertCredential = db.transaction((row: SealedCredentialRow, change: MetadataChange, maxInOrg: number): 'written' | 'org_full' => {
      if (sql.credentialsInOrg.get(row.org_id)!.n >= maxInOrg) return 'org_full';
      sql.insertCredential.run(row);
      this.#recordChange(change);
      return 'written';
    }).immediate;

    this.#deleteCredentialInOrg = db.transaction(
      (orgId: string, credentialId: string, changeOf: (hostname: string) => MetadataChange): MetadataChange | undefined => {
        const row = sql.credentialHostnameInOrg.get(orgId, credentialId);
        if (row === undefined) return undefined;
        sql.deleteCredential.run(credentialId);
        return this.#recordChange(changeOf(row.hostname));
      },
    ).immediate;

    this.#upsertPolicy = db.transaction((row: PolicyRow, change: MetadataChange) => {
      sql.upsertPolicy.run(row);
      this.#recordChange(change);
    }).immediate;

    this.#recordSealHeads = db.transaction((heads: readonly SealHeadRow[]) => {
      for (const head of heads) sql.recordSealHead.run(head);
    });

    this.#decideApproval = db.transaction(
      (orgId: string, id: string, decision: ApprovalDecision, change: MetadataChange): 'written' | 'missing' | 'not_pending' => {
        if (sql.decideApproval.run({ ...decision, org_id: orgId, id }).changes === 1) {
          this.#recordChange(change);
          return 'written';
        }
        return sql.approvalInOrg.get(orgId, id) === undefined ? 'missing' : 'not_pending';
      },
    ).immediate;

    this.#syncRateCounts = db.transaction((sync: RateSync): RateSyncResult => {
      sql.heartbeat.run(sync.node_id, sync.now);
      for (const row of sync.add) sql.addRateCount.run({ ...row, now: sync.now });
      if (sync.now - this.#lastRatePruneAt >= RATE_PRUNE_INTERVAL_MS) {
        this.#lastRatePruneAt = sync.now;
        sql.pruneRateCounts.run(sync.now);
        sql.pruneNodes.run(sync.now - RATE_NODE_RETENTION_MS);
      }
      return {
        nodes: sql.liveNodes.all(sync.live_after).map((row) => row.node_id),
        rows: sql.rateCountsSince.all(sync.changed_since, sync.now),
      };
    }).immediate;
  }

  /**
   * Opens (creating when missing, with its parent directory) the database file and
   * brings its schema up to date. A new file is made readable by its owner only: it
   * holds password hashes and sealed credentials. The driver returned throws
   * StoreUnavailableError when the file cannot be used.
   */
  static open(file: string, options: SqliteDriverOptions = {}): SqliteMetadataDriver {
    try {
      return guardBoundary(SqliteMetadataDriver.#open(file, options.busyTimeoutMs ?? BUSY_TIMEOUT_MS), classify);
    } catch (err) {
      throw classify(err);
    }
  }

  static #open(file: string, busyTimeoutMs: number): SqliteMetadataDriver {
    const inMemory = file === ':memory:';
    const isNew = inMemory || !fs.existsSync(file);
    if (!inMemory) fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    const db = new Database(file);
    try {
      if (isNew && !inMemory) fs.chmodSync(file, 0o600);
      db.pragma(`busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
      db.pragma('journal_mode = WAL');
      // NORMAL is durable across application crashes in WAL mode; only a power loss may
      // drop the last transactions (https://www.sqlite.org/pragma.html#pragma_synchronous).
      db.pragma('synchronous = NORMAL');
      db.pragma('foreign_keys = ON');
      migrate(db);
      return new SqliteMetadataDriver(db);
    } catch (err) {
      db.close();
      throw err;
    }
  }

  insertUserWithOrg(org: OrgRow, user: UserRow): 'written' | 'unique_violation' {
    return refusedAs('unique_violation', 'SQLITE_CONSTRAINT_UNIQUE', () => this.#insertUserWithOrg(org, user));
  }

  userByEmail(email: string): UserRow | undefined {
    return this.#sql.userByEmail.get(email);
  }

  userById(id: string): UserRow | undefined {
    return this.#sql.userById.get(id);
  }

  insertAgent(row: NewAgentRow, maxInOrg: number): 'written' | 'org_full' {
    return this.#insertAgent(row, maxInOrg);
  }

  agentsByOrg(orgId: string): AgentRow[] {
    return this.#sql.agentsByOrg.all(orgId);
  }

  agentInOrg(orgId: string, agentId: string): AgentRow | undefined {
    return this.#sql.agentInOrg.get(orgId, agentId);
  }

  agentByKeyHash(keyHash: string): AgentRow | undefined {
    return this.#sql.agentByKeyHash.get(keyHash);
  }

  agentExists(agentId: string): boolean {
    return this.#sql.agentExists.get(agentId) !== undefined;
  }

  deleteAgentInOrg(orgId: string, agentId: string, changeOf: (keyHash: string) => MetadataChange): MetadataChange | undefined {
    return this.#deleteAgentInOrg(orgId, agentId, changeOf);
  }

  insertCredential(row: SealedCredentialRow, change: MetadataChange, maxInOrg: number): 'written' | 'unique_violation' | 'org_full' {
    let outcome: 'written' | 'org_full' = 'written';
    const refused = refusedAs('unique_violation', 'SQLITE_CONSTRAINT_UNIQUE', () => {
      outcome = this.#insertCredential(row, change, maxInOrg);
    });
    return refused === 'written' ? outcome : refused;
  }

  credentialsByOrg(orgId: string): CredentialRow[] {
    return this.#sql.credentialsByOrg.all(orgId);
  }

  credentialForHost(orgId: string, hostname: string): SealedCredentialRow | undefined {
    return this.#sql.credentialForHost.get(orgId, hostname);
  }

  anyCredential(): SealedCredentialRow | undefined {
    return this.#sql.anyCredential.get();
  }

  deleteCredentialInOrg(orgId: string, credentialId: string, changeOf: (hostname: string) => MetadataChange): MetadataChange | undefined {
    return this.#deleteCredentialInOrg(orgId, credentialId, changeOf);
  }

  policyByAgent(agentId: string): PolicyRow | undefined {
    return this.#sql.policyByAgent.get(agentId);
  }

  upsertPolicy(row: PolicyRow, change: MetadataChange): 'written' | 'missing_parent' {
    return refusedAs('missing_parent', 'SQLITE_CONSTRAINT_FOREIGNKEY', () => this.#upsertPolicy(row, change));
  }

  /**
   * Rows older than an hour are pruned, so a poller that fell further behind than that
   * must drop its whole cache instead.
   */
  changesSince(seq: number, limit: number): ChangeEntry[] {
    return this.#sql.changesSince.all(seq, limit).map((row) => changeEntry(row.seq, row));
  }

  lastChangeSeq(): number {
    return this.#sql.lastChangeSeq.get()?.seq ?? 0;
  }

  insertApproval(row: ApprovalRow, body: Buffer | null, maxPending: number): 'written' | 'too_many' {
    // Bodies of approvals that expired unused: kept, they grew the file without
    // bound (an agent making calls nobody decides). The partial index makes this
    // a probe that finds nothing, but for the rows that expired since.
    this.#sql.dropExpiredBodies.run(row.created_at);
    return this.#sql.insertApproval.run({ ...row, body, max_pending: maxPending }).changes === 1 ? 'written' : 'too_many';
  }

  approvalInOrg(orgId: string, id: string): ApprovalRow | undefined {
    return this.#sql.approvalInOrg.get(orgId, id);
  }

  approvalBody(orgId: string, id: string): Buffer | null {
    return this.#sql.approvalBody.get(orgId, id)?.body ?? null;
  }

  approvals(query: ApprovalQuery): ApprovalRow[] {
    const statuses = query.statuses;
    if (statuses === null || statuses.length === 0) return this.#sql.approvals.all(query);
    if (statuses.length === 1) return this.#sql.approvalsOfStatus.all({ ...query, status_1: statuses[0]! });
    return this.#sql.approvalsOfStatuses.all({ ...query, status_1: statuses[0]!, status_2: statuses[1]! });
  }

  decideApproval(orgId: string, id: string, decision: ApprovalDecision, change: MetadataChange): 'written' | 'missing' | 'not_pending' {
    return this.#decideApproval(orgId, id, decision, change);
  }

  recordSealHeads(heads: readonly SealHeadRow[]): void {
    this.#recordSealHeads(heads);
  }

  sealHeads(orgId: string): SealHeadRow[] {
    return this.#sql.sealHeads.all(orgId);
  }

  sealHeadOrgs(): string[] {
    return this.#sql.sealHeadOrgs.all().map((r) => r.org_id);
  }

  sealingStartedAt(): string | null {
    return this.#sql.sealingStartedAt.get()?.value ?? null;
  }

  orgCreatedAt(orgId: string): string | null {
    return this.#sql.orgCreatedAt.get(orgId)?.created_at ?? null;
  }

  useApproval(orgId: string, id: string, now: string): boolean {
    // One statement: SQLite runs one writer at a time, so of two racing processes exactly one matches 'approved'.
    return this.#sql.useApproval.run({ org_id: orgId, id, now }).changes === 1;
  }

  returnApproval(orgId: string, id: string): boolean {
    return this.#sql.returnApproval.run({ org_id: orgId, id }).changes === 1;
  }

  syncRateCounts(sync: RateSync): RateSyncResult {
    return this.#syncRateCounts(sync);
  }

  ping(): void {
    this.#sql.ping.get();
  }

  close(): void {
    if (this.#db.open) this.#db.close();
  }

  /** Appends a change row; must run inside the mutation's transaction. */
  #recordChange(change: MetadataChange): MetadataChange {
    const now = Date.now();
    this.#sql.insertChange.run({ ...changeRow(change), at: new Date(now).toISOString() });
    if (now - this.#lastPruneAt >= CHANGE_PRUNE_INTERVAL_MS) {
      this.#lastPruneAt = now;
      this.#sql.pruneChanges.run(new Date(now - CHANGE_RETENTION_MS).toISOString());
    }
    return change;
  }
}

/** 'written' after `write`, or `refusal` when it failed with the constraint `code`. */
function refusedAs<R extends string>(refusal: R, code: string, write: () => void): 'written' | R {
  try {
    write();
    return 'written';
  } catch (err) {
    if (err instanceof Database.SqliteError && err.code === code) return refusal;
    throw err;
  }
}

/**
 * Applies the pending migrations in one IMMEDIATE transaction. The version is read
 * again under the write lock, so processes opening the same new file at once apply
 * each migration exactly once.
 */
function migrate(db: Database.Database): void {
  const readVersion = () => db.pragma('user_version', { simple: true }) as number;
  if (readVersion() === SCHEMA_VERSION) return;
  db.transaction(() => {
    const current = readVersion();
    if (current > SCHEMA_VERSION) {
      throw new Error(
        `The metadata database has schema version ${current}, newer than this build's ${SCHEMA_VERSION}; upgrade the service.`,
      );
    }
    for (let version = current; version < SCHEMA_VERSION; version++) {
      db.exec(MIGRATIONS[version]!);
    }
    // PRAGMA takes no bound parameters; SCHEMA_VERSION is an integer constant.
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}
