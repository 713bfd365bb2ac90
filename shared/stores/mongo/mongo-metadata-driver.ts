// The metadata driver over MongoDB (driver v6), for split mode: any number of proxy
// processes and one admin process share one database. It stores what the SQLite
// driver stores (same rows, same refusals, same `changes` log) and the core over it
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
//   processes then hold the stale entry until their cache TTL. Followers poll
//   `changesSince`.
//
// Documents are the core's rows with `_id` = the record's UUID string; timestamps are
// ISO 8601 strings, except `changes.at`, which is a BSON Date because a TTL index only
// expires Date values.
import { isDeepStrictEqual } from 'node:util';
import {
  Binary,
  type ChangeStream,
  type ChangeStreamInsertDocument,
  type ClientSession,
  type Collection,
  type Db,
  type Document,
  MongoClient,
  MongoNetworkError,
  MongoNotConnectedError,
  MongoServerError,
  MongoServerSelectionError,
  ObjectId,
  type TransactionOptions,
} from 'mongodb';
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
  type RateSync,
  type RateSyncResult,
  type Refusal,
  type SealedCredentialRow,
  type SealHeadRow,
  type UserRow,
} from '../metadata-driver.js';
import { guardBoundary, unreachableClassifier } from '../store-boundary.js';

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
/** The user may not run the command (collMod needs dbAdmin, not readWrite). */
const UNAUTHORIZED = 13;

const COLLECTIONS = ['orgs', 'users', 'agents', 'credentials', 'policies', 'changes', 'counters', 'approvals'] as const;
type CollectionName = (typeof COLLECTIONS)[number];

/**
 * Document validators, applied when the driver creates a collection: the enum checks
 * of the SQLite schema, which the core's read mappers rely on.
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
      properties: { kind: { enum: ['agent', 'policy', 'credential', 'approval'] }, at: { bsonType: 'date' } },
    },
  },
  approvals: {
    $jsonSchema: {
      bsonType: 'object',
      required: ['org_id', 'agent_id', 'status', 'created_at', 'expires_at', 'body_sha256', 'body_bytes'],
      properties: { status: { enum: ['pending', 'approved', 'denied', 'used'] } },
    },
  },
};

/**
 * Validators that an earlier version created differently: brought up to date at
 * open with collMod (idempotent). `changes` learnt the 'approval' kind.
 */
const UPDATED_VALIDATORS: readonly CollectionName[] = ['changes'];

/** A row as stored: its `id` is the document's `_id`. */
type Doc<R extends { id: string }> = Omit<R, 'id'> & { _id: string };

/**
 * `insert_order` breaks ties between records created in the same millisecond, as
 * SQLite's rowid does: an ObjectId's trailing counter increases with every id a process
 * makes, so one process's records list in the order it created them.
 */
type AgentDoc = Doc<NewAgentRow> & { insert_order: ObjectId };
type CredentialDoc = Doc<SealedCredentialRow> & { insert_order: ObjectId };

/** `_id` is the agent id: one policy per agent. */
interface PolicyDoc {
  _id: string;
  rules_yaml: string;
  updated_at: string;
}

/** `insert_order` as for agents: ties in created_at list in creation order. */
/** `_id` is `<org_id>:<writer>`: one head per chain. */
type SealHeadDoc = SealHeadRow & { _id: string };
type ApprovalDoc = Doc<ApprovalRow> & { body: Binary | null; used_at: string | null; insert_order: ObjectId };
const APPROVAL_PROJECTION = { body: 0, used_at: 0, insert_order: 0 } as const;

/** `_id` is left to the driver (an ObjectId); `seq` has its own unique index. */
type ChangeDoc = ChangeRow & { seq: number; at: Date };

interface CounterDoc {
  _id: string;
  seq: number;
}

/** One rate-limit count: `_id` is the (limit, agent, slot) it counts; dates let a TTL index drop it. */
interface RateCountDoc {
  _id: { k: string; a: string; s: number };
  count: number;
  expires_at: Date;
  updated_at: Date;
}

interface RateNodeDoc {
  _id: string;
  seen_at: Date;
}

