// The metadata store over MongoDB (driver v6), for split mode: any number of proxy
// processes and one admin process share one database. It behaves as the SQLite store
// does (same records, same conflicts, same change events, same `changes` log) and
// passes the same contract suite (test/integration/metadata-store.contract.ts).
//
// Two kinds of deployment, told apart once at open by the `hello` reply:
// - A replica set (`setName`) or a sharded cluster (mongos, `msg: "isdbgrid"`):
//   every multi-document write (signup, agent delete, credential create/delete,
//   policy set) runs in one transaction together with its `changes` entry, and
//   `watchChanges` tails the `changes` collection with a change stream.
// - A standalone server (no transactions, no change streams): the same writes run
//   one after another, not atomically. They are ordered so that a failure half-way
//   errs on the safe side: an agent is deleted before its policy (its key stops at
//   once; at worst an unreachable policy stays), a signup whose user insert fails
//   removes its org, a policy set for an agent deleted meanwhile is removed again. A
//   failure between a write and its `changes` entry loses that invalidation: other
//   processes then hold the stale entry until their cache TTL. Callers poll
//   `changesSince`.
//
// Documents use `_id` = the record's UUID string and snake_case fields, as the SQLite
// columns; timestamps are ISO 8601 strings, except `changes.at`, which is a BSON Date
// because a TTL index only expires Date values.
import { randomUUID } from 'node:crypto';
import {
  type ChangeStream,
  type ChangeStreamInsertDocument,
  type ClientSession,
  type Collection,
  type Db,
  type Document,
  MongoClient,
  MongoServerError,
  ObjectId,
  type TransactionOptions,
} from 'mongodb';
import { GuardError } from '../../errors.js';
import type { Agent, CredType, Credential, LogOutputs, MetadataChange, PolicyRecord, SealedCredential, User } from '../../types.js';
import type { MetadataStore, NewAgent, NewCredential } from '../metadata-store.js';

/** The database used when neither `open`'s argument nor the URL's path names one. */
export const DEFAULT_DATABASE = 'tool_call_guard';

/** How long a change entry is kept for pollers (TTL index on `changes.at`); as SQLite's. */
const CHANGE_RETENTION_SECONDS = 60 * 60;

/**
 * How long `changesSince` waits for a missing seq before reading past it. A writer
 * takes its seq from `counters` before it inserts the entry, so without transactions
 * two writers may insert out of seq order; a gap is then a write in flight for a few
 * milliseconds. Only a writer that died between the two steps leaves a gap for good,
 * and the entries after it are then delayed by this long. Assumes the hosts' clocks
 * agree to well under this (NTP).
 */
const CHANGE_GAP_GRACE_MS = 2000;

/**
 * A dead server costs a request this long before the store's error (which the admin
 * app answers as 503) instead of the driver's default 30 s. A value in the URL wins.
 */
const SERVER_SELECTION_TIMEOUT_MS = 5000;

/**
 * Snapshot reads and majority commits: every transaction also increments the
 * `changes` counter, so concurrent ones conflict on it and commit one at a time, in
 * seq order (the loser gets a TransientTransactionError and `withTransaction` retries it).
 */
const TRANSACTION_OPTIONS: TransactionOptions = {
  readConcern: { level: 'snapshot' },
  writeConcern: { w: 'majority' },
  readPreference: 'primary',
};

const DUPLICATE_KEY = 11000;
const NAMESPACE_EXISTS = 48;

const COLLECTIONS = ['orgs', 'users', 'agents', 'credentials', 'policies', 'changes', 'counters'] as const;
type CollectionName = (typeof COLLECTIONS)[number];

/**
 * Document validators, applied when the store creates a collection: the enum checks
 * of the SQLite schema, which the read mappers below rely on.
 */
