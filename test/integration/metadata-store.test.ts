// The metadata store contract against every implementation, and what only the SQLite
// one promises (its file, its schema version, its change log for other processes).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import t from 'tap';
import { GuardError } from '../../shared/errors.js';
import { SCHEMA_VERSION, SqliteMetadataStore } from '../../shared/stores/sqlite/sqlite-metadata-store.js';
import { metadataStoreContract } from './metadata-store.contract.js';

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

metadataStoreContract(t, 'sqlite', async () => SqliteMetadataStore.open(freshFile()));

if (process.env.MONGODB_URL === undefined) {
  t.comment('MongoDB store contract skipped: MONGODB_URL is not set');
} else {
  // The MongoDB store plugs in here once shared/stores/mongo/ exists, e.g.:
  //   metadataStoreContract(t, 'mongodb', () => MongoMetadataStore.open(process.env.MONGODB_URL!, `guard_test_${randomUUID()}`));
  // with each opened database dropped after the run.
  t.test('mongodb: metadata store contract', { todo: 'no MongoDB metadata store is implemented yet' }, () => {});
}

t.test('sqlite: data survives closing and reopening the file', async (t) => {
  const file = freshFile();
  const first = SqliteMetadataStore.open(file);
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

  const second = SqliteMetadataStore.open(file);
  t.teardown(() => second.close());
  t.same(await second.findUserByEmail('durable@example.test'), user);
  t.same(await second.findAgentByKeyHash(hash), agent);
  t.same(await second.getPolicy(agent.id), policy);
  t.same(await second.findCredentialForHost(user.orgId, 'api.github.com'), { ...credential, sealedValue: 'sealed-durable' });
});

t.test('sqlite: open creates the parent directory and a file only its owner can read', async (t) => {
  const file = path.join(dir, 'nested', 'deeper', 'metadata.db');
  const store = SqliteMetadataStore.open(file);
  t.teardown(() => store.close());
  t.ok(fs.statSync(file).isFile());
  if (process.platform !== 'win32') t.equal(fs.statSync(file).mode & 0o777, 0o600);
});

t.test('sqlite: migrations set user_version and are not applied twice on reopen', async (t) => {
  const file = freshFile();
  const store = SqliteMetadataStore.open(file);
  const user = await store.createUserWithOrg('kept@example.test', 'hash');
  await store.close();

  t.ok(SCHEMA_VERSION >= 1);
  t.equal(
    inspect(file, (db) => db.pragma('user_version', { simple: true })),
    SCHEMA_VERSION,
  );

  // A second migration run would fail on CREATE TABLE of an existing table.
  const reopened = SqliteMetadataStore.open(file);
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
    ['agents', 'changes', 'credentials', 'orgs', 'policies', 'users'],
  );
});

t.test('sqlite: a file from a newer schema is refused, not downgraded', async (t) => {
  const file = freshFile();
  await SqliteMetadataStore.open(file).close();
  inspect(file, (db) => db.pragma(`user_version = ${SCHEMA_VERSION + 1}`));
  t.throws(() => SqliteMetadataStore.open(file), { message: /newer than this build/ });
  t.equal(
    inspect(file, (db) => db.pragma('user_version', { simple: true })),
    SCHEMA_VERSION + 1,
  );
});

t.test('sqlite: the file is in WAL mode', async (t) => {
  const file = freshFile();
  const store = SqliteMetadataStore.open(file);
  t.teardown(() => store.close());
  t.equal(
    inspect(file, (db) => db.pragma('journal_mode', { simple: true })),
    'wal',
  );
  t.ok(fs.existsSync(`${file}-wal`), 'the write-ahead log exists beside the file');
});

t.test('sqlite: every lookup the store makes uses an index', async (t) => {
  const file = freshFile();
  await SqliteMetadataStore.open(file).close();
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
    };
  });
  t.match(plans.agentsByOrg, /USING INDEX agents_by_org_created/);
  t.match(plans.agentByKeyHash, /USING INDEX sqlite_autoindex_agents/);
  t.match(plans.credentialForHost, /USING INDEX sqlite_autoindex_credentials/);
  t.match(plans.credentialsByOrg, /USING INDEX credentials_by_org_created/);
  t.match(plans.userByEmail, /USING INDEX sqlite_autoindex_users/);
});

