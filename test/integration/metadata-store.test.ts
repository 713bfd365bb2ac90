// The metadata store contract against every driver, and what only the SQLite one
// promises (its file, its schema version, its change log for other processes).
// The MongoDB runs need a server: set MONGODB_URL (each run uses, then drops, a fresh
// database on it).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { type Db, type Document, MongoClient } from 'mongodb';
import t, { type Test } from 'tap';
import { GuardError, StoreUnavailableError } from '../../shared/errors.js';
import type { ChangeEntry } from '../../shared/stores/change-feed.js';
import type { MetadataDriver } from '../../shared/stores/metadata-driver.js';
import { createMetadataStore, type MetadataStore } from '../../shared/stores/metadata-store.js';
import { databaseNameOf, DEFAULT_DATABASE, MongoMetadataDriver } from '../../shared/stores/mongo/mongo-metadata-driver.js';
import { approvalsSql, classifySqliteError, SCHEMA_VERSION, SqliteMetadataDriver, type SqliteDriverOptions } from '../../shared/stores/sqlite/sqlite-metadata-driver.js';
import type { MetadataChange } from '../../shared/types.js';
import { metadataStoreContract, newCredential } from './metadata-store.contract.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'guard-metadata-store-'));
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));

let fileCount = 0;
/** A path for a database file that does not exist yet. */
function freshFile(): string {
  fileCount += 1;
  return path.join(dir, `metadata-${fileCount}.db`);
}

/** A second, plain connection to the file, to look at what the store wrote. */
function inspect<T>(file: string, look: (db: Database.Database) => T): T {
  const db = new Database(file);
  try {
    return look(db);
  } finally {
    db.close();
  }
}

/** The store over `driver`, with the driver beside it for what only a driver offers (its change log). */
function storeOver<D extends MetadataDriver>(driver: D): MetadataStore & { driver: D } {
  return Object.assign(createMetadataStore(driver), { driver });
}

function openSqlite(file: string, options?: SqliteDriverOptions): MetadataStore & { driver: SqliteMetadataDriver } {
  return storeOver(SqliteMetadataDriver.open(file, options));
}

metadataStoreContract(t, 'sqlite', {
  open: async () => openSqlite(freshFile()),
  openTwo: async () => {
    const file = freshFile();
    return [openSqlite(file), openSqlite(file)];
  },
  // Another process holds the write lock for longer than the store waits for it.
  openUnreachable: async (t) => {
    const file = freshFile();
    const store = openSqlite(file, { busyTimeoutMs: 50 });
    const holder = new Database(file);
    holder.exec('BEGIN IMMEDIATE');
    t.teardown(() => {
      holder.exec('ROLLBACK');
      holder.close();
    });
    return store;
  },
});

t.test('mongodb: a server that cannot be reached fails the open with StoreUnavailableError', async (t) => {
  // Nothing listens on port 1; the selection timeout keeps the test short.
  const err = await MongoMetadataDriver.open('mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300', 'unreachable').then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof StoreUnavailableError, String(err));
  t.equal((err as Error).cause?.constructor.name, 'MongoServerSelectionError', "the driver's error is the cause");
});

t.test('mongodb: the database is the URL path, decoded, else the default', async (t) => {
  t.equal(databaseNameOf('mongodb://localhost:27017/guard?replicaSet=rs0'), 'guard');
  t.equal(databaseNameOf('mongodb://u%2Fser:p%40ss@h1:27017,h2:27018/my%20db'), 'my db');
  t.equal(databaseNameOf('mongodb+srv://cluster0.example.net/guard'), 'guard');
  t.equal(databaseNameOf('mongodb://localhost:27017/?replicaSet=rs0'), undefined);
  t.equal(databaseNameOf('mongodb://localhost:27017'), undefined);
  t.equal(DEFAULT_DATABASE, 'tool_call_guard');
});