const VALIDATORS: Partial<Record<CollectionName, Document>> = {
  agents: {
    $jsonSchema: {
      bsonType: 'object',
      required: ['org_id', 'name', 'log_outputs', 'key_hash', 'api_key_prefix', 'created_at'],
      properties: { log_outputs: { enum: ['full', 'hash', 'none'] } },
    },
  },
  credentials: {
    $jsonSchema: {
      bsonType: 'object',
      required: ['org_id', 'name', 'hostname', 'cred_type', 'sealed_value', 'created_at'],
      properties: { cred_type: { enum: ['bearer', 'header', 'query'] } },
    },
  },
  changes: {
    $jsonSchema: {
      bsonType: 'object',
      required: ['seq', 'kind', 'at'],
      properties: { kind: { enum: ['agent', 'policy', 'credential'] }, at: { bsonType: 'date' } },
    },
  },
};

interface OrgDoc {
  _id: string;
  name: string;
  created_at: string;
}

interface UserDoc {
  _id: string;
  org_id: string;
  email: string;
  password_hash: string;
  created_at: string;
}

/**
 * `insert_order` breaks ties between records created in the same millisecond, as
 * SQLite's rowid does: an ObjectId's trailing counter increases with every id a process
 * makes, so one process's records list in the order it created them.
 */
interface AgentDoc {
  _id: string;
  org_id: string;
  name: string;
  log_outputs: string;
  key_hash: string;
  api_key_prefix: string;
  created_at: string;
  insert_order: ObjectId;
}

interface CredentialDoc {
  _id: string;
  org_id: string;
  name: string;
  hostname: string;
  cred_type: string;
  header_name: string | null;
  query_param: string | null;
  sealed_value: string;
  created_at: string;
  insert_order: ObjectId;
}

/** `_id` is the agent id: one policy per agent. */
interface PolicyDoc {
  _id: string;
  rules_yaml: string;
  updated_at: string;
}

/** `_id` is left to the driver (an ObjectId); `seq` has its own unique index. */
interface ChangeDoc {
  seq: number;
  kind: string;
  agent_id: string | null;
  key_hash: string | null;
  org_id: string | null;
  hostname: string | null;
  at: Date;
}

interface CounterDoc {
  _id: string;
  seq: number;
}

/** One entry of the `changes` log. */
export interface ChangeEntry {
  seq: number;
  change: MetadataChange;
}

const CHANGES_COUNTER = 'changes';

const AGENT_PROJECTION = { key_hash: 0 } as const;
const CREDENTIAL_PROJECTION = { sealed_value: 0 } as const;
/** Oldest first; see AgentDoc.insert_order. */
const CREATION_ORDER = { created_at: 1, insert_order: 1 } as const;

export class MongoMetadataStore implements MetadataStore {
  readonly #client: MongoClient;
  readonly #db: Db;
  readonly #orgs: Collection<OrgDoc>;
  readonly #users: Collection<UserDoc>;
  readonly #agents: Collection<AgentDoc>;
  readonly #credentials: Collection<CredentialDoc>;
  readonly #policies: Collection<PolicyDoc>;
  readonly #changes: Collection<ChangeDoc>;
  readonly #counters: Collection<CounterDoc>;
  /** A replica set or sharded cluster: transactions and change streams work. */
  readonly #replicated: boolean;
  readonly #listeners = new Set<(change: MetadataChange) => void>();
  readonly #streams = new Set<ChangeStream<ChangeDoc, ChangeStreamInsertDocument<ChangeDoc>>>();
  #closing: Promise<void> | undefined;

  private constructor(client: MongoClient, db: Db, replicated: boolean) {
    this.#client = client;
    this.#db = db;
    this.#orgs = db.collection<OrgDoc>('orgs');
    this.#users = db.collection<UserDoc>('users');
    this.#agents = db.collection<AgentDoc>('agents');
    this.#credentials = db.collection<CredentialDoc>('credentials');
    this.#policies = db.collection<PolicyDoc>('policies');
    this.#changes = db.collection<ChangeDoc>('changes');
    this.#counters = db.collection<CounterDoc>('counters');
    this.#replicated = replicated;
  }