t.test('sqlite: changesSince returns the committed changes in order, from any process', async (t) => {
  const file = freshFile();
  const writer = SqliteMetadataStore.open(file);
  // A second store on the same file stands in for another proxy process.
  const reader = SqliteMetadataStore.open(file);
  t.teardown(async () => {
    await writer.close();
    await reader.close();
  });

  t.equal(reader.lastChangeSeq(), 0, 'no change yet');
  t.same(reader.changesSince(0, 100), []);

  const user = await writer.createUserWithOrg('changes@example.test', 'hash');
  const hash = randomBytes(32).toString('hex');
  const agent = await writer.createAgent({
    orgId: user.orgId,
    name: 'a',
    logOutputs: 'hash',
    keyHash: hash,
    apiKeyPrefix: 'agk_changes1...',
  });
  t.equal(reader.lastChangeSeq(), 0, 'signup and agent creation invalidate no cache');

  await writer.setPolicy(agent.id, 'version: "1"\nrules: []\n');
  const credential = await writer.createCredential({
    orgId: user.orgId,
    name: 'k',
    hostname: 'api.example.com',
    credType: 'bearer',
    headerName: null,
    queryParam: null,
    sealedValue: 'sealed',
  });
  await writer.deleteCredential(user.orgId, credential.id);
  await writer.deleteAgent(user.orgId, agent.id);

  const expected = [
    { seq: 1, change: { kind: 'policy', agentId: agent.id } },
    { seq: 2, change: { kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' } },
    { seq: 3, change: { kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' } },
    { seq: 4, change: { kind: 'agent', agentId: agent.id, keyHash: hash } },
  ];
  t.same(reader.changesSince(0, 100), expected);
  t.same(reader.changesSince(0, 2), expected.slice(0, 2), 'limit caps the batch');
  t.same(reader.changesSince(2, 100), expected.slice(2), 'only the changes after seq');
  t.same(reader.changesSince(4, 100), []);
  t.equal(reader.lastChangeSeq(), 4);
  t.equal(writer.lastChangeSeq(), 4);
  t.equal(await reader.findAgentByKeyHash(hash), undefined, 'the other process reads the deletion too');

  t.equal(await writer.deleteAgent(user.orgId, agent.id), false);
  t.equal(reader.lastChangeSeq(), 4, 'a delete that finds nothing records nothing');
});

t.test('sqlite: change rows older than an hour are pruned on a later insert', async (t) => {
  const file = freshFile();
  const store = SqliteMetadataStore.open(file);
  t.teardown(() => store.close());
  const twoHoursAgo = new Date(Date.now() - 2 * 60 * 60 * 1000).toISOString();
  const tenMinutesAgo = new Date(Date.now() - 10 * 60 * 1000).toISOString();
  inspect(file, (db) => {
    const insert = db.prepare('INSERT INTO changes (kind, agent_id, at) VALUES (?, ?, ?)');
    insert.run('policy', 'stale', twoHoursAgo);
    insert.run('policy', 'recent', tenMinutesAgo);
  });
  t.same(
    store.changesSince(0, 10).map((entry) => entry.change),
    [
      { kind: 'policy', agentId: 'stale' },
      { kind: 'policy', agentId: 'recent' },
    ],
  );

  const user = await store.createUserWithOrg('prune@example.test', 'hash');
  await store.createCredential({
    orgId: user.orgId,
    name: 'k',
    hostname: 'api.example.com',
    credType: 'bearer',
    headerName: null,
    queryParam: null,
    sealedValue: 'sealed',
  });
  t.same(store.changesSince(0, 10), [
    { seq: 2, change: { kind: 'policy', agentId: 'recent' } },
    { seq: 3, change: { kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' } },
  ]);
  t.equal(store.lastChangeSeq(), 3);
});

t.test('sqlite: setting the policy of an agent that does not exist is not_found', async (t) => {
  const store = SqliteMetadataStore.open(freshFile());
  t.teardown(() => store.close());
  const agentId = randomUUID();
  const err = await store.setPolicy(agentId, 'version: "1"\n').then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof GuardError);
  t.equal((err as GuardError).code, 'not_found');
  t.equal(await store.getPolicy(agentId), undefined);
  t.equal(store.lastChangeSeq(), 0, 'the failed write recorded no change');
});

t.test('sqlite: ping answers while open; close is idempotent and ping then fails as unavailable', async (t) => {
  const store = SqliteMetadataStore.open(freshFile());
  t.equal(await store.ping(), undefined);
  await store.close();
  await store.close();
  await t.rejects(store.ping(), { code: 'unavailable', status: 503 });
});

t.test('sqlite: a throwing change listener is reported as a process warning', async (t) => {
  const store = SqliteMetadataStore.open(freshFile());
  t.teardown(() => store.close());
  const warnings: Error[] = [];
  const onWarning = (warning: Error) => warnings.push(warning);
  process.on('warning', onWarning);
  t.teardown(() => {
    process.off('warning', onWarning);
  });
  store.onChange(() => {
    // Not an Error: listeners may throw anything.
    throw 'plain string';
  });
  const user = await store.createUserWithOrg('warned@example.test', 'hash');
  await store.createCredential({
    orgId: user.orgId,
    name: 'k',
    hostname: 'api.example.com',
    credType: 'bearer',
    headerName: null,
    queryParam: null,
    sealedValue: 'sealed',
  });
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
  const store = SqliteMetadataStore.open(file);

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
  t.throws(() => store.changesSince(0, 10), { message: 'Malformed change row 1 of kind agent.' });

  await store.close();
  await t.rejects(store.createUserWithOrg('late@example.test', 'hash'), { name: 'TypeError', message: /not open/ });
  await t.rejects(store.setPolicy(randomUUID(), 'version: "1"\n'), { name: 'TypeError', message: /not open/ });
});
