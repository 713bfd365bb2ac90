// The metadata store over one SQLite file (better-sqlite3). Several processes on one
// machine may open the same file (split mode without MongoDB), so the file runs in
// WAL mode with a busy timeout, every write transaction is BEGIN IMMEDIATE, and every
// change that can invalidate a proxy's cache is also appended to the `changes` table
// for other processes to poll (`changesSince`).
//
// The work is synchronous; methods are async only because the interface also fits
// MongoDB. Every statement is prepared once, at open.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { GuardError } from '../../errors.js';
import type { Agent, CredType, Credential, LogOutputs, MetadataChange, PolicyRecord, SealedCredential, User } from '../../types.js';
import type { MetadataStore, NewAgent, NewCredential } from '../metadata-store.js';

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
];

/** The schema version this code writes; a file with a higher one is refused. */
export const SCHEMA_VERSION = MIGRATIONS.length;

/** How long a change row is kept for pollers. */
const CHANGE_RETENTION_MS = 60 * 60 * 1000;
/** Pruning runs inside a write transaction, at most this often per process. */
const CHANGE_PRUNE_INTERVAL_MS = 60 * 1000;
/** How long a statement waits for another process's write lock before SQLITE_BUSY. */
const BUSY_TIMEOUT_MS = 5000;

interface UserRow {
  id: string;
  org_id: string;
  email: string;
  password_hash: string;
  created_at: string;
}

interface AgentRow {
  id: string;
  org_id: string;
  name: string;
  log_outputs: string;
  api_key_prefix: string;
  created_at: string;
}

interface CredentialRow {
  id: string;
  org_id: string;
  name: string;
  hostname: string;
  cred_type: string;
  header_name: string | null;
  query_param: string | null;
  created_at: string;
}

interface SealedCredentialRow extends CredentialRow {
  sealed_value: string;
}

interface PolicyRow {
  agent_id: string;
  rules_yaml: string;
  updated_at: string;
}

interface ChangeRow {
  seq: number;
  kind: string;
  agent_id: string | null;
  key_hash: string | null;
  org_id: string | null;
  hostname: string | null;
}

const AGENT_COLUMNS = 'id, org_id, name, log_outputs, api_key_prefix, created_at';
const CREDENTIAL_COLUMNS = 'id, org_id, name, hostname, cred_type, header_name, query_param, created_at';