  /**
   * Connects, and creates the collections, indexes and change counter that are
   * missing (safe to run from several processes at once, and on every start).
   *
   * The database is `database` when given (tests use a fresh one per run), else the
   * URL's path (`mongodb://host/<database>`), else `tool_call_guard`. Wire compression:
   * zstd when the server offers it, else zlib (the server picks the first of the
   * client's list it supports).
   */
  static async open(url: string, database?: string): Promise<MongoMetadataStore> {
    const client = new MongoClient(url, {
      appName: 'tool-call-guard',
      compressors: ['zstd', 'zlib'],
      retryWrites: true,
      retryReads: true,
      ...(hasUrlOption(url, 'serverSelectionTimeoutMS') ? {} : { serverSelectionTimeoutMS: SERVER_SELECTION_TIMEOUT_MS }),
    });
    try {
      await client.connect();
      const db = client.db(database ?? databaseNameOf(url) ?? DEFAULT_DATABASE);
      const replicated = await isReplicated(db);
      await createCollections(db);
      await createIndexes(db);
      // The counter exists before any transaction needs it: an upsert that inserts
      // inside a transaction conflicts with every other one doing the same.
      await ignoreDuplicateKey(
        db.collection<CounterDoc>('counters').updateOne({ _id: CHANGES_COUNTER }, { $setOnInsert: { seq: 0 } }, { upsert: true }),
      );
      return new MongoMetadataStore(client, db, replicated);
    } catch (err) {
      await client.close().catch(() => {});
      throw err;
    }
  }

  /** True on a replica set or sharded cluster, where `watchChanges` delivers changes. */
  get canWatchChanges(): boolean {
    return this.#replicated;
  }