const mongodbUrl = process.env.MONGODB_URL;
if (mongodbUrl === undefined) {
  t.comment('MongoDB store contract skipped: MONGODB_URL is not set');
} else {
  // Every store of this run shares one fresh database; the contract's tests keep to
  // their own orgs, and the tests below count change seqs from where they start.
  const database = `guard_test_${randomUUID().replaceAll('-', '')}`;
  const openMongo = async () => storeOver(await MongoMetadataDriver.open(mongodbUrl, database));

  /** A plain client on the run's database, to look at (or tamper with) what the store wrote. */
  async function inspectMongo<T>(look: (db: Db) => Promise<T>): Promise<T> {
    const client = new MongoClient(mongodbUrl!);
    try {
      return await look(client.db(database));
    } finally {
      await client.close();
    }
  }

  t.teardown(() => inspectMongo((db) => db.dropDatabase()));

  metadataStoreContract(t, 'mongodb', {
    open: openMongo,
    openTwo: async () => [await openMongo(), await openMongo()],
    openUnreachable: async () => storeOver(await MongoMetadataDriver.open('mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300', database)),
  });

  t.test('mongodb: open creates the indexes of every lookup, and opening again is harmless', async (t) => {
    const first = await openMongo();
    await first.close();
    const store = await openMongo();
    t.teardown(() => store.close());
    const indexes = await inspectMongo(async (db) => {
      const byName: Record<string, Document> = {};
      for (const name of ['users', 'agents', 'credentials', 'changes']) {
        for (const index of await db.collection(name).listIndexes().toArray()) byName[String(index.name)] = index;
      }
      return byName;
    });
    t.match(indexes.users_by_email, { key: { email: 1 }, unique: true });
    t.match(indexes.agents_by_key_hash, { key: { key_hash: 1 }, unique: true });
    t.match(indexes.agents_by_org_created, { key: { org_id: 1, created_at: 1, insert_order: 1 } });
    t.match(indexes.credentials_by_org_hostname, { key: { org_id: 1, hostname: 1 }, unique: true });
    t.match(indexes.credentials_by_org_created, { key: { org_id: 1, created_at: 1, insert_order: 1 } });
    t.match(indexes.changes_by_seq, { key: { seq: 1 }, unique: true });
    t.match(indexes.changes_expire, { key: { at: 1 }, expireAfterSeconds: 3600 });
  });

  t.test('mongodb: changesSince returns the committed changes in order, from any process', async (t) => {
    const writer = await openMongo();
    // A second store stands in for another proxy process.
    const reader = await openMongo();
    t.teardown(async () => {
      await writer.close();
      await reader.close();
    });

    const base = await reader.driver.lastChangeSeq();
    t.same(await reader.driver.changesSince(base, 100), [], 'nothing after the last seq');

    const user = await writer.createUserWithOrg(`changes-${randomUUID()}@example.test`, 'hash');
    const hash = randomBytes(32).toString('hex');
    const agent = await writer.createAgent({
      orgId: user.orgId,
      name: 'a',
      logOutputs: 'hash',
      keyHash: hash,
      apiKeyPrefix: 'agk_changes1...',
    });
    t.equal(await reader.driver.lastChangeSeq(), base, 'signup and agent creation invalidate no cache');

    await writer.setPolicy(agent.id, 'version: "1"\nrules: []\n');
    const credential = await writer.createCredential(newCredential(user.orgId, 'api.example.com'));
    await writer.deleteCredential(user.orgId, credential.id);
    await writer.deleteAgent(user.orgId, agent.id);

    const expected = [
      { seq: base + 1, change: { kind: 'policy', agentId: agent.id } },
      { seq: base + 2, change: { kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' } },
      { seq: base + 3, change: { kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' } },
      { seq: base + 4, change: { kind: 'agent', agentId: agent.id, keyHash: hash } },
    ];
    t.same(await reader.driver.changesSince(base, 100), expected);
    t.same(await reader.driver.changesSince(base, 2), expected.slice(0, 2), 'limit caps the batch');
    t.same(await reader.driver.changesSince(base, 0), [], 'a limit of 0 is nothing, not everything');
    t.same(await reader.driver.changesSince(base + 2, 100), expected.slice(2), 'only the changes after seq');
    t.same(await reader.driver.changesSince(base + 4, 100), []);
    t.equal(await reader.driver.lastChangeSeq(), base + 4);
    t.equal(await writer.driver.lastChangeSeq(), base + 4);
    t.equal(await reader.findAgentByKeyHash(hash), undefined, 'the other process reads the deletion too');

    t.equal(await writer.deleteAgent(user.orgId, agent.id), false);
    t.equal(await reader.driver.lastChangeSeq(), base + 4, 'a delete that finds nothing records nothing');
  });

  t.test('mongodb: changesSince waits at a recent gap in the seqs and reads past an old one', async (t) => {
    const store = await openMongo();
    t.teardown(() => store.close());
    const base = await store.driver.lastChangeSeq();
    // seq base+1 is "in flight": taken from the counter, its entry not yet inserted.
    await inspectMongo(async (db) => {
      await db.collection<{ _id: string; seq: number }>('counters').updateOne({ _id: 'changes' }, { $set: { seq: base + 2 } });
      await db.collection('changes').insertOne({
        seq: base + 2,
        kind: 'policy',
        agent_id: 'after-the-gap',
        key_hash: null,
        org_id: null,
        hostname: null,
        at: new Date(),
      });
    });
    t.same(await store.driver.changesSince(base, 10), [], 'a fresh gap holds back what follows it');

    await inspectMongo((db) =>
      db.collection('changes').updateOne({ seq: base + 2 }, { $set: { at: new Date(Date.now() - 60_000) } }),
    );
    t.same(
      await store.driver.changesSince(base, 10),
      [{ seq: base + 2, change: { kind: 'policy', agentId: 'after-the-gap' } }],
      'a gap older than the grace period is a writer that died: read past it',
    );
  });

  t.test('mongodb: setting the policy of an agent that does not exist is not_found and records no change', async (t) => {
    const store = await openMongo();
    t.teardown(() => store.close());
    const before = await store.driver.lastChangeSeq();
    const agentId = randomUUID();
    const err = await store.setPolicy(agentId, 'version: "1"\n').then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof GuardError);
    t.equal((err as GuardError).code, 'not_found');
    t.equal(await store.getPolicy(agentId), undefined);
    t.equal(await store.driver.lastChangeSeq(), before, 'the failed write recorded no change');
  });

  t.test('mongodb: watchChanges delivers changes from other processes on a replica set', async (t) => {
    const watcher = await openMongo();
    const writer = await openMongo();
    t.teardown(async () => {
      await watcher.close();
      await writer.close();
    });
    if (!watcher.driver.canWatchChanges) {
      const stop = watcher.driver.watchChanges(() => t.fail('a standalone server has no change streams'), () => {});
      stop();
      t.pass('standalone server: no change stream, callers poll changesSince');
      return;
    }
    const user = await writer.createUserWithOrg(`watch-${randomUUID()}@example.test`, 'hash');
    const heard: MetadataChange[] = [];
    let streamError: unknown;
    const stop = watcher.driver.watchChanges(
      (entry: ChangeEntry) => heard.push(entry.change),
      (err) => {
        streamError = err;
      },
    );
    t.teardown(stop);
    // The stream starts asynchronously and misses what is committed before: keep
    // writing (a credential for a new hostname each time) until it hears one.
    for (let attempt = 0; heard.length === 0 && streamError === undefined && attempt < 50; attempt++) {
      await writer.createCredential({
        orgId: user.orgId,
        name: 'k',
        hostname: `api${attempt}.example.com`,
        credType: 'bearer',
        headerName: null,
        queryParam: null,
        sealedValue: 'sealed',
      });
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    t.equal(streamError, undefined, 'the change stream did not fail');
    t.match(heard[0], { kind: 'credential', orgId: user.orgId, hostname: /^api\d+\.example\.com$/ });
  });

  t.test('mongodb: ping answers while open; close is idempotent and ping then fails as unavailable', async (t) => {
    const store = await openMongo();
    t.equal(await store.ping(), undefined);
    await store.close();
    await store.close();
    await t.rejects(store.ping(), { code: 'unavailable', status: 503 });
  });
}

t.test('sqlite: data survives closing and reopening the file', async (t) => {
  const file = freshFile();
  const first = openSqlite(file);
  const user = await first.createUserWithOrg('durable@example.test', 'hash');
  const hash = randomBytes(32).toString('hex');
  const agent = await first.createAgent({
    orgId: user.orgId,
    name: 'durable',
    logOutputs: 'full',
    keyHash: hash,
    apiKeyPrefix: 'agk_durable1...',
  });
  const policy = await first.setPolicy(agent.id, 'version: "1"\nrules: []\n');
  const credential = await first.createCredential({
    orgId: user.orgId,
    name: 'github',
    hostname: 'api.github.com',
    credType: 'header',
    headerName: 'X-Token',
    queryParam: null,
    sealedValue: 'sealed-durable',
  });
  await first.close();

  const second = openSqlite(file);
  t.teardown(() => second.close());
  t.same(await second.findUserByEmail('durable@example.test'), user);
  t.same(await second.findAgentByKeyHash(hash), agent);
  t.same(await second.getPolicy(agent.id), policy);
  t.same(await second.findCredentialForHost(user.orgId, 'api.github.com'), { ...credential, sealedValue: 'sealed-durable' });
});

t.test('sqlite: open creates the parent directory and a file only its owner can read', async (t) => {
  const file = path.join(dir, 'nested', 'deeper', 'metadata.db');
  const store = openSqlite(file);
  t.teardown(() => store.close());
  t.ok(fs.statSync(file).isFile());
  if (process.platform !== 'win32') t.equal(fs.statSync(file).mode & 0o777, 0o600);
});

t.test('sqlite: a file of schema version 1 (before rate limits) gains the rate-limit tables on open, its data kept', async (t) => {
  const file = freshFile();
  const store = openSqlite(file);
  const user = await store.createUserWithOrg('v1@example.test', 'hash');
  await store.close();
  // Back to what version 1 wrote.
  inspect(file, (db) => db.exec('DROP TABLE audit_meta; DROP TABLE seal_heads; DROP TABLE approvals; DROP TABLE rate_counts; DROP TABLE rate_nodes; PRAGMA user_version = 1;'));
  const reopened = openSqlite(file);
  t.teardown(() => reopened.close());
  t.same(await reopened.findUserById(user.id), user, 'the data is untouched');
  t.equal(inspect(file, (db) => db.pragma('user_version', { simple: true })), SCHEMA_VERSION);
  const now = Date.now();
  const synced = await reopened.syncRateCounts({ node_id: 'n', now, live_after: now - 1000, add: [{ limit_key: 'k', agent_id: 'a', slot: 1, count: 2, expires_at: now + 1000 }], changed_since: 0 });
  t.strictSame(synced.rows.map((r) => r.count), [2], 'and rate limits are shared through it');
});

t.test('sqlite: a file of schema version 2 gains approvals and keeps its change log position on open', async (t) => {
  const file = freshFile();
  const store = openSqlite(file);
  const user = await store.createUserWithOrg('v2@example.test', 'hash');
  const agent = await store.createAgent({ orgId: user.orgId, name: 'a', logOutputs: 'none', keyHash: 'f'.repeat(64), apiKeyPrefix: 'agk_x' });
  await store.setPolicy(agent.id, 'version: "1"\nrules: []\n');
  await store.setPolicy(agent.id, 'version: "1"\nrules: []\n');
  await store.close();
  // Back to what version 2 wrote: the changes table without approvals, one row pruned.
  inspect(file, (db) =>
    db.exec(`
      DROP TABLE audit_meta;
      DROP TABLE seal_heads;
      DROP TABLE approvals;
      CREATE TABLE changes_v2 (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL CHECK (kind IN ('agent', 'policy', 'credential')),
        agent_id TEXT, key_hash TEXT, org_id TEXT, hostname TEXT, at TEXT NOT NULL) STRICT;
      INSERT INTO changes_v2 (seq, kind, agent_id, key_hash, org_id, hostname, at) SELECT seq, kind, agent_id, key_hash, org_id, hostname, at FROM changes;
      DROP TABLE changes;
      ALTER TABLE changes_v2 RENAME TO changes;
      CREATE INDEX changes_by_at ON changes (at);
      DELETE FROM changes WHERE seq = (SELECT max(seq) FROM changes);
      PRAGMA user_version = 2;`),
  );
  const lastBefore = inspect(file, (db) => (db.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").get() as { seq: number }).seq);
  t.equal(lastBefore, 2, 'the v2 file has issued seq 2, its row pruned');
  const reopened = openSqlite(file);
  t.teardown(() => reopened.close());
  t.equal(inspect(file, (db) => db.pragma('user_version', { simple: true })), SCHEMA_VERSION);
  t.same(await reopened.findUserById(user.id), user, 'the data is untouched');
  t.equal(await reopened.changes.follow({ pollMs: 60_000, onError: () => {} }).then(() => 'following'), 'following');
  reopened.changes.stop();
  const approval = (await reopened.createApproval(
    { orgId: user.orgId, agentId: agent.id, agentName: 'a', toolName: 't', action: 'GET', host: 't', path: '/', query: '', reasoning: '', taskId: '', ruleMatched: 'r', bodySha256: '0'.repeat(64), bodyBytes: 0, timeoutS: 60 },
    null,
  ))!;
  await reopened.decideApproval(user.orgId, approval.id, 'approved', 'v2@example.test', null);
  const seqs = inspect(file, (db) => (db.prepare('SELECT seq, kind FROM changes ORDER BY seq').all() as { seq: number; kind: string }[]));
  t.same(seqs, [{ seq: 1, kind: 'policy' }, { seq: 3, kind: 'approval' }], 'the change log carries on past the highest seq ever issued, with the new kind');
});

t.test('sqlite: migrations set user_version and are not applied twice on reopen', async (t) => {
  const file = freshFile();
  const store = openSqlite(file);
  const user = await store.createUserWithOrg('kept@example.test', 'hash');
  await store.close();

  t.ok(SCHEMA_VERSION >= 1);
  t.equal(
    inspect(file, (db) => db.pragma('user_version', { simple: true })),
    SCHEMA_VERSION,
  );

  // A second migration run would fail on CREATE TABLE of an existing table.
  const reopened = openSqlite(file);
  t.teardown(() => reopened.close());
  t.same(await reopened.findUserById(user.id), user, 'the data is untouched');
  t.equal(
    inspect(file, (db) => db.pragma('user_version', { simple: true })),
    SCHEMA_VERSION,
  );
  t.same(
    inspect(file, (db) =>
      db
        .prepare<[], { name: string }>("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .all()
        .map((row) => row.name),
    ),
    ['agents', 'approvals', 'audit_meta', 'changes', 'credentials', 'orgs', 'policies', 'rate_counts', 'rate_nodes', 'seal_heads', 'users'],
  );
});

t.test('sqlite: a file from a newer schema is refused, not downgraded', async (t) => {
  const file = freshFile();
  await openSqlite(file).close();
  inspect(file, (db) => db.pragma(`user_version = ${SCHEMA_VERSION + 1}`));
  t.throws(() => SqliteMetadataDriver.open(file), { message: /newer than this build/ });
  t.equal(
    inspect(file, (db) => db.pragma('user_version', { simple: true })),
    SCHEMA_VERSION + 1,
  );
});

t.test('sqlite: the file is in WAL mode', async (t) => {
  const file = freshFile();
  const store = openSqlite(file);
  t.teardown(() => store.close());
  t.equal(
    inspect(file, (db) => db.pragma('journal_mode', { simple: true })),
    'wal',
  );
  t.ok(fs.existsSync(`${file}-wal`), 'the write-ahead log exists beside the file');
});

t.test('sqlite: every lookup the store makes uses an index', async (t) => {
  const file = freshFile();
  await openSqlite(file).close();
  const plans = inspect(file, (db) => {
    const plan = (sql: string) =>
      db
        .prepare<unknown[], { detail: string }>(`EXPLAIN QUERY PLAN ${sql}`)
        .all()
        .map((row) => row.detail)
        .join('; ');
    return {
      agentsByOrg: plan("SELECT id FROM agents WHERE org_id = 'o' ORDER BY created_at, rowid"),
      agentByKeyHash: plan("SELECT id FROM agents WHERE key_hash = 'k'"),
      credentialForHost: plan("SELECT id FROM credentials WHERE org_id = 'o' AND hostname = 'h'"),
      credentialsByOrg: plan("SELECT id FROM credentials WHERE org_id = 'o' ORDER BY created_at, rowid"),
      userByEmail: plan("SELECT id FROM users WHERE email = 'e'"),
      // As the store lists an org's approvals of one status (the inbox's pending ones), every filter unset.
      approvalsOfStatus: db
        .prepare<unknown[], { detail: string }>(`EXPLAIN QUERY PLAN ${approvalsSql('AND status = @status_1')}`)
        .all({ org_id: 'o', status_1: 'pending', expires_after: null, expired_by: null, agent_id: null, created_since: null, created_until: null, limit: 10 })
        .map((row) => row.detail)
        .join('; '),
    };
  });
  // Not the walk of the org's every approval, newest first, reading each row for its status.
  t.match(plans.approvalsOfStatus, /USING INDEX approvals_by_org_status_created \(org_id=\? AND status=\?\)/);
  t.notMatch(plans.approvalsOfStatus, /TEMP B-TREE/, 'newest first in the index\'s order, no sort');
  t.match(plans.agentsByOrg, /USING INDEX agents_by_org_created/);
  t.match(plans.agentByKeyHash, /USING INDEX sqlite_autoindex_agents/);
  t.match(plans.credentialForHost, /USING INDEX sqlite_autoindex_credentials/);
  t.match(plans.credentialsByOrg, /USING INDEX credentials_by_org_created/);
  t.match(plans.userByEmail, /USING INDEX sqlite_autoindex_users/);
});

t.test('sqlite: changesSince returns the committed changes in order, from any process', async (t) => {
  const file = freshFile();
  const writer = openSqlite(file);
  // A second store on the same file stands in for another proxy process.
  const reader = openSqlite(file);
  t.teardown(async () => {
    await writer.close();
    await reader.close();
  });

  t.equal(reader.driver.lastChangeSeq(), 0, 'no change yet');
  t.same(reader.driver.changesSince(0, 100), []);

  const user = await writer.createUserWithOrg('changes@example.test', 'hash');
  const hash = randomBytes(32).toString('hex');
  const agent = await writer.createAgent({
    orgId: user.orgId,
    name: 'a',
    logOutputs: 'hash',
    keyHash: hash,
    apiKeyPrefix: 'agk_changes1...',
  });
  t.equal(reader.driver.lastChangeSeq(), 0, 'signup and agent creation invalidate no cache');

  await writer.setPolicy(agent.id, 'version: "1"\nrules: []\n');
  const credential = await writer.createCredential(newCredential(user.orgId, 'api.example.com'));
  await writer.deleteCredential(user.orgId, credential.id);
  await writer.deleteAgent(user.orgId, agent.id);

  const expected = [
    { seq: 1, change: { kind: 'policy', agentId: agent.id } },
    { seq: 2, change: { kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' } },
    { seq: 3, change: { kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' } },
    { seq: 4, change: { kind: 'agent', agentId: agent.id, keyHash: hash } },
  ];
  t.same(reader.driver.changesSince(0, 100), expected);
  t.same(reader.driver.changesSince(0, 2), expected.slice(0, 2), 'limit caps the batch');
  t.same(reader.driver.changesSince(2, 100), expected.slice(2), 'only the changes after seq');
  t.same(reader.driver.changesSince(4, 100), []);
  t.equal(reader.driver.lastChangeSeq(), 4);
  t.equal(writer.driver.lastChangeSeq(), 4);
  t.equal(await reader.findAgentByKeyHash(hash), undefined, 'the other process reads the deletion too');

  t.equal(await writer.deleteAgent(user.orgId, agent.id), false);
  t.equal(reader.driver.lastChangeSeq(), 4, 'a delete that finds nothing records nothing');
});

t.test('sqlite: change rows older than an hour are pruned on a later insert', async (t) => {
  const file = freshFile();
  const store = openSqlite(file);
  t.teardown(() => store.close());
  const twoHoursAgo = new Date(Date.now() - 2 * 60 * 60 * 1000).toISOString();
  const tenMinutesAgo = new Date(Date.now() - 10 * 60 * 1000).toISOString();
  inspect(file, (db) => {
    const insert = db.prepare('INSERT INTO changes (kind, agent_id, at) VALUES (?, ?, ?)');
    insert.run('policy', 'stale', twoHoursAgo);
    insert.run('policy', 'recent', tenMinutesAgo);
  });
  t.same(
    store.driver.changesSince(0, 10).map((entry) => entry.change),
    [
      { kind: 'policy', agentId: 'stale' },
      { kind: 'policy', agentId: 'recent' },
    ],
  );

  const user = await store.createUserWithOrg('prune@example.test', 'hash');
  await store.createCredential(newCredential(user.orgId, 'api.example.com'));
  t.same(store.driver.changesSince(0, 10), [
    { seq: 2, change: { kind: 'policy', agentId: 'recent' } },
    { seq: 3, change: { kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' } },
  ]);
  t.equal(store.driver.lastChangeSeq(), 3);
});

/** A writer and a follower on one SQLite file, and what the follower's subscriber hears. */
function writerAndFollower(t: Test) {
  const file = freshFile();
  const follower = openSqlite(file);
  const writer = openSqlite(file);
  t.teardown(async () => {
    await follower.close();
    await writer.close();
  });
  const events: (MetadataChange | 'clear')[] = [];
  follower.changes.subscribe({ apply: (change) => events.push(change), clear: () => events.push('clear') });
  return { file, follower, writer, events };
}

t.test('sqlite: a follower whose place in the log was pruned clears everything, then applies what follows', async (t) => {
  const { file, follower, writer, events } = writerAndFollower(t);
  const errors: unknown[] = [];
  // Long enough that the rows below come and go before the first poll.
  await follower.changes.follow({ pollMs: 300, onError: (err) => errors.push(err) });

  // Two rows the follower never reads: older than the log keeps, so the writer's next
  // change (its first, so it prunes) deletes them.
  const twoHoursAgo = new Date(Date.now() - 2 * 60 * 60 * 1000).toISOString();
  inspect(file, (db) => {
    const insert = db.prepare('INSERT INTO changes (kind, agent_id, at) VALUES (?, ?, ?)');
    insert.run('policy', 'missed-1', twoHoursAgo);
    insert.run('policy', 'missed-2', twoHoursAgo);
  });
  const user = await writer.createUserWithOrg('pruned@example.test', 'hash');
  await writer.createCredential(newCredential(user.orgId, 'api.example.com'));
  t.same(writer.driver.changesSince(0, 10).map((entry) => entry.seq), [3], 'the rows the follower missed are gone');

  for (const deadline = Date.now() + 5000; events.length < 2 && Date.now() < deadline; ) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  t.same(events, ['clear', { kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' }]);
  t.same(errors, []);
});

t.test('sqlite: a follower that reads a batch with a seq missing inside it clears everything, then applies the rest', async (t) => {
  const { file, follower, writer, events } = writerAndFollower(t);
  await follower.changes.follow({ pollMs: 300, onError: () => {} });
  const user = await writer.createUserWithOrg('gap@example.test', 'hash');
  for (const host of ['a.example.com', 'b.example.com', 'c.example.com']) await writer.createCredential(newCredential(user.orgId, host));
  // The middle change is lost (as one read past after its writer died is) before the first poll.
  inspect(file, (db) => db.prepare("DELETE FROM changes WHERE hostname = 'b.example.com'").run());
  for (const deadline = Date.now() + 5000; events.length < 3 && Date.now() < deadline; ) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  t.same(events, ['clear', ...['a.example.com', 'c.example.com'].map((hostname) => ({ kind: 'credential', orgId: user.orgId, hostname }))]);
});

t.test('sqlite: a path that cannot be opened as a database fails the open with StoreUnavailableError', async (t) => {
  const file = path.join(dir, 'a-directory.db');
  fs.mkdirSync(file);
  const err = (() => {
    try {
      SqliteMetadataDriver.open(file);
      return undefined;
    } catch (e) {
      return e;
    }
  })();
  t.ok(err instanceof StoreUnavailableError, String(err));
  t.match((err as Error).cause, { code: 'SQLITE_CANTOPEN' }, "the driver's error is the cause");
});

t.test('sqlite: a full disk is the store being unavailable (503), not a bug (500)', async (t) => {
  // SQLite's own SQLITE_FULL, from a database capped at a few pages.
  const db = new Database(freshFile());
  t.teardown(() => db.close());
  db.exec('CREATE TABLE t (b BLOB)');
  db.pragma('max_page_count = 3');
  const full = (() => {
    try {
      db.prepare('INSERT INTO t VALUES (?)').run(randomBytes(64 * 1024));
      return undefined;
    } catch (e) {
      return e;
    }
  })();
  t.match(full, { code: 'SQLITE_FULL' }, 'the database refused the write as full');
  const classified = classifySqliteError(full);
  t.ok(classified instanceof StoreUnavailableError, String(classified));
  t.equal((classified as Error).cause, full, "the driver's error is the cause");
});

t.test('sqlite: setting the policy of an agent that does not exist is not_found', async (t) => {
  const store = openSqlite(freshFile());
  t.teardown(() => store.close());
  const agentId = randomUUID();
  const err = await store.setPolicy(agentId, 'version: "1"\n').then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof GuardError);
  t.equal((err as GuardError).code, 'not_found');
  t.equal(await store.getPolicy(agentId), undefined);
  t.equal(store.driver.lastChangeSeq(), 0, 'the failed write recorded no change');
});

t.test('sqlite: ping answers while open; close is idempotent and ping then fails as unavailable', async (t) => {
  const store = openSqlite(freshFile());
  t.equal(await store.ping(), undefined);
  await store.close();
  await store.close();
  await t.rejects(store.ping(), { code: 'unavailable', status: 503 });
});

t.test('sqlite: a throwing change listener is reported as a process warning', async (t) => {
  const store = openSqlite(freshFile());
  t.teardown(() => store.close());
  const warnings: Error[] = [];
  const onWarning = (warning: Error) => warnings.push(warning);
  process.on('warning', onWarning);
  t.teardown(() => {
    process.off('warning', onWarning);
  });
  store.changes.subscribe({
    apply() {
      // Not an Error: listeners may throw anything.
      throw 'plain string';
    },
    clear() {},
  });
  const user = await store.createUserWithOrg('warned@example.test', 'hash');
  await store.createCredential(newCredential(user.orgId, 'api.example.com'));
  // process.emitWarning delivers on the next tick.
  await new Promise((resolve) => setImmediate(resolve));
  // Earlier tests' warnings may still be arriving: look only at this listener's.
  const ours = warnings.filter((warning) => warning.cause === 'plain string');
  t.equal(ours.length, 1);
  t.equal(ours[0]?.name, 'MetadataChangeListenerWarning');
  t.equal(ours[0]?.message, 'A metadata change listener threw (the credential change is committed): plain string');
});

t.test('sqlite: errors other than the mapped constraint violations pass through unchanged', async (t) => {
  const file = freshFile();
  const store = openSqlite(file);

  const unknownOrg = await store
    .createCredential({
      orgId: randomUUID(),
      name: 'k',
      hostname: 'api.example.com',
      credType: 'bearer',
      headerName: null,
      queryParam: null,
      sealedValue: 'sealed',
    })
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  t.ok(unknownOrg instanceof Database.SqliteError, 'a credential of an unknown org is a foreign key error');
  t.equal((unknownOrg as InstanceType<typeof Database.SqliteError>).code, 'SQLITE_CONSTRAINT_FOREIGNKEY');

  inspect(file, (db) => db.prepare("INSERT INTO changes (kind, at) VALUES ('agent', ?)").run(new Date().toISOString()));
  t.throws(() => store.driver.changesSince(0, 10), { message: 'Malformed change row 1 of kind agent.' });

  await store.close();
  await t.rejects(store.createUserWithOrg('late@example.test', 'hash'), { name: 'TypeError', message: /not open/ });
  await t.rejects(store.setPolicy(randomUUID(), 'version: "1"\n'), { name: 'TypeError', message: /not open/ });
});