function prepareStatements(db: Database.Database) {
  return {
    insertOrg: db.prepare<[id: string, name: string, createdAt: string]>(
      'INSERT INTO orgs (id, name, created_at) VALUES (?, ?, ?)',
    ),
    insertUser: db.prepare<[id: string, orgId: string, email: string, passwordHash: string, createdAt: string]>(
      'INSERT INTO users (id, org_id, email, password_hash, created_at) VALUES (?, ?, ?, ?, ?)',
    ),
    userByEmail: db.prepare<[email: string], UserRow>(
      'SELECT id, org_id, email, password_hash, created_at FROM users WHERE email = ?',
    ),
    userById: db.prepare<[id: string], UserRow>(
      'SELECT id, org_id, email, password_hash, created_at FROM users WHERE id = ?',
    ),

    insertAgent: db.prepare<
      [id: string, orgId: string, name: string, logOutputs: string, keyHash: string, apiKeyPrefix: string, createdAt: string]
    >(
      'INSERT INTO agents (id, org_id, name, log_outputs, key_hash, api_key_prefix, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    ),
    agentsByOrg: db.prepare<[orgId: string], AgentRow>(
      `SELECT ${AGENT_COLUMNS} FROM agents WHERE org_id = ? ORDER BY created_at, rowid`,
    ),
    agentInOrg: db.prepare<[orgId: string, id: string], AgentRow>(
      `SELECT ${AGENT_COLUMNS} FROM agents WHERE org_id = ? AND id = ?`,
    ),
    agentByKeyHash: db.prepare<[keyHash: string], AgentRow>(
      `SELECT ${AGENT_COLUMNS} FROM agents WHERE key_hash = ?`,
    ),
    agentKeyHashInOrg: db.prepare<[orgId: string, id: string], { key_hash: string }>(
      'SELECT key_hash FROM agents WHERE org_id = ? AND id = ?',
    ),
    deleteAgent: db.prepare<[id: string]>('DELETE FROM agents WHERE id = ?'),

    insertCredential: db.prepare<
      [
        id: string,
        orgId: string,
        name: string,
        hostname: string,
        credType: string,
        headerName: string | null,
        queryParam: string | null,
        sealedValue: string,
        createdAt: string,
      ]
    >(
      `INSERT INTO credentials (id, org_id, name, hostname, cred_type, header_name, query_param, sealed_value, created_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    credentialsByOrg: db.prepare<[orgId: string], CredentialRow>(
      `SELECT ${CREDENTIAL_COLUMNS} FROM credentials WHERE org_id = ? ORDER BY created_at, rowid`,
    ),
    credentialHostnameInOrg: db.prepare<[orgId: string, id: string], { hostname: string }>(
      'SELECT hostname FROM credentials WHERE org_id = ? AND id = ?',
    ),
    credentialForHost: db.prepare<[orgId: string, hostname: string], SealedCredentialRow>(
      `SELECT ${CREDENTIAL_COLUMNS}, sealed_value FROM credentials WHERE org_id = ? AND hostname = ?`,
    ),
    deleteCredential: db.prepare<[id: string]>('DELETE FROM credentials WHERE id = ?'),

    policyByAgent: db.prepare<[agentId: string], PolicyRow>(
      'SELECT agent_id, rules_yaml, updated_at FROM policies WHERE agent_id = ?',
    ),
    upsertPolicy: db.prepare<[agentId: string, rulesYaml: string, updatedAt: string]>(
      `INSERT INTO policies (agent_id, rules_yaml, updated_at) VALUES (?, ?, ?)
       ON CONFLICT (agent_id) DO UPDATE SET rules_yaml = excluded.rules_yaml, updated_at = excluded.updated_at`,
    ),
    deletePolicy: db.prepare<[agentId: string]>('DELETE FROM policies WHERE agent_id = ?'),

    insertChange: db.prepare<
      [kind: string, agentId: string | null, keyHash: string | null, orgId: string | null, hostname: string | null, at: string]
    >('INSERT INTO changes (kind, agent_id, key_hash, org_id, hostname, at) VALUES (?, ?, ?, ?, ?, ?)'),
    pruneChanges: db.prepare<[before: string]>('DELETE FROM changes WHERE at < ?'),
    changesSince: db.prepare<[seq: number, limit: number], ChangeRow>(
      'SELECT seq, kind, agent_id, key_hash, org_id, hostname FROM changes WHERE seq > ? ORDER BY seq LIMIT ?',
    ),
    // sqlite_sequence keeps the highest seq ever issued, even once its row is pruned.
    lastChangeSeq: db.prepare<[], { seq: number }>("SELECT seq FROM sqlite_sequence WHERE name = 'changes'"),

    ping: db.prepare<[], { ok: number }>('SELECT 1 AS ok'),
  };
}

type Statements = ReturnType<typeof prepareStatements>;

export class SqliteMetadataStore implements MetadataStore {
  readonly #db: Database.Database;
  readonly #sql: Statements;
  readonly #listeners = new Set<(change: MetadataChange) => void>();
  #lastPruneAt = 0;

  // Write transactions, built once. Each runs BEGIN IMMEDIATE: a deferred transaction
  // that reads and then writes gets SQLITE_BUSY at once when another process holds the
  // write lock, without waiting for busy_timeout.
  readonly #insertUserWithOrg;
  readonly #deleteAgentInOrg;
  readonly #insertCredential;
  readonly #deleteCredentialInOrg;
  readonly #upsertPolicy;

  private constructor(db: Database.Database) {
    this.#db = db;
    const sql = prepareStatements(db);
    this.#sql = sql;

    this.#insertUserWithOrg = db.transaction((user: User) => {
      // The org is named after its owner's email until orgs can be renamed.
      sql.insertOrg.run(user.orgId, user.email, user.createdAt);
      sql.insertUser.run(user.id, user.orgId, user.email, user.passwordHash, user.createdAt);
    }).immediate;

    this.#deleteAgentInOrg = db.transaction((orgId: string, agentId: string): MetadataChange | undefined => {
      const row = sql.agentKeyHashInOrg.get(orgId, agentId);
      if (row === undefined) return undefined;
      // The foreign key cascades too; deleting explicitly keeps this right even on a
      // connection opened without foreign_keys.
      sql.deletePolicy.run(agentId);
      sql.deleteAgent.run(agentId);
      const change: MetadataChange = { kind: 'agent', agentId, keyHash: row.key_hash };
      this.#recordChange(change);
      return change;
    }).immediate;

    this.#insertCredential = db.transaction((credential: SealedCredential, change: MetadataChange) => {
      sql.insertCredential.run(
        credential.id,
        credential.orgId,
        credential.name,
        credential.hostname,
        credential.credType,
        credential.headerName,
        credential.queryParam,
        credential.sealedValue,
        credential.createdAt,
      );
      this.#recordChange(change);
    }).immediate;

    this.#deleteCredentialInOrg = db.transaction((orgId: string, credentialId: string): MetadataChange | undefined => {
      const row = sql.credentialHostnameInOrg.get(orgId, credentialId);
      if (row === undefined) return undefined;
      sql.deleteCredential.run(credentialId);
      const change: MetadataChange = { kind: 'credential', orgId, hostname: row.hostname };
      this.#recordChange(change);
      return change;
    }).immediate;

    this.#upsertPolicy = db.transaction((policy: PolicyRecord, change: MetadataChange) => {
      sql.upsertPolicy.run(policy.agentId, policy.rulesYaml, policy.updatedAt);
      this.#recordChange(change);
    }).immediate;
  }

  /**
   * Opens (creating when missing, with its parent directory) the database file and
   * brings its schema up to date. A new file is made readable by its owner only: it
   * holds password hashes and sealed credentials.
   */
  static open(file: string): SqliteMetadataStore {
    const inMemory = file === ':memory:';
    const isNew = inMemory || !fs.existsSync(file);
    if (!inMemory) fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    const db = new Database(file);
    try {
      if (isNew && !inMemory) fs.chmodSync(file, 0o600);
      db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      db.pragma('journal_mode = WAL');
      // NORMAL is durable across application crashes in WAL mode; only a power loss may
      // drop the last transactions (https://www.sqlite.org/pragma.html#pragma_synchronous).
      db.pragma('synchronous = NORMAL');
      db.pragma('foreign_keys = ON');
      migrate(db);
      return new SqliteMetadataStore(db);
    } catch (err) {
      db.close();
      throw err;
    }
  }

  async createUserWithOrg(email: string, passwordHash: string): Promise<User> {
    const user: User = { id: randomUUID(), orgId: randomUUID(), email, passwordHash, createdAt: new Date().toISOString() };
    try {
      this.#insertUserWithOrg(user);
    } catch (err) {
      if (isUniqueViolation(err)) throw new GuardError('conflict', 'An account with that email already exists.');
      throw err;
    }
    return user;
  }

  async findUserByEmail(email: string): Promise<User | undefined> {
    const row = this.#sql.userByEmail.get(email);
    return row && toUser(row);
  }

  async findUserById(id: string): Promise<User | undefined> {
    const row = this.#sql.userById.get(id);
    return row && toUser(row);
  }

  async createAgent(agent: NewAgent): Promise<Agent> {
    const created: Agent = {
      id: randomUUID(),
      orgId: agent.orgId,
      name: agent.name,
      apiKeyPrefix: agent.apiKeyPrefix,
      logOutputs: agent.logOutputs,
      createdAt: new Date().toISOString(),
    };
    this.#sql.insertAgent.run(
      created.id,
      created.orgId,
      created.name,
      created.logOutputs,
      agent.keyHash,
      created.apiKeyPrefix,
      created.createdAt,
    );
    return created;
  }

  async listAgents(orgId: string): Promise<Agent[]> {
    return this.#sql.agentsByOrg.all(orgId).map(toAgent);
  }

  async getAgent(orgId: string, agentId: string): Promise<Agent | undefined> {
    const row = this.#sql.agentInOrg.get(orgId, agentId);
    return row && toAgent(row);
  }

  async findAgentByKeyHash(keyHash: string): Promise<Agent | undefined> {
    const row = this.#sql.agentByKeyHash.get(keyHash);
    return row && toAgent(row);
  }

  async deleteAgent(orgId: string, agentId: string): Promise<boolean> {
    const change = this.#deleteAgentInOrg(orgId, agentId);
    if (change === undefined) return false;
    this.#notify(change);
    return true;
  }

  async createCredential(credential: NewCredential): Promise<Credential> {
    const created: Credential = {
      id: randomUUID(),
      orgId: credential.orgId,
      name: credential.name,
      hostname: credential.hostname,
      credType: credential.credType,
      headerName: credential.headerName,
      queryParam: credential.queryParam,
      createdAt: new Date().toISOString(),
    };
    const change: MetadataChange = { kind: 'credential', orgId: created.orgId, hostname: created.hostname };
    try {
      this.#insertCredential({ ...created, sealedValue: credential.sealedValue }, change);
    } catch (err) {
      if (isUniqueViolation(err)) throw new GuardError('conflict', 'A credential for that hostname already exists.');
      throw err;
    }
    // A proxy may hold a cached "no credential for this host".
    this.#notify(change);
    return created;
  }

  async listCredentials(orgId: string): Promise<Credential[]> {
    return this.#sql.credentialsByOrg.all(orgId).map(toCredential);
  }

  async deleteCredential(orgId: string, credentialId: string): Promise<boolean> {
    const change = this.#deleteCredentialInOrg(orgId, credentialId);
    if (change === undefined) return false;
    this.#notify(change);
    return true;
  }

  async findCredentialForHost(orgId: string, hostname: string): Promise<SealedCredential | undefined> {
    const row = this.#sql.credentialForHost.get(orgId, hostname);
    return row && { ...toCredential(row), sealedValue: row.sealed_value };
  }

  async getPolicy(agentId: string): Promise<PolicyRecord | undefined> {
    const row = this.#sql.policyByAgent.get(agentId);
    return row && { agentId: row.agent_id, rulesYaml: row.rules_yaml, updatedAt: row.updated_at };
  }

  /** Throws GuardError('not_found') when the agent does not exist (e.g. deleted meanwhile). */
  async setPolicy(agentId: string, rulesYaml: string): Promise<PolicyRecord> {
    const policy: PolicyRecord = { agentId, rulesYaml, updatedAt: new Date().toISOString() };
    const change: MetadataChange = { kind: 'policy', agentId };
    try {
      this.#upsertPolicy(policy, change);
    } catch (err) {
      if (isForeignKeyViolation(err)) throw new GuardError('not_found', 'Agent not found.');
      throw err;
    }
    this.#notify(change);
    return policy;
  }

  onChange(listener: (change: MetadataChange) => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /**
   * The changes committed by any process after `seq`, oldest first, at most `limit`.
   * Rows older than an hour are pruned, so a poller that fell further behind than that
   * must drop its whole cache instead.
   */
  changesSince(seq: number, limit: number): { seq: number; change: MetadataChange }[] {
    return this.#sql.changesSince.all(seq, limit).map((row) => ({ seq: row.seq, change: toChange(row) }));
  }

  /** The highest change seq ever issued in this file (0 when none): a poller's starting point. */
  lastChangeSeq(): number {
    return this.#sql.lastChangeSeq.get()?.seq ?? 0;
  }

  async ping(): Promise<void> {
    try {
      this.#sql.ping.get();
    } catch {
      throw new GuardError('unavailable', 'The metadata database is not available.');
    }
  }

  async close(): Promise<void> {
    if (this.#db.open) this.#db.close();
  }

  /** Appends a change row; must run inside the mutation's transaction. */
  #recordChange(change: MetadataChange): void {
    const now = Date.now();
    const at = new Date(now).toISOString();
    switch (change.kind) {
      case 'agent':
        this.#sql.insertChange.run('agent', change.agentId, change.keyHash, null, null, at);
        break;
      case 'policy':
        this.#sql.insertChange.run('policy', change.agentId, null, null, null, at);
        break;
      case 'credential':
        this.#sql.insertChange.run('credential', null, null, change.orgId, change.hostname, at);
        break;
    }
    if (now - this.#lastPruneAt >= CHANGE_PRUNE_INTERVAL_MS) {
      this.#lastPruneAt = now;
      this.#sql.pruneChanges.run(new Date(now - CHANGE_RETENTION_MS).toISOString());
    }
  }

  /**
   * Tells in-process listeners, after the commit. The mutation has happened whatever a
   * listener does, so a throwing listener neither skips the others nor fails the call;
   * its error is surfaced as a process warning.
   */
  #notify(change: MetadataChange): void {
    for (const listener of this.#listeners) {
      try {
        listener(change);
      } catch (err) {
        const warning = new Error(
          `A metadata change listener threw (the ${change.kind} change is committed): ${err instanceof Error ? err.message : String(err)}`,
          { cause: err },
        );
        warning.name = 'MetadataChangeListenerWarning';
        process.emitWarning(warning);
      }
    }
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

function isUniqueViolation(err: unknown): boolean {
  return err instanceof Database.SqliteError && err.code === 'SQLITE_CONSTRAINT_UNIQUE';
}

function isForeignKeyViolation(err: unknown): boolean {
  return err instanceof Database.SqliteError && err.code === 'SQLITE_CONSTRAINT_FOREIGNKEY';
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
    // The CHECK constraint admits only LogOutputs values.
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
    // The CHECK constraint admits only CredType values.
    credType: row.cred_type as CredType,
    headerName: row.header_name,
    queryParam: row.query_param,
    createdAt: row.created_at,
  };
}

function toChange(row: ChangeRow): MetadataChange {
  if (row.kind === 'agent' && row.agent_id !== null && row.key_hash !== null) {
    return { kind: 'agent', agentId: row.agent_id, keyHash: row.key_hash };
  }
  if (row.kind === 'policy' && row.agent_id !== null) return { kind: 'policy', agentId: row.agent_id };
  if (row.kind === 'credential' && row.org_id !== null && row.hostname !== null) {
    return { kind: 'credential', orgId: row.org_id, hostname: row.hostname };
  }
  throw new Error(`Malformed change row ${row.seq} of kind ${row.kind}.`);
}