  async createUserWithOrg(email: string, passwordHash: string): Promise<User> {
    const user: User = { id: randomUUID(), orgId: randomUUID(), email, passwordHash, createdAt: new Date().toISOString() };
    // The org is named after its owner's email until orgs can be renamed.
    const org: OrgDoc = { _id: user.orgId, name: user.email, created_at: user.createdAt };
    const userDoc: UserDoc = {
      _id: user.id,
      org_id: user.orgId,
      email: user.email,
      password_hash: user.passwordHash,
      created_at: user.createdAt,
    };
    await this.#write(async (session) => {
      await this.#orgs.insertOne(org, { session });
      try {
        await this.#users.insertOne(userDoc, { session });
      } catch (err) {
        if (!isDuplicateKey(err)) throw err;
        // In a transaction the org goes with the abort; without one it is already in,
        // and would be an org without users.
        if (session === undefined) await this.#orgs.deleteOne({ _id: org._id });
        throw new GuardError('conflict', 'An account with that email already exists.');
      }
    });
    return user;
  }

  async findUserByEmail(email: string): Promise<User | undefined> {
    const doc = await this.#users.findOne({ email });
    return doc === null ? undefined : toUser(doc);
  }

  async findUserById(id: string): Promise<User | undefined> {
    const doc = await this.#users.findOne({ _id: id });
    return doc === null ? undefined : toUser(doc);
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
    // A duplicate key hash (a 240-bit collision) passes through as the driver's
    // error, as SQLite's constraint error does.
    await this.#agents.insertOne({
      _id: created.id,
      org_id: created.orgId,
      name: created.name,
      log_outputs: created.logOutputs,
      key_hash: agent.keyHash,
      api_key_prefix: created.apiKeyPrefix,
      created_at: created.createdAt,
      insert_order: new ObjectId(),
    });
    return created;
  }

  async listAgents(orgId: string): Promise<Agent[]> {
    const docs = await this.#agents.find({ org_id: orgId }, { projection: AGENT_PROJECTION, sort: CREATION_ORDER }).toArray();
    return docs.map(toAgent);
  }

  async getAgent(orgId: string, agentId: string): Promise<Agent | undefined> {
    const doc = await this.#agents.findOne({ _id: agentId, org_id: orgId }, { projection: AGENT_PROJECTION });
    return doc === null ? undefined : toAgent(doc);
  }

  async findAgentByKeyHash(keyHash: string): Promise<Agent | undefined> {
    const doc = await this.#agents.findOne({ key_hash: keyHash }, { projection: AGENT_PROJECTION });
    return doc === null ? undefined : toAgent(doc);
  }

  async deleteAgent(orgId: string, agentId: string): Promise<boolean> {
    const change = await this.#write(async (session): Promise<MetadataChange | undefined> => {
      // The agent goes first: without a transaction, its key stops resolving before
      // anything else happens, and a crash after this leaves only an unreachable policy.
      const doc = await this.#agents.findOneAndDelete(
        { _id: agentId, org_id: orgId },
        { projection: { key_hash: 1 }, session },
      );
      if (doc === null) return undefined;
      await this.#policies.deleteOne({ _id: agentId }, { session });
      const deleted: MetadataChange = { kind: 'agent', agentId, keyHash: doc.key_hash };
      await this.#recordChange(deleted, session);
      return deleted;
    });
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
    const doc: CredentialDoc = {
      _id: created.id,
      org_id: created.orgId,
      name: created.name,
      hostname: created.hostname,
      cred_type: created.credType,
      header_name: created.headerName,
      query_param: created.queryParam,
      sealed_value: credential.sealedValue,
      created_at: created.createdAt,
      insert_order: new ObjectId(),
    };
    const change: MetadataChange = { kind: 'credential', orgId: created.orgId, hostname: created.hostname };
    await this.#write(async (session) => {
      try {
        await this.#credentials.insertOne(doc, { session });
      } catch (err) {
        // Mapped here, not around the whole write: only this insert's duplicate is
        // the org's hostname being taken.
        if (isDuplicateKey(err)) throw new GuardError('conflict', 'A credential for that hostname already exists.');
        throw err;
      }
      await this.#recordChange(change, session);
    });
    // A proxy may hold a cached "no credential for this host".
    this.#notify(change);
    return created;
  }

  async listCredentials(orgId: string): Promise<Credential[]> {
    const docs = await this.#credentials
      .find({ org_id: orgId }, { projection: CREDENTIAL_PROJECTION, sort: CREATION_ORDER })
      .toArray();
    return docs.map(toCredential);
  }

  async deleteCredential(orgId: string, credentialId: string): Promise<boolean> {
    const change = await this.#write(async (session): Promise<MetadataChange | undefined> => {
      const doc = await this.#credentials.findOneAndDelete(
        { _id: credentialId, org_id: orgId },
        { projection: { hostname: 1 }, session },
      );
      if (doc === null) return undefined;
      const deleted: MetadataChange = { kind: 'credential', orgId, hostname: doc.hostname };
      await this.#recordChange(deleted, session);
      return deleted;
    });
    if (change === undefined) return false;
    this.#notify(change);
    return true;
  }

  async findCredentialForHost(orgId: string, hostname: string): Promise<SealedCredential | undefined> {
    const doc = await this.#credentials.findOne({ org_id: orgId, hostname });
    return doc === null ? undefined : { ...toCredential(doc), sealedValue: doc.sealed_value };
  }

  async getPolicy(agentId: string): Promise<PolicyRecord | undefined> {
    const doc = await this.#policies.findOne({ _id: agentId });
    return doc === null ? undefined : { agentId: doc._id, rulesYaml: doc.rules_yaml, updatedAt: doc.updated_at };
  }

  /** Throws GuardError('not_found') when the agent does not exist (e.g. deleted meanwhile). */
  async setPolicy(agentId: string, rulesYaml: string): Promise<PolicyRecord> {
    const policy: PolicyRecord = { agentId, rulesYaml, updatedAt: new Date().toISOString() };
    const change: MetadataChange = { kind: 'policy', agentId };
    await this.#write(async (session) => {
      // SQLite's foreign key, by hand. In a transaction a concurrent deleteAgent
      // conflicts with this one on the change counter, so one of them sees the other.
      if (!(await this.#agentExists(agentId, session))) throw new GuardError('not_found', 'Agent not found.');
      await this.#policies.updateOne(
        { _id: agentId },
        { $set: { rules_yaml: policy.rulesYaml, updated_at: policy.updatedAt } },
        { upsert: true, session },
      );
      await this.#recordChange(change, session);
    });
    if (!this.#replicated && !(await this.#agentExists(agentId, undefined))) {
      // Without a transaction the agent may have been deleted between the check and
      // the upsert: remove the orphan and answer as if the delete had come first.
      await this.#policies.deleteOne({ _id: agentId });
      throw new GuardError('not_found', 'Agent not found.');
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
   * Async, unlike SQLite's synchronous method: callers `await` it either way.
   *
   * The answer stops before a missing seq younger than CHANGE_GAP_GRACE_MS (a write
   * still in flight), so a poller that remembers the last seq it was given never skips
   * one. Entries older than an hour are expired by the TTL index, so a poller that fell
   * further behind than that must drop its whole cache instead.
   */
  async changesSince(seq: number, limit: number): Promise<ChangeEntry[]> {
    // MongoDB reads limit 0 as "no limit"; SQLite's LIMIT 0 returns nothing.
    if (limit <= 0) return [];
    const docs = await this.#changes
      .find({ seq: { $gt: seq } }, { projection: { _id: 0 }, sort: { seq: 1 }, limit })
      .toArray();
    const settledBefore = Date.now() - CHANGE_GAP_GRACE_MS;
    const entries: ChangeEntry[] = [];
    let expected = seq + 1;
    for (const doc of docs) {
      if (doc.seq !== expected && doc.at.getTime() > settledBefore) break;
      entries.push({ seq: doc.seq, change: toChange(doc) });
      expected = doc.seq + 1;
    }
    return entries;
  }

  /**
   * The highest change seq ever issued in this database (0 when none): a poller's
   * starting point. Async, unlike SQLite's synchronous method.
   */
  async lastChangeSeq(): Promise<number> {
    const counter = await this.#counters.findOne({ _id: CHANGES_COUNTER });
    return counter?.seq ?? 0;
  }

  /**
   * Delivers every change any process commits from now on, in seq order, through a
   * change stream on `changes`. Returns a stop function. On a standalone server (see
   * `canWatchChanges`) it delivers nothing and the caller polls `changesSince`. A
   * change committed before the stream starts is not delivered: call `changesSince`
   * once after subscribing. When the stream fails for good (the driver already resumes
   * it once after a network error), `onError` hears why and the caller falls back to
   * polling.
   */
  watchChanges(onChange: (entry: ChangeEntry) => void, onError?: (err: Error) => void): () => void {
    if (!this.#replicated || this.#closing !== undefined) return () => {};
    const stream = this.#changes.watch<ChangeDoc, ChangeStreamInsertDocument<ChangeDoc>>([
      { $match: { operationType: 'insert' } },
    ]);
    this.#streams.add(stream);
    const stop = () => {
      if (this.#streams.delete(stream)) void stream.close().catch(() => {});
    };
    stream.on('change', (event) => {
      let entry: ChangeEntry;
      try {
        entry = { seq: event.fullDocument.seq, change: toChange(event.fullDocument) };
      } catch (err) {
        // A malformed entry is skipped, not fatal: the ones after it still matter.
        process.emitWarning(err instanceof Error ? err : new Error(String(err)));
        return;
      }
      try {
        onChange(entry);
      } catch (err) {
        warnListenerThrew(entry.change, err);
      }
    });
    // Without an 'error' listener an EventEmitter error would crash the process.
    stream.on('error', (err) => {
      const ours = this.#streams.has(stream);
      stop();
      if (ours && onError !== undefined) onError(err);
    });
    return stop;
  }

  async ping(): Promise<void> {
    try {
      await this.#db.command({ ping: 1 });
    } catch {
      throw new GuardError('unavailable', 'The metadata database is not available.');
    }
  }

  async close(): Promise<void> {
    this.#closing ??= (async () => {
      const streams = [...this.#streams];
      this.#streams.clear();
      await Promise.all(streams.map((stream) => stream.close().catch(() => {})));
      await this.#client.close();
    })();
    return this.#closing;
  }

  /**
   * Runs `work` in a transaction on a replica set or sharded cluster, else directly.
   * `withTransaction` may run `work` more than once (transient conflicts), so `work`
   * has no effect outside the database; listeners are told after this resolves.
   */
  async #write<T>(work: (session: ClientSession | undefined) => Promise<T>): Promise<T> {
    if (!this.#replicated) return work(undefined);
    const session = this.#client.startSession();
    try {
      return await session.withTransaction((txn) => work(txn), TRANSACTION_OPTIONS);
    } finally {
      await session.endSession();
    }
  }

  async #agentExists(agentId: string, session: ClientSession | undefined): Promise<boolean> {
    return (await this.#agents.findOne({ _id: agentId }, { projection: { _id: 1 }, session })) !== null;
  }

  /** Appends a change entry; inside the mutation's transaction when there is one. */
  async #recordChange(change: MetadataChange, session: ClientSession | undefined): Promise<void> {
    const counter = await this.#counters.findOneAndUpdate(
      { _id: CHANGES_COUNTER },
      { $inc: { seq: 1 } },
      { upsert: true, returnDocument: 'after', session },
    );
    if (counter === null) throw new Error('The change counter upsert returned no document.');
    const entry: ChangeDoc = {
      seq: counter.seq,
      kind: change.kind,
      agent_id: null,
      key_hash: null,
      org_id: null,
      hostname: null,
      at: new Date(),
    };
    switch (change.kind) {
      case 'agent':
        entry.agent_id = change.agentId;
        entry.key_hash = change.keyHash;
        break;
      case 'policy':
        entry.agent_id = change.agentId;
        break;
      case 'credential':
        entry.org_id = change.orgId;
        entry.hostname = change.hostname;
        break;
    }
    await this.#changes.insertOne(entry, { session });
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
        warnListenerThrew(change, err);
      }
    }
  }
}