const CHANGES_COUNTER = 'changes';

const AGENT_PROJECTION = { key_hash: 0 } as const;
const CREDENTIAL_PROJECTION = { sealed_value: 0 } as const;
/** Oldest first; see AgentDoc.insert_order. */
const CREATION_ORDER = { created_at: 1, insert_order: 1 } as const;

/**
 * The failures that mean the server cannot be reached: no server selectable, the
 * connection lost or timed out, the client not connected; and the socket errors
 * beneath them.
 */
const classify = unreachableClassifier(
  'metadata database',
  (err) =>
    err instanceof MongoNetworkError ||
    err instanceof MongoServerSelectionError ||
    err instanceof MongoNotConnectedError ||
    ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT'].includes(String((err as { code?: unknown } | null)?.code)),
);

export class MongoMetadataDriver implements MetadataDriver {
  readonly #client: MongoClient;
  readonly #db: Db;
  readonly #orgs: Collection<Doc<OrgRow>>;
  readonly #users: Collection<Doc<UserRow>>;
  readonly #agents: Collection<AgentDoc>;
  readonly #credentials: Collection<CredentialDoc>;
  readonly #policies: Collection<PolicyDoc>;
  readonly #changes: Collection<ChangeDoc>;
  readonly #counters: Collection<CounterDoc>;
  readonly #rateCounts: Collection<RateCountDoc>;
  readonly #rateNodes: Collection<RateNodeDoc>;
  readonly #approvals: Collection<ApprovalDoc>;
  readonly #sealHeads: Collection<SealHeadDoc>;
  /** A replica set or sharded cluster: transactions and change streams work. */
  readonly #replicated: boolean;
  readonly #streams = new Set<ChangeStream<ChangeDoc, ChangeStreamInsertDocument<ChangeDoc>>>();
  #closing: Promise<void> | undefined;

  private constructor(client: MongoClient, db: Db, replicated: boolean) {
    this.#client = client;
    this.#db = db;
    this.#orgs = db.collection('orgs');
    this.#users = db.collection('users');
    this.#agents = db.collection('agents');
    this.#credentials = db.collection('credentials');
    this.#policies = db.collection('policies');
    this.#changes = db.collection('changes');
    this.#counters = db.collection('counters');
    this.#rateCounts = db.collection('rate_counts');
    this.#rateNodes = db.collection('rate_nodes');
    this.#approvals = db.collection('approvals');
    this.#sealHeads = db.collection('seal_heads');
    this.#replicated = replicated;
  }