function warnListenerThrew(change: MetadataChange, err: unknown): void {
  const warning = new Error(
    `A metadata change listener threw (the ${change.kind} change is committed): ${err instanceof Error ? err.message : String(err)}`,
    { cause: err },
  );
  warning.name = 'MetadataChangeListenerWarning';
  process.emitWarning(warning);
}

/**
 * The database named by a connection string's path, if any. The driver's URL grammar
 * requires `/`, `?` and `@` in user names, passwords and socket paths to be
 * percent-encoded, so the first `/` after the scheme starts the path.
 */
export function databaseNameOf(url: string): string | undefined {
  const afterScheme = url.replace(/^mongodb(\+srv)?:\/\//, '');
  const slash = afterScheme.indexOf('/');
  if (slash === -1) return undefined;
  const pathAndQuery = afterScheme.slice(slash + 1);
  const query = pathAndQuery.indexOf('?');
  const name = decodeURIComponent(query === -1 ? pathAndQuery : pathAndQuery.slice(0, query));
  return name === '' ? undefined : name;
}

/** Whether the connection string's query sets `option` (names are case-insensitive). */
function hasUrlOption(url: string, option: string): boolean {
  const query = url.indexOf('?');
  if (query === -1) return false;
  const wanted = option.toLowerCase();
  return url
    .slice(query + 1)
    .split('&')
    .some((pair) => pair.split('=', 1)[0]!.toLowerCase() === wanted);
}

/** A replica set member or a mongos: transactions and change streams are available. */
async function isReplicated(db: Db): Promise<boolean> {
  let reply: Document;
  try {
    reply = await db.admin().command({ hello: 1 });
  } catch (err) {
    // `hello` arrived in 4.4.2 (and 4.2.10); older servers know only `isMaster`.
    if (!(err instanceof MongoServerError)) throw err;
    reply = await db.admin().command({ isMaster: 1 });
  }
  return typeof reply.setName === 'string' || reply.msg === 'isdbgrid';
}

/**
 * Creates the collections that do not exist yet, with their validators. Collections
 * are created here, not implicitly by a first insert, so that no transaction ever has
 * to create one (MongoDB allows that only from 4.4, and not under every read concern).
 */
async function createCollections(db: Db): Promise<void> {
  const existing = new Set(
    (await db.listCollections({}, { nameOnly: true }).toArray()).map((collection) => collection.name),
  );
  for (const name of COLLECTIONS) {
    if (existing.has(name)) continue;
    const validator = VALIDATORS[name];
    try {
      await db.createCollection(name, validator === undefined ? {} : { validator });
    } catch (err) {
      // Another process created it between the listing and here.
      if (!(err instanceof MongoServerError && err.code === NAMESPACE_EXISTS)) throw err;
    }
  }
}

/**
 * Idempotent: an index that exists with the same name and spec is left as it is. The
 * names follow the SQLite schema's.
 */
async function createIndexes(db: Db): Promise<void> {
  await db.collection('users').createIndexes([
    { key: { email: 1 }, name: 'users_by_email', unique: true },
    { key: { org_id: 1 }, name: 'users_by_org' },
  ]);
  await db.collection('agents').createIndexes([
    // Also the index of the proxy's key lookup.
    { key: { key_hash: 1 }, name: 'agents_by_key_hash', unique: true },
    { key: { org_id: 1, created_at: 1, insert_order: 1 }, name: 'agents_by_org_created' },
  ]);
  await db.collection('credentials').createIndexes([
    // Also the index of the injection lookup.
    { key: { org_id: 1, hostname: 1 }, name: 'credentials_by_org_hostname', unique: true },
    { key: { org_id: 1, created_at: 1, insert_order: 1 }, name: 'credentials_by_org_created' },
  ]);
  // policies: `_id` is the agent id, so the primary index is the lookup.
  await db.collection('changes').createIndexes([
    { key: { seq: 1 }, name: 'changes_by_seq', unique: true },
    // The TTL monitor runs about once a minute, so entries live an hour to an hour and a
    // minute. Changing the retention of an existing database needs a collMod: createIndexes
    // refuses the same index with other options.
    { key: { at: 1 }, name: 'changes_expire', expireAfterSeconds: CHANGE_RETENTION_SECONDS },
  ]);
}

function isDuplicateKey(err: unknown): boolean {
  return err instanceof MongoServerError && err.code === DUPLICATE_KEY;
}

/** Awaits `write`, treating a duplicate key (another process got there first) as done. */
async function ignoreDuplicateKey(write: Promise<unknown>): Promise<void> {
  try {
    await write;
  } catch (err) {
    if (!isDuplicateKey(err)) throw err;
  }
}

function toUser(doc: UserDoc): User {
  return { id: doc._id, orgId: doc.org_id, email: doc.email, passwordHash: doc.password_hash, createdAt: doc.created_at };
}

function toAgent(doc: AgentDoc): Agent {
  return {
    id: doc._id,
    orgId: doc.org_id,
    name: doc.name,
    apiKeyPrefix: doc.api_key_prefix,
    // The collection's validator admits only LogOutputs values.
    logOutputs: doc.log_outputs as LogOutputs,
    createdAt: doc.created_at,
  };
}

function toCredential(doc: CredentialDoc): Credential {
  return {
    id: doc._id,
    orgId: doc.org_id,
    name: doc.name,
    hostname: doc.hostname,
    // The collection's validator admits only CredType values.
    credType: doc.cred_type as CredType,
    headerName: doc.header_name ?? null,
    queryParam: doc.query_param ?? null,
    createdAt: doc.created_at,
  };
}

function toChange(doc: ChangeDoc): MetadataChange {
  if (doc.kind === 'agent' && typeof doc.agent_id === 'string' && typeof doc.key_hash === 'string') {
    return { kind: 'agent', agentId: doc.agent_id, keyHash: doc.key_hash };
  }
  if (doc.kind === 'policy' && typeof doc.agent_id === 'string') return { kind: 'policy', agentId: doc.agent_id };
  if (doc.kind === 'credential' && typeof doc.org_id === 'string' && typeof doc.hostname === 'string') {
    return { kind: 'credential', orgId: doc.org_id, hostname: doc.hostname };
  }
  throw new Error(`Malformed change entry ${doc.seq} of kind ${doc.kind}.`);
}