  /**
   * Connects, and creates the collections, indexes and change counter that are
   * missing (safe to run from several processes at once, and on every start).
   *
   * The database is `database` when given (tests use a fresh one per run), else the
   * URL's path (`mongodb://host/<database>`), else `tool_call_guard`. Wire compression:
   * zstd when the server offers it, else zlib (the server picks the first of the
   * client's list it supports). The driver returned throws StoreUnavailableError when
   * the server cannot be reached, and so does opening.
   */
  static async open(url: string, database?: string): Promise<MongoMetadataDriver> {
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
      // When this database began to seal audit batches (the first open of a version that seals).
      await ignoreDuplicateKey(
        db.collection<{ _id: string; value: string }>('audit_meta').updateOne({ _id: 'sealing_started_at' }, { $setOnInsert: { value: new Date().toISOString() } }, { upsert: true }),
      );
      // The counter exists before any transaction needs it: an upsert that inserts
      // inside a transaction conflicts with every other one doing the same.
      await ignoreDuplicateKey(
        db.collection<CounterDoc>('counters').updateOne({ _id: CHANGES_COUNTER }, { $setOnInsert: { seq: 0 } }, { upsert: true }),
      );
      return guardBoundary(new MongoMetadataDriver(client, db, replicated), classify);
    } catch (err) {
      await client.close().catch(() => {});
      throw classify(err);
    }
  }

  /** True on a replica set or sharded cluster, where `watchChanges` delivers changes. */
  get canWatchChanges(): boolean {
    return this.#replicated;
  }

  async insertUserWithOrg(org: OrgRow, user: UserRow): Promise<'written' | 'unique_violation'> {
    return this.#write<'written', 'unique_violation'>(async (session) => {
      await this.#orgs.insertOne(docOf(org), { session });
      try {
        await this.#users.insertOne(docOf(user), { session });
      } catch (err) {
        if (!isDuplicateKey(err)) throw err;
        // In a transaction the org goes with the abort; without one it is already in,
        // and would be an org without users.
        if (session === undefined) await this.#orgs.deleteOne({ _id: org.id });
        throw new Refused('unique_violation');
      }
      return 'written';
    });
  }

  async userByEmail(email: string): Promise<UserRow | undefined> {
    return rowOf(await this.#users.findOne({ email }));
  }

  async userById(id: string): Promise<UserRow | undefined> {
    return rowOf(await this.#users.findOne({ _id: id }));
  }

  async insertAgent(row: NewAgentRow, maxInOrg: number): Promise<'written' | 'org_full'> {
    // Counted, then written: two creates at once may pass the bound by one each (no transaction serialises them).
    if ((await this.#agents.countDocuments({ org_id: row.org_id }, { limit: maxInOrg })) >= maxInOrg) return 'org_full';
    await this.#agents.insertOne({ ...docOf(row), insert_order: new ObjectId() });
    return 'written';
  }

  async agentsByOrg(orgId: string): Promise<AgentRow[]> {
    const docs = await this.#agents.find({ org_id: orgId }, { projection: AGENT_PROJECTION, sort: CREATION_ORDER }).toArray();
    return docs.map((doc) => rowOf(doc));
  }

  async agentInOrg(orgId: string, agentId: string): Promise<AgentRow | undefined> {
    return rowOf(await this.#agents.findOne({ _id: agentId, org_id: orgId }, { projection: AGENT_PROJECTION }));
  }

  async agentByKeyHash(keyHash: string): Promise<AgentRow | undefined> {
    return rowOf(await this.#agents.findOne({ key_hash: keyHash }, { projection: AGENT_PROJECTION }));
  }

  async agentExists(agentId: string): Promise<boolean> {
    return (await this.#agents.findOne({ _id: agentId }, { projection: { _id: 1 } })) !== null;
  }

  async deleteAgentInOrg(orgId: string, agentId: string, changeOf: (keyHash: string) => MetadataChange): Promise<MetadataChange | undefined> {
    return this.#write<MetadataChange | undefined>(async (session) => {
      // The agent goes first: without a transaction, its key stops resolving before
      // anything else happens, and a crash after this leaves only an unreachable policy.
      const doc = await this.#agents.findOneAndDelete({ _id: agentId, org_id: orgId }, { projection: { key_hash: 1 }, session });
      if (doc === null) return undefined;
      await this.#policies.deleteOne({ _id: agentId }, { session });
      return this.#recordChange(changeOf(doc.key_hash), session);
    });
  }

  async insertCredential(row: SealedCredentialRow, change: MetadataChange, maxInOrg: number): Promise<'written' | 'unique_violation' | 'org_full'> {
    return this.#write<'written', 'unique_violation' | 'org_full'>(async (session) => {
      // Counted, then written: creates at the same moment may pass the bound by a few (a transaction does not serialise two counts).
      if ((await this.#credentials.countDocuments({ org_id: row.org_id }, { limit: maxInOrg, session })) >= maxInOrg) throw new Refused('org_full');
      try {
        await this.#credentials.insertOne({ ...docOf(row), insert_order: new ObjectId() }, { session });
      } catch (err) {
        // Mapped here, not around the whole write: only this insert's duplicate is
        // the org's hostname being taken.
        if (isDuplicateKey(err)) throw new Refused('unique_violation');
        throw err;
      }
      await this.#recordChange(change, session);
      return 'written';
    });
  }

  async credentialsByOrg(orgId: string): Promise<CredentialRow[]> {
    const docs = await this.#credentials
      .find({ org_id: orgId }, { projection: CREDENTIAL_PROJECTION, sort: CREATION_ORDER })
      .toArray();
    return docs.map((doc) => rowOf(doc));
  }

  async credentialForHost(orgId: string, hostname: string): Promise<SealedCredentialRow | undefined> {
    return rowOf(await this.#credentials.findOne({ org_id: orgId, hostname }));
  }

  async anyCredential(): Promise<SealedCredentialRow | undefined> {
    return rowOf(await this.#credentials.findOne({}));
  }

  async deleteCredentialInOrg(orgId: string, credentialId: string, changeOf: (hostname: string) => MetadataChange): Promise<MetadataChange | undefined> {
    return this.#write<MetadataChange | undefined>(async (session) => {
      const doc = await this.#credentials.findOneAndDelete({ _id: credentialId, org_id: orgId }, { projection: { hostname: 1 }, session });
      if (doc === null) return undefined;
      return this.#recordChange(changeOf(doc.hostname), session);
    });
  }

  async policyByAgent(agentId: string): Promise<PolicyRow | undefined> {
    const doc = await this.#policies.findOne({ _id: agentId });
    return doc === null ? undefined : { agent_id: doc._id, rules_yaml: doc.rules_yaml, updated_at: doc.updated_at };
  }

  async upsertPolicy(row: PolicyRow, change: MetadataChange): Promise<'written' | 'missing_parent'> {
    const agentId = row.agent_id;
    const outcome = await this.#write<'written', 'missing_parent'>(async (session) => {
      // SQLite's foreign key, by hand. In a transaction a concurrent deleteAgent
      // conflicts with this one on the change counter, so one of them sees the other.
      if (!(await this.#agentExists(agentId, session))) throw new Refused('missing_parent');
      await this.#policies.updateOne(
        { _id: agentId },
        { $set: { rules_yaml: row.rules_yaml, updated_at: row.updated_at } },
        { upsert: true, session },
      );
      await this.#recordChange(change, session);
      return 'written';
    });
    if (outcome === 'written' && !this.#replicated && !(await this.#agentExists(agentId, undefined))) {
      // Without a transaction the agent may have been deleted between the check and
      // the upsert: remove the orphan and answer as if the delete had come first.
      await this.#policies.deleteOne({ _id: agentId });
      return 'missing_parent';
    }
    return outcome;
  }

  /**
   * The answer stops before a missing seq younger than CHANGE_GAP_GRACE_MS (a write
   * still in flight), so a poller that remembers the last seq it was given never skips
   * one. Entries older than an hour are expired by the TTL index, so a poller that fell
   * further behind than that must drop its whole cache instead.
   */
  async changesSince(seq: number, limit: number): Promise<ChangeEntry[]> {
    // MongoDB reads limit 0 as "no limit"; SQLite's LIMIT 0 returns nothing.
    if (limit <= 0) return [];
    const docs = await this.#changes.find({ seq: { $gt: seq } }, { projection: { _id: 0 }, sort: { seq: 1 }, limit }).toArray();
    const settledBefore = Date.now() - CHANGE_GAP_GRACE_MS;
    const entries: ChangeEntry[] = [];
    let expected = seq + 1;
    for (const doc of docs) {
      if (doc.seq !== expected && doc.at.getTime() > settledBefore) break;
      entries.push(changeEntry(doc.seq, doc));
      expected = doc.seq + 1;
    }
    return entries;
  }

  async lastChangeSeq(): Promise<number> {
    const counter = await this.#counters.findOne({ _id: CHANGES_COUNTER });
    return counter?.seq ?? 0;
  }

  /**
   * Delivers every change any process commits from now on, in seq order, through a
   * change stream on `changes`. Returns a stop function. On a standalone server (see
   * `canWatchChanges`) it delivers nothing and followers poll `changesSince`. A change
   * committed before the stream starts is not delivered: read `changesSince` once after
   * subscribing. When the stream fails for good (the driver already resumes it once
   * after a network error), `onError` hears why.
   */
  watchChanges(onEntry: (entry: ChangeEntry) => void, onError: (err: unknown) => void): () => void {
    if (!this.#replicated || this.#closing !== undefined) return () => {};
    const stream = this.#changes.watch<ChangeDoc, ChangeStreamInsertDocument<ChangeDoc>>([{ $match: { operationType: 'insert' } }]);
    this.#streams.add(stream);
    const stop = () => {
      if (this.#streams.delete(stream)) void stream.close().catch(() => {});
    };
    stream.on('change', (event) => {
      let entry: ChangeEntry;
      try {
        entry = changeEntry(event.fullDocument.seq, event.fullDocument);
      } catch (err) {
        // A malformed entry is skipped, not fatal: the ones after it still matter.
        process.emitWarning(err instanceof Error ? err : new Error(String(err)));
        return;
      }
      onEntry(entry);
    });
    // Without an 'error' listener an EventEmitter error would crash the process.
    stream.on('error', (err) => {
      const ours = this.#streams.has(stream);
      stop();
      if (ours) onError(classify(err));
    });
    return stop;
  }

  /** Counted, then inserted: a burst may pass the bound by the inserts in flight (documented). */
  async insertApproval(row: ApprovalRow, body: Buffer | null, maxPending: number): Promise<'written' | 'too_many'> {
    const pending = await this.#approvals.countDocuments(
      { org_id: row.org_id, agent_id: row.agent_id, status: 'pending', expires_at: { $gt: row.created_at } },
      { limit: maxPending },
    );
    if (pending >= maxPending) return 'too_many';
    // Bodies of approvals that expired unused (as the SQLite driver; the partial index finds them).
    await this.#approvals.updateMany({ body: { $type: 'binData' }, expires_at: { $lte: row.created_at } }, { $set: { body: null } });
    await this.#approvals.insertOne({ ...docOf(row), body: body === null ? null : new Binary(body), used_at: null, insert_order: new ObjectId() });
    return 'written';
  }

  async approvalInOrg(orgId: string, id: string): Promise<ApprovalRow | undefined> {
    return rowOf(await this.#approvals.findOne({ _id: id, org_id: orgId }, { projection: APPROVAL_PROJECTION }));
  }

  async approvalBody(orgId: string, id: string): Promise<Buffer | null> {
    const doc = await this.#approvals.findOne({ _id: id, org_id: orgId }, { projection: { body: 1 } });
    return doc?.body ? Buffer.from(doc.body.buffer) : null;
  }

  async approvals(query: ApprovalQuery): Promise<ApprovalRow[]> {
    const filter: Document = { org_id: query.org_id };
    if (query.statuses !== null) filter.status = { $in: [...query.statuses] };
    if (query.expires_after !== null) filter.expires_at = { $gt: query.expires_after };
    if (query.expired_by !== null) filter.expires_at = { $lte: query.expired_by };
    if (query.agent_id !== null) filter.agent_id = query.agent_id;
    if (query.created_since !== null || query.created_until !== null) {
      filter.created_at = {
        ...(query.created_since !== null ? { $gte: query.created_since } : {}),
        ...(query.created_until !== null ? { $lt: query.created_until } : {}),
      };
    }
    if (query.limit <= 0) return [];
    const docs = await this.#approvals
      .find(filter, { projection: APPROVAL_PROJECTION, sort: { created_at: -1, insert_order: -1 }, limit: query.limit })
      .toArray();
    return docs.map((doc) => rowOf(doc));
  }

  /** One conditional update (atomic on any deployment); the change entry in its transaction where there is one. */
  async decideApproval(orgId: string, id: string, decision: ApprovalDecision, change: MetadataChange): Promise<'written' | 'missing' | 'not_pending'> {
    return this.#write<'written' | 'missing' | 'not_pending'>(async (session) => {
      const { now, ...fields } = decision;
      // A denied call's body is dropped: nothing will forward it.
      const updated = await this.#approvals.updateOne(
        { _id: id, org_id: orgId, status: 'pending', expires_at: { $gt: now } },
        { $set: fields.status === 'denied' ? { ...fields, body: null } : fields },
        { session },
      );
      if (updated.modifiedCount === 1) {
        await this.#recordChange(change, session);
        return 'written';
      }
      const exists = await this.#approvals.findOne({ _id: id, org_id: orgId }, { projection: { _id: 1 }, session });
      return exists === null ? 'missing' : 'not_pending';
    });
  }

  /** Each head moves only forward: the filter matches a lower seq, or nothing and the upsert inserts (a duplicate key then means the stored head is ahead). */
  async recordSealHeads(heads: readonly SealHeadRow[]): Promise<void> {
    for (const head of heads) {
      const _id = `${head.org_id}:${head.writer}`;
      await ignoreDuplicateKey(this.#sealHeads.updateOne({ _id, seq: { $lt: head.seq } }, { $set: { ...head } }, { upsert: true }));
    }
  }

  async sealingStartedAt(): Promise<string | null> {
    const doc = await this.#db.collection<{ _id: string; value: string }>('audit_meta').findOne({ _id: 'sealing_started_at' });
    return doc?.value ?? null;
  }

  async sealHeads(orgId: string): Promise<SealHeadRow[]> {
    return (await this.#sealHeads.find({ org_id: orgId }, { projection: { _id: 0 } }).toArray()) as SealHeadRow[];
  }

  async orgCreatedAt(orgId: string): Promise<string | null> {
    return (await this.#orgs.findOne({ _id: orgId }, { projection: { created_at: 1 } }))?.created_at ?? null;
  }

  async sealHeadOrgs(): Promise<string[]> {
    return ((await this.#sealHeads.distinct('org_id')) as string[]).sort();
  }

  /** One conditional update: of two racing retries exactly one matches 'approved'. */
  async useApproval(orgId: string, id: string, now: string): Promise<boolean> {
    const updated = await this.#approvals.updateOne(
      { _id: id, org_id: orgId, status: 'approved', expires_at: { $gt: now } },
      { $set: { status: 'used', used_at: now, body: null } },
    );
    return updated.modifiedCount === 1;
  }

  async returnApproval(orgId: string, id: string): Promise<boolean> {
    const updated = await this.#approvals.updateOne({ _id: id, org_id: orgId, status: 'used' }, { $set: { status: 'approved', used_at: null } });
    return updated.modifiedCount === 1;
  }

  /**
   * Each count is one atomic $inc (no transaction: a count added twice by a
   * retried write over-counts, which only refuses early); the totals are read
   * after the adds, so they include this node's.
   */
  async syncRateCounts(sync: RateSync): Promise<RateSyncResult> {
    const now = new Date(sync.now);
    await this.#rateNodes.updateOne({ _id: sync.node_id }, { $set: { seen_at: now } }, { upsert: true });
    if (sync.add.length > 0) {
      await this.#rateCounts.bulkWrite(
        sync.add.map((row) => ({
          updateOne: {
            filter: { _id: { k: row.limit_key, a: row.agent_id, s: row.slot } },
            update: { $inc: { count: row.count }, $set: { expires_at: new Date(row.expires_at), updated_at: now } },
            upsert: true,
          },
        })),
        { ordered: false },
      );
    }
    const [nodes, rows] = await Promise.all([
      this.#rateNodes.find({ seen_at: { $gt: new Date(sync.live_after) } }, { projection: { _id: 1 } }).sort({ _id: 1 }).toArray(),
      this.#rateCounts.find({ updated_at: { $gte: new Date(sync.changed_since) }, expires_at: { $gt: now } }).toArray(),
    ]);
    return {
      nodes: nodes.map((doc) => doc._id),
      rows: rows.map((doc) => ({ limit_key: doc._id.k, agent_id: doc._id.a, slot: doc._id.s, count: doc.count, expires_at: doc.expires_at.getTime() })),
    };
  }

  async ping(): Promise<void> {
    await this.#db.command({ ping: 1 });
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
   * has no effect outside the database. A Refused thrown by `work` aborts the
   * transaction and is answered as its refusal.
   */
  async #write<T, R extends Refusal = never>(work: (session: ClientSession | undefined) => Promise<T>): Promise<T | R> {
    try {
      if (!this.#replicated) return await work(undefined);
      const session = this.#client.startSession();
      try {
        return await session.withTransaction((txn) => work(txn), TRANSACTION_OPTIONS);
      } finally {
        await session.endSession();
      }
    } catch (err) {
      // `work` throws only the refusals its caller names in R.
      if (err instanceof Refused) return err.refusal as R;
      throw err;
    }
  }

  async #agentExists(agentId: string, session: ClientSession | undefined): Promise<boolean> {
    return (await this.#agents.findOne({ _id: agentId }, { projection: { _id: 1 }, session })) !== null;
  }

  /** Appends a change entry; inside the mutation's transaction when there is one. */
  async #recordChange(change: MetadataChange, session: ClientSession | undefined): Promise<MetadataChange> {
    const counter = await this.#counters.findOneAndUpdate(
      { _id: CHANGES_COUNTER },
      { $inc: { seq: 1 } },
      { upsert: true, returnDocument: 'after', session },
    );
    if (counter === null) throw new Error('The change counter upsert returned no document.');
    await this.#changes.insertOne({ ...changeRow(change), seq: counter.seq, at: new Date() }, { session });
    return change;
  }
}

/** Thrown inside a write to abort its transaction; #write answers with the refusal. */
class Refused extends Error {
  constructor(readonly refusal: Refusal) {
    super(refusal);
  }
}

function docOf<R extends { id: string }>({ id, ...rest }: R): Omit<R, 'id'> & { _id: string } {
  return { ...rest, _id: id };
}

function rowOf<D extends { _id: string }>(doc: D): Omit<D, '_id'> & { id: string };
function rowOf<D extends { _id: string }>(doc: D | null): (Omit<D, '_id'> & { id: string }) | undefined;
function rowOf<D extends { _id: string }>(doc: D | null): (Omit<D, '_id'> & { id: string }) | undefined {
  if (doc === null) return undefined;
  const { _id, ...rest } = doc;
  return { ...rest, id: _id };
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
  const listed = await db.listCollections({}, { nameOnly: false }).toArray();
  const existing = new Set(listed.map((collection) => collection.name));
  const validatorOf = new Map(listed.map((collection) => [collection.name, (collection as { options?: { validator?: unknown } }).options?.validator]));
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
  for (const name of UPDATED_VALIDATORS) {
    // Only when it differs: collMod needs a privilege the readWrite role lacks, and
    // running it at every start stopped a least-privileged user's every restart
    // (now only the one start that brings the new validator needs it).
    if (!existing.has(name) || isDeepStrictEqual(validatorOf.get(name), VALIDATORS[name])) continue;
    try {
      await db.command({ collMod: name, validator: VALIDATORS[name] });
    } catch (err) {
      // The older validator would refuse this version's writes (the changes of
      // approval decisions): a start that cannot update it says so and stops.
      if (err instanceof MongoServerError && err.code === UNAUTHORIZED) {
        throw new Error(`the '${name}' collection's validator needs this version's update (collMod), which this MongoDB user may not run: start once as a user with the dbAdmin role on the database, then the readWrite user starts as before`);
      }
      throw err;
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
  await db.collection('approvals').createIndexes([
    { key: { org_id: 1, created_at: -1, insert_order: -1 }, name: 'approvals_by_org_created' },
    // Listing by status (the console's inbox, every PDF) without walking the org's decided history.
    { key: { org_id: 1, status: 1, created_at: -1, insert_order: -1 }, name: 'approvals_by_org_status_created' },
    { key: { agent_id: 1, status: 1, expires_at: 1 }, name: 'approvals_by_agent_status' },
    { key: { expires_at: 1 }, name: 'approvals_holding_body', partialFilterExpression: { body: { $type: 'binData' } } },
  ]);
  // Rate-limit counts go when their slot leaves every window; readers skip expired ones meanwhile.
  await db.collection('rate_counts').createIndexes([
    { key: { expires_at: 1 }, name: 'rate_counts_expire', expireAfterSeconds: 0 },
    { key: { updated_at: 1 }, name: 'rate_counts_by_updated' },
  ]);
  await db.collection('rate_nodes').createIndexes([{ key: { seen_at: 1 }, name: 'rate_nodes_expire', expireAfterSeconds: 3600 }]);
  await db.collection('seal_heads').createIndexes([{ key: { org_id: 1 }, name: 'seal_heads_by_org' }]);
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
