// The behaviour every MetadataStore implementation owes its callers. Each
// implementation's test file calls `metadataStoreContract` with ways to open stores
// over one of its drivers; the same assertions then run against SQLite and MongoDB.
//
// `open` may return stores that share one database: every test makes its own users
// (and so its own orgs) with unique emails, and looks only at those.
import { randomBytes, randomUUID } from 'node:crypto';
import type t from 'tap';
import { GuardError, StoreUnavailableError } from '../../shared/errors.js';
import type { ChangeSubscriber } from '../../shared/stores/change-feed.js';
import { ORG_AGENTS_MAX, ORG_CREDENTIALS_MAX, type MetadataStore, type NewAgent, type NewCredential } from '../../shared/stores/metadata-store.js';
import type { MetadataChange } from '../../shared/types.js';

/** A tap test, the root one or a subtest. */
export type TapTest = Parameters<Parameters<typeof t.test>[0]>[0];

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ISO_UTC_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function uniqueEmail(label: string): string {
  return `${label}-${randomUUID()}@example.test`;
}

function keyHash(): string {
  return randomBytes(32).toString('hex');
}

function newAgent(orgId: string, name: string, overrides: Partial<NewAgent> = {}): NewAgent {
  return { orgId, name, logOutputs: 'hash', keyHash: keyHash(), apiKeyPrefix: 'agk_AbCdEfGh...', ...overrides };
}

export function newCredential(orgId: string, hostname: string, overrides: Partial<NewCredential> = {}): NewCredential {
  return {
    orgId,
    name: 'token',
    hostname,
    credType: 'bearer',
    headerName: null,
    queryParam: null,
    sealedValue: `sealed:${randomUUID()}`,
    ...overrides,
  };
}

/** The rejection of `promise`, or undefined when it resolves. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (err: unknown) => err,
  );
}

/** How a contract run opens the stores of one implementation. */
export interface ContractStores {
  open(): Promise<MetadataStore>;
  /** Two stores on one database, as two processes have them. */
  openTwo(): Promise<[MetadataStore, MetadataStore]>;
  /**
   * A store whose database cannot be reached, so that a write to it fails (opening it
   * may already fail). Whatever it holds is released when `t` ends.
   */
  openUnreachable(t: TapTest): Promise<MetadataStore>;
}

/** A subscriber that records what it hears; `onApply` runs inside apply. */
function recorder(onApply: (change: MetadataChange) => void = () => {}): ChangeSubscriber & { heard: MetadataChange[]; clears: number } {
  const subscriber = {
    heard: [] as MetadataChange[],
    clears: 0,
    apply(change: MetadataChange) {
      subscriber.heard.push(change);
      onApply(change);
    },
    clear() {
      subscriber.clears++;
    },
  };
  return subscriber;
}

/** Polls `check` every 20 ms until it holds, for at most `ms`. */
async function eventually(check: () => boolean, ms = 5000): Promise<boolean> {
  for (const deadline = Date.now() + ms; !check(); ) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

export function metadataStoreContract(t: TapTest, name: string, stores: ContractStores): void {
  /** A store for one test, closed when the test ends. */
  async function storeFor(t: TapTest): Promise<MetadataStore> {
    const store = await stores.open();
    t.teardown(() => store.close());
    return store;
  }

  /** Two users in two orgs, as two signups make them. */
  async function twoOrgs(store: MetadataStore): Promise<{ orgA: string; orgB: string }> {
    const a = await store.createUserWithOrg(uniqueEmail('a'), 'hash-a');
    const b = await store.createUserWithOrg(uniqueEmail('b'), 'hash-b');
    return { orgA: a.orgId, orgB: b.orgId };
  }

  t.test(`${name}: a signup creates a user in a new org, found by email and by id`, async (t) => {
    const store = await storeFor(t);
    const email = uniqueEmail('signup');
    const user = await store.createUserWithOrg(email, '$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA');
    t.match(user.id, UUID);
    t.match(user.orgId, UUID);
    t.not(user.orgId, user.id);
    t.equal(user.email, email);
    t.equal(user.passwordHash, '$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA');
    t.match(user.createdAt, ISO_UTC_MS);

    t.same(await store.findUserByEmail(email), user);
    t.same(await store.findUserById(user.id), user);
    t.equal(await store.findUserByEmail(uniqueEmail('nobody')), undefined);
    t.equal(await store.findUserById(randomUUID()), undefined);

    const other = await store.createUserWithOrg(uniqueEmail('other'), 'hash');
    t.not(other.orgId, user.orgId, 'every signup gets its own org');
    t.not(other.id, user.id);
  });

  t.test(`${name}: a taken email is a conflict and leaves the first account as it was`, async (t) => {
    const store = await storeFor(t);
    const email = uniqueEmail('taken');
    const first = await store.createUserWithOrg(email, 'first-hash');
    const err = await rejectionOf(store.createUserWithOrg(email, 'second-hash'));
    t.ok(err instanceof GuardError, 'rejects with a GuardError');
    t.equal((err as GuardError).code, 'conflict');
    t.equal((err as GuardError).status, 409);
    t.equal((err as GuardError).message, 'An account with that email already exists.');
    t.same(await store.findUserByEmail(email), first);
  });

  t.test(`${name}: agents list oldest first and only within their org`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    // Created back to back, so several may share a millisecond: order must still hold.
    const first = await store.createAgent(newAgent(orgA, 'first', { logOutputs: 'full' }));
    const second = await store.createAgent(newAgent(orgA, 'second', { logOutputs: 'none' }));
    const third = await store.createAgent(newAgent(orgA, 'third', { apiKeyPrefix: 'agk_123456789...' }));
    const elsewhere = await store.createAgent(newAgent(orgB, 'elsewhere'));

    t.match(first.id, UUID);
    t.equal(first.orgId, orgA);
    t.equal(first.name, 'first');
    t.equal(first.logOutputs, 'full');
    t.equal(first.apiKeyPrefix, 'agk_AbCdEfGh...');
    t.match(first.createdAt, ISO_UTC_MS);
    t.equal(third.apiKeyPrefix, 'agk_123456789...');
    t.notOk('keyHash' in first, 'the key hash is not part of the agent record');

    t.same(await store.listAgents(orgA), [first, second, third]);
    t.same(await store.listAgents(orgB), [elsewhere]);
    t.same(await store.listAgents(randomUUID()), []);
  });

  t.test(`${name}: getAgent finds an agent only in its own org`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const agent = await store.createAgent(newAgent(orgA, 'mine'));
    t.same(await store.getAgent(orgA, agent.id), agent);
    t.equal(await store.getAgent(orgB, agent.id), undefined, "another org's agent is not found");
    t.equal(await store.getAgent(orgA, randomUUID()), undefined);
    t.equal(await store.getAgent(orgA, 'not-a-uuid'), undefined);
  });

  t.test(`${name}: findAgentByKeyHash finds the agent of that key and nothing for an unknown one`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const hashA = keyHash();
    const hashB = keyHash();
    const agentA = await store.createAgent(newAgent(orgA, 'a', { keyHash: hashA }));
    const agentB = await store.createAgent(newAgent(orgB, 'b', { keyHash: hashB }));
    t.same(await store.findAgentByKeyHash(hashA), agentA);
    t.same(await store.findAgentByKeyHash(hashB), agentB);
    t.equal(await store.findAgentByKeyHash(keyHash()), undefined);
  });

  t.test(`${name}: deleteAgent removes the agent, its key and its policy, only from its own org`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const hash = keyHash();
    const doomed = await store.createAgent(newAgent(orgA, 'doomed', { keyHash: hash }));
    const kept = await store.createAgent(newAgent(orgA, 'kept'));
    await store.setPolicy(doomed.id, 'version: "1"\nrules: []\n');
    await store.setPolicy(kept.id, 'version: "1"\ndefault: deny\nrules: []\n');

    t.equal(await store.deleteAgent(orgB, doomed.id), false, "another org cannot delete it");
    t.same(await store.getAgent(orgA, doomed.id), doomed, 'a refused delete keeps the agent');
    t.same(await store.findAgentByKeyHash(hash), doomed);
    t.equal((await store.getPolicy(doomed.id))?.rulesYaml, 'version: "1"\nrules: []\n', 'and its policy');
    t.equal(await store.agentExists(doomed.id), true);

    t.equal(await store.deleteAgent(orgA, doomed.id), true);
    t.equal(await store.getAgent(orgA, doomed.id), undefined);
    t.equal(await store.findAgentByKeyHash(hash), undefined, 'its key no longer resolves');
    t.equal(await store.getPolicy(doomed.id), undefined, 'its policy went with it');
    t.equal(await store.agentExists(doomed.id), false, 'it no longer exists (the proxy tells a deleted agent from one without a policy)');
    t.same(await store.listAgents(orgA), [kept]);
    t.equal((await store.getPolicy(kept.id))?.rulesYaml, 'version: "1"\ndefault: deny\nrules: []\n', "others' policies stay");

    t.equal(await store.deleteAgent(orgA, doomed.id), false, 'a second delete finds nothing');
    t.equal(await store.deleteAgent(orgA, randomUUID()), false);
  });

  t.test(`${name}: a policy is set, replaced and read back`, async (t) => {
    const store = await storeFor(t);
    const { orgA } = await twoOrgs(store);
    const agent = await store.createAgent(newAgent(orgA, 'governed'));
    t.equal(await store.getPolicy(agent.id), undefined, 'no policy until one is set');

    const firstYaml = 'version: "1"\nrules:\n  - tool: api.github.com\n    action: GET\n    decision: allow\n';
    const first = await store.setPolicy(agent.id, firstYaml);
    t.equal(first.agentId, agent.id);
    t.equal(first.rulesYaml, firstYaml);
    t.match(first.updatedAt, ISO_UTC_MS);
    t.same(await store.getPolicy(agent.id), first);

    const secondYaml = 'version: "1"\ndefault: deny\nrules: []\n';
    const second = await store.setPolicy(agent.id, secondYaml);
    t.equal(second.rulesYaml, secondYaml);
    t.ok(second.updatedAt >= first.updatedAt, 'updatedAt does not go backwards');
    t.same(await store.getPolicy(agent.id), second, 'setting again replaces it');
  });

  t.test(`${name}: credentials are created and listed oldest first, without their value`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const bearer = await store.createCredential(newCredential(orgA, 'api.github.com', { name: 'github' }));
    const header = await store.createCredential(
      newCredential(orgA, 'api.example.com:8443', { name: 'example', credType: 'header', headerName: 'X-Api-Key' }),
    );
    const query = await store.createCredential(
      newCredential(orgA, 'maps.example.com', { name: 'maps', credType: 'query', queryParam: 'key' }),
    );

    t.match(bearer.id, UUID);
    t.equal(bearer.orgId, orgA);
    t.equal(bearer.name, 'github');
    t.equal(bearer.hostname, 'api.github.com');
    t.equal(bearer.credType, 'bearer');
    t.equal(bearer.headerName, null);
    t.equal(bearer.queryParam, null);
    t.match(bearer.createdAt, ISO_UTC_MS);
    t.equal(header.credType, 'header');
    t.equal(header.headerName, 'X-Api-Key');
    t.equal(header.hostname, 'api.example.com:8443');
    t.equal(query.credType, 'query');
    t.equal(query.queryParam, 'key');

    const listed = await store.listCredentials(orgA);
    t.same(listed, [bearer, header, query]);
    t.notOk(listed.some((credential) => 'sealedValue' in credential), 'a listed credential never carries its value');
    t.notOk('sealedValue' in bearer, 'nor does the created record');
    t.same(await store.listCredentials(orgB), []);
  });

  t.test(`${name}: one credential per hostname per org; another org may use the same hostname`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const original = await store.createCredential(newCredential(orgA, 'api.github.com'));

    const err = await rejectionOf(store.createCredential(newCredential(orgA, 'api.github.com', { name: 'again' })));
    t.ok(err instanceof GuardError, 'rejects with a GuardError');
    t.equal((err as GuardError).code, 'conflict');
    t.equal((err as GuardError).message, 'A credential for that hostname already exists.');
    t.same(await store.listCredentials(orgA), [original], 'the refused one was not stored');

    const theirs = await store.createCredential(newCredential(orgB, 'api.github.com'));
    t.equal(theirs.hostname, 'api.github.com');
    t.same(await store.listCredentials(orgB), [theirs]);

    const withPort = await store.createCredential(newCredential(orgA, 'api.github.com:8443'));
    t.equal(withPort.hostname, 'api.github.com:8443', 'a hostname with a port is a different hostname');
  });

  t.test(`${name}: an org holds at most ORG_AGENTS_MAX agents and ORG_CREDENTIALS_MAX credentials; past them nothing is written; another org is not held`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    for (let i = 0; i < ORG_AGENTS_MAX; i++) await store.createAgent(newAgent(orgA, `a${i}`));
    for (let i = 0; i < ORG_CREDENTIALS_MAX; i++) await store.createCredential(newCredential(orgA, `h${i}.example.com`));
    const agentRefused = await rejectionOf(store.createAgent(newAgent(orgA, 'one too many')));
    t.ok(agentRefused instanceof GuardError);
    t.match(agentRefused, { code: 'conflict', message: 'The organization has 10,000 agents, the most allowed; delete one to create another.', extra: { limit: 'agents_per_org' } });
    const credentialRefused = await rejectionOf(store.createCredential(newCredential(orgA, 'one-too-many.example.com')));
    t.match(credentialRefused, { code: 'conflict', message: 'The organization has 10,000 credentials, the most allowed; delete one to create another.', extra: { limit: 'credentials_per_org' } });
    // At the bound, a taken hostname is refused as one too many.
    t.match(await rejectionOf(store.createCredential(newCredential(orgA, 'h0.example.com'))), { code: 'conflict', extra: { limit: 'credentials_per_org' } });
    const agents = await store.listAgents(orgA);
    const credentials = await store.listCredentials(orgA);
    t.equal(agents.length, ORG_AGENTS_MAX, 'the refused agent was not stored');
    t.equal(credentials.length, ORG_CREDENTIALS_MAX, 'the refused credential was not stored');
    t.equal(await store.findCredentialForHost(orgA, 'one-too-many.example.com'), undefined);
    t.ok(await store.createAgent(newAgent(orgB, 'theirs')), 'another org creates agents');
    t.ok(await store.createCredential(newCredential(orgB, 'h0.example.com')), 'and credentials');
    t.ok(await store.deleteAgent(orgA, agents[0]!.id));
    t.ok(await store.deleteCredential(orgA, credentials[0]!.id));
    t.ok(await store.createAgent(newAgent(orgA, 'in its place')), 'a deleted agent frees its place');
    t.ok(await store.createCredential(newCredential(orgA, 'in-its-place.example.com')), 'a deleted credential frees its place');
  });

  t.test(`${name}: findCredentialForHost matches the org and the host and port (the port wins; no port covers every port), with the sealed value`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const plain = newCredential(orgA, 'api.example.com', { sealedValue: 'sealed-plain' });
    const ported = newCredential(orgA, 'api.example.com:8443', {
      credType: 'header',
      headerName: 'X-Api-Key',
      sealedValue: 'sealed-ported',
    });
    const plainRecord = await store.createCredential(plain);
    const portedRecord = await store.createCredential(ported);

    t.same(await store.findCredentialForHost(orgA, 'api.example.com'), { ...plainRecord, sealedValue: 'sealed-plain' });
    const any = await store.anyCredential();
    t.ok(any !== undefined && typeof any.sealedValue === 'string' && typeof any.orgId === 'string', 'anyCredential: one, with its org and sealed value (the start checks SECRET_KEY on it)');
    t.same(await store.findCredentialForHost(orgA, 'api.example.com:8443'), {
      ...portedRecord,
      sealedValue: 'sealed-ported',
    });
    t.same(await store.findCredentialForHost(orgA, 'api.example.com:9000'), { ...plainRecord, sealedValue: 'sealed-plain' }, 'a credential without a port covers every other port');
    t.equal(await store.findCredentialForHost(orgA, 'other.example.com:8443'), undefined, 'a port alone matches nothing');
    t.equal(await store.findCredentialForHost(orgB, 'api.example.com:9000'), undefined, "nor another org's, on any port");
    t.equal(await store.findCredentialForHost(orgA, 'example.com'), undefined, 'no suffix match');
    t.equal(await store.findCredentialForHost(orgB, 'api.example.com'), undefined, "never another org's credential");
  });

  t.test(`${name}: deleteCredential deletes only within its own org and frees the hostname`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const credential = await store.createCredential(newCredential(orgA, 'api.github.com'));

    t.equal(await store.deleteCredential(orgB, credential.id), false, 'another org cannot delete it');
    t.same(await store.listCredentials(orgA), [credential], 'a refused delete keeps it');

    t.equal(await store.deleteCredential(orgA, credential.id), true);
    t.same(await store.listCredentials(orgA), []);
    t.equal(await store.findCredentialForHost(orgA, 'api.github.com'), undefined);
    t.equal(await store.deleteCredential(orgA, credential.id), false, 'a second delete finds nothing');
    t.equal(await store.deleteCredential(orgA, randomUUID()), false);

    const again = await store.createCredential(newCredential(orgA, 'api.github.com'));
    t.not(again.id, credential.id, 'the hostname can be given a new credential');
  });

  t.test(`${name}: a change subscriber hears each cache-invalidating change, after it is committed`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const hash = keyHash();
    const agent = await store.createAgent(newAgent(orgA, 'watched', { keyHash: hash }));

    // Lookups made from inside the listener: they must already see the change.
    const seenFromListener: Promise<unknown>[] = [];
    const subscriber = recorder((change) => {
      if (change.kind === 'agent') seenFromListener.push(store.findAgentByKeyHash(change.keyHash));
      if (change.kind === 'credential') seenFromListener.push(store.findCredentialForHost(change.orgId, change.hostname));
    });
    const { heard } = subscriber;
    const unsubscribe = store.changes.subscribe(subscriber);

    await store.setPolicy(agent.id, 'version: "1"\nrules: []\n');
    t.same(heard, [{ kind: 'policy', agentId: agent.id }], 'policy set, heard by the time the call resolves');

    const credential = await store.createCredential(newCredential(orgA, 'api.github.com', { sealedValue: 'sealed-watched' }));
    t.same(heard.at(-1), { kind: 'credential', orgId: orgA, hostname: 'api.github.com' }, 'credential create');

    t.equal(await store.deleteCredential(orgB, credential.id), false);
    t.equal(await store.deleteAgent(orgB, agent.id), false);
    t.equal(heard.length, 2, 'a refused delete changes nothing and tells nobody');

    t.equal(await store.deleteCredential(orgA, credential.id), true);
    t.same(heard.at(-1), { kind: 'credential', orgId: orgA, hostname: 'api.github.com' }, 'credential delete');

    t.equal(await store.deleteAgent(orgA, agent.id), true);
    t.same(heard.at(-1), { kind: 'agent', agentId: agent.id, keyHash: hash }, 'agent delete, with its key hash');

    t.equal(heard.length, 4);
    t.same(
      await Promise.all(seenFromListener),
      [{ ...credential, sealedValue: 'sealed-watched' }, undefined, undefined],
      'a listener already sees the created credential, the deleted credential and the deleted agent gone',
    );

    t.equal(subscriber.clears, 0, 'changes made in this process never clear');

    unsubscribe();
    await store.createCredential(newCredential(orgA, 'api.gitlab.com'));
    t.equal(heard.length, 4, 'an unsubscribed listener hears nothing more');
  });

  t.test(`${name}: a throwing listener does not undo the change or silence the others`, async (t) => {
    const store = await storeFor(t);
    const { orgA } = await twoOrgs(store);
    const next = recorder();
    const { heard } = next;
    store.changes.subscribe({
      apply() {
        throw new Error('listener broke');
      },
      clear() {},
    });
    store.changes.subscribe(next);

    const credential = await store.createCredential(newCredential(orgA, 'api.github.com'));
    t.same(await store.listCredentials(orgA), [credential], 'the credential was stored');
    t.same(heard, [{ kind: 'credential', orgId: orgA, hostname: 'api.github.com' }], 'the next listener still heard');
  });

  t.test(`${name}: a following feed hears what another process commits`, async (t) => {
    const [writer, follower] = await stores.openTwo();
    t.teardown(async () => {
      await writer.close();
      await follower.close();
    });
    const { orgA } = await twoOrgs(writer);
    const subscriber = recorder();
    follower.changes.subscribe(subscriber);
    const errors: unknown[] = [];
    await follower.changes.follow({ pollMs: 20, onError: (err) => errors.push(err) });

    const credential = await writer.createCredential(newCredential(orgA, 'api.github.com'));
    const expected = { kind: 'credential', orgId: orgA, hostname: 'api.github.com' };
    t.ok(
      await eventually(() => subscriber.heard.some((change) => JSON.stringify(change) === JSON.stringify(expected))),
      'the other store commit reached this one',
    );
    t.same(errors, [], 'the log was read without error');
    t.equal(subscriber.clears, 0, 'a follower that kept its place clears nothing');

    follower.changes.stop();
    const heardBefore = subscriber.heard.length;
    await writer.deleteCredential(orgA, credential.id);
    await new Promise((resolve) => setTimeout(resolve, 200));
    t.equal(subscriber.heard.length, heardBefore, 'a stopped feed follows no more');
  });

  t.test(`${name}: rate-limit syncs add up two processes' counts, list the live ones, and skip expired counts`, async (t) => {
    const [a, b] = await stores.openTwo();
    t.teardown(async () => {
      await a.close();
      await b.close();
    });
    // Unique keys and node ids: stores may share one database with other tests.
    const key = `limit-${randomUUID()}\u00005/60000+0`;
    const nodeA = `node-a-${randomUUID()}`;
    const nodeB = `node-b-${randomUUID()}`;
    const now = Date.now();
    const row = (agent: string, slot: number, count: number, expiresAt = now + 60_000) => ({ limit_key: key, agent_id: agent, slot, count, expires_at: expiresAt });
    const first = await a.syncRateCounts({ node_id: nodeA, now, live_after: now - 2000, add: [row('agent-1', 7, 2), row('agent-2', 7, 1)], changed_since: now - 1 });
    t.ok(first.nodes.includes(nodeA), 'the syncing node is live');
    t.notOk(first.nodes.includes(nodeB), 'a node that never synced is not');
    const second = await b.syncRateCounts({ node_id: nodeB, now: now + 10, live_after: now - 2000, add: [row('agent-1', 7, 3), row('agent-1', 8, 1), row('agent-3', 7, 1, now - 1)], changed_since: now - 1 });
    const ours = (rows: { limit_key: string; agent_id: string; slot: number; count: number }[]) =>
      rows.filter((r) => r.limit_key === key).map((r) => `${r.agent_id}@${r.slot}=${r.count}`).sort();
    t.strictSame(ours(second.rows), ['agent-1@7=5', 'agent-1@8=1', 'agent-2@7=1'], "both processes' counts added up; the expired count is not read");
    t.strictSame(second.nodes.filter((n) => n === nodeA || n === nodeB), [nodeA, nodeB].sort(), 'both nodes live, sorted');
    const later = await a.syncRateCounts({ node_id: nodeA, now: now + 20, live_after: now + 5, add: [], changed_since: now + 5 });
    t.strictSame(ours(later.rows), ['agent-1@7=5', 'agent-1@8=1'], 'only rows changed since then are read back');
    t.ok(later.nodes.includes(nodeA) && later.nodes.includes(nodeB), 'B synced after live_after, so it is live');
    const stale = await a.syncRateCounts({ node_id: nodeA, now: now + 30, live_after: now + 25, add: [], changed_since: now + 25 });
    t.notOk(stale.nodes.includes(nodeB), 'a node silent since live_after is not live');
  });

  t.test(`${name}: approvals are created pending, listed newest first by status, decided once, used once, and isolated by org`, async (t) => {
    const [store, other] = await stores.openTwo();
    t.teardown(async () => {
      await store.close();
      await other.close();
    });
    const { orgA, orgB } = await twoOrgs(store);
    const agent = await store.createAgent(newAgent(orgA, 'payer'));
    const held = (path: string, timeoutS = 3600) => ({
      orgId: orgA,
      agentId: agent.id,
      agentName: agent.name,
      toolName: 'api.stripe.test',
      action: 'POST',
      host: 'api.stripe.test:8443',
      path,
      query: 'a=1',
      reasoning: 'pay the invoice',
      taskId: 'task-7',
      ruleMatched: 'payments',
      bodySha256: 'ab'.repeat(32),
      bodyBytes: 3,
      timeoutS,
    });
    const body = Buffer.from([0, 1, 255]);
    const first = (await store.createApproval(held('/v1/charges'), body))!;
    t.match(first, { id: UUID, status: 'pending', decidedAt: null, decidedBy: null, note: null, host: 'api.stripe.test:8443', query: 'a=1', bodyBytes: 3 });
    t.match(first.createdAt, ISO_UTC_MS);
    t.equal(Date.parse(first.expiresAt) - Date.parse(first.createdAt), 3_600_000, 'expires_at = created_at + approval_timeout');
    t.same(await other.getApproval(orgA, first.id), first, 'another process reads it back');
    t.same(await other.approvalBody(orgA, first.id), body, 'with its body, byte for byte');
    t.equal(await store.getApproval(orgB, first.id), undefined, 'another org does not see it');
    t.equal(await store.approvalBody(orgB, first.id), null, 'nor its body');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const second = (await store.createApproval({ ...held('/v1/refunds'), bodySha256: 'cd'.repeat(32), bodyBytes: 0 }, null))!;
    t.equal(await store.approvalBody(orgA, second.id), null, 'no body: null');
    t.same((await store.listApprovals(orgA, { limit: 10 })).map((a) => a.id), [second.id, first.id], 'newest first');
    t.same(await store.listApprovals(orgB, { limit: 10 }), [], 'another org lists none');
    t.same((await store.listApprovals(orgA, { limit: 1 })).map((a) => a.id), [second.id], 'limit');

    // Decisions: only across the org, only while pending; the first stands.
    t.equal(((await rejectionOf(store.decideApproval(orgB, first.id, 'approved', 'b@example.test', null))) as GuardError).code, 'not_found');
    const subscriber = recorder();
    store.changes.subscribe(subscriber);
    const [a, b] = await Promise.allSettled([
      store.decideApproval(orgA, first.id, 'approved', 'a@example.test', 'ok, once'),
      other.decideApproval(orgA, first.id, 'denied', 'c@example.test', null),
    ]);
    const fulfilled = [a, b].filter((r) => r.status === 'fulfilled');
    const rejected = [a, b].filter((r) => r.status === 'rejected');
    t.equal(fulfilled.length, 1, 'of two racing decisions exactly one is written');
    t.equal(((rejected[0] as PromiseRejectedResult).reason as GuardError).code, 'conflict', 'the other is a conflict');
    const decided = (await store.getApproval(orgA, first.id))!;
    t.equal(decided.status, (fulfilled[0] as PromiseFulfilledResult<{ status: string }>).value.status, 'the first decision stands');
    t.match(decided.decidedAt, ISO_UTC_MS);
    if (decided.status === 'approved') {
      t.same(subscriber.heard, [{ kind: 'approval', orgId: orgA, approvalId: first.id }], 'this process heard its decision');
      t.same((await store.listApprovals(orgA, { status: 'approved', limit: 10 })).map((x) => x.id), [first.id], 'listed as approved');
      t.equal(await store.useApproval(orgB, first.id), false, 'another org cannot use it');
      const uses = await Promise.all([store.useApproval(orgA, first.id), other.useApproval(orgA, first.id)]);
      t.same(uses.sort(), [false, true], 'of two racing uses exactly one gets it');
      t.equal((await store.getApproval(orgA, first.id))!.status, 'used');
      t.equal(await store.approvalBody(orgA, first.id), null, 'its body is dropped once used');
      t.equal(await store.useApproval(orgA, first.id), false, 'and never again');
      t.equal(await store.returnApproval(orgB, first.id), false, 'another org cannot give it back');
      t.equal(await other.returnApproval(orgA, first.id), true, 'given back (its call never went upstream)');
      t.equal((await store.getApproval(orgA, first.id))!.status, 'approved', 'approved again');
      t.equal(await store.returnApproval(orgA, first.id), false, 'only a used one is given back');
      t.equal(await store.useApproval(orgA, first.id), true, 'and used again');
    }
    t.equal(await store.returnApproval(orgA, second.id), false, 'a pending approval is not made approved');
    t.equal((await store.getApproval(orgA, second.id))!.status, 'pending');
    t.equal(await store.useApproval(orgA, second.id), false, 'a pending approval cannot be used');
    t.same((await store.listApprovals(orgA, { status: 'pending', limit: 10 })).map((x) => x.id), [second.id], 'status filter');
    t.same((await store.listApprovals(orgA, { status: 'pending', agentId: randomUUID(), limit: 10 })), [], 'agent filter');
    t.same((await store.listApprovals(orgA, { createdSince: second.createdAt, limit: 10 })).map((x) => x.id), [second.id], 'created_at window');
  });

  t.test(`${name}: an agent's pending approvals are bounded: past maxPending none is made until one is decided`, async (t) => {
    const store = await stores.open();
    t.teardown(() => store.close());
    const { orgA } = await twoOrgs(store);
    const agent = await store.createAgent(newAgent(orgA, 'eager'));
    const other = await store.createAgent(newAgent(orgA, 'calm'));
    const held = (agentId: string) => ({ orgId: orgA, agentId, agentName: 'a', toolName: 't', action: 'POST', host: 't', path: '/', query: '', reasoning: '', taskId: '', ruleMatched: 'r', bodySha256: '0'.repeat(64), bodyBytes: 0, timeoutS: 60 });
    const made = [];
    for (let i = 0; i < 3; i++) made.push(await store.createApproval(held(agent.id), null, 3));
    t.ok(made.every((a) => a !== undefined), 'up to the bound');
    t.equal(await store.createApproval(held(agent.id), null, 3), undefined, 'then none');
    t.ok(await store.createApproval(held(other.id), null, 3), "another agent's count is its own");
    await store.decideApproval(orgA, made[0]!.id, 'denied', 'a@example.test', null);
    t.ok(await store.createApproval(held(agent.id), null, 3), 'a decided one frees a place');
    t.equal((await store.listApprovals(orgA, { agentId: agent.id, status: 'pending', limit: 10 })).length, 3);
  });

  t.test(`${name}: an approval past expires_at reads expired, can be neither decided nor used, and lists as expired`, async (t) => {
    const store = await stores.open();
    t.teardown(() => store.close());
    const { orgA } = await twoOrgs(store);
    const agent = await store.createAgent(newAgent(orgA, 'slow'));
    // A timeout of 0 is below the policy's minimum, which the store does not check: expired at once.
    const approval = (await store.createApproval(
      { orgId: orgA, agentId: agent.id, agentName: agent.name, toolName: 't', action: 'GET', host: 't', path: '/', query: '', reasoning: '', taskId: '', ruleMatched: 'r', bodySha256: '0'.repeat(64), bodyBytes: 0, timeoutS: 0 },
      null,
    ))!;
    t.equal((await store.getApproval(orgA, approval.id))!.status, 'expired');
    t.equal(((await rejectionOf(store.decideApproval(orgA, approval.id, 'approved', 'a@example.test', null))) as GuardError).code, 'conflict');
    t.equal(await store.useApproval(orgA, approval.id), false);
    t.same((await store.listApprovals(orgA, { status: 'expired', limit: 10 })).map((x) => x.id), [approval.id]);
    t.same(await store.listApprovals(orgA, { status: 'pending', limit: 10 }), []);
  });

  t.test(`${name}: the held body of an approval that expired unused is dropped when another approval is made`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const agent = await store.createAgent(newAgent(orgA, 'forgotten'));
    const held = (timeoutS: number, orgId = orgA, agentId = agent.id) => store.createApproval(
      { orgId, agentId, agentName: 'forgotten', toolName: 't', action: 'POST', host: 't', path: '/', query: '', reasoning: '', taskId: '', ruleMatched: 'r', bodySha256: '0'.repeat(64), bodyBytes: 4, timeoutS },
      Buffer.from('body'),
    );
    const expired = (await held(0))!; // expired at once
    const live = (await held(3600))!;
    t.same(await store.approvalBody(orgA, live.id), Buffer.from('body'), 'a live approval keeps its body');
    const otherAgent = await store.createAgent(newAgent(orgB, 'elsewhere'));
    await held(3600, orgB, otherAgent.id); // any approval's creation drops them, whoever makes it
    t.equal(await store.approvalBody(orgA, expired.id), null, 'the expired one\'s body is gone: no call can use it');
    t.same(await store.approvalBody(orgA, live.id), Buffer.from('body'), 'the live one keeps it');
    t.equal((await store.getApproval(orgA, expired.id))!.status, 'expired', 'the approval itself stays listed');
  });

  t.test(`${name}: audit chain heads move only forward, one per (org, writer), and are read per org`, async (t) => {
    const store = await storeFor(t);
    const { orgA, orgB } = await twoOrgs(store);
    const head = (orgId: string, writer: string, seq: number) => ({ org_id: orgId, writer, seq, seal_hash: `${'a'.repeat(60)}${String(seq).padStart(4, '0')}`, at: new Date().toISOString() });
    const w1 = randomUUID();
    const w2 = randomUUID();
    await store.recordSealHeads([head(orgA, w1, 1), head(orgA, w2, 4), head(orgB, w1, 2)]);
    await store.recordSealHeads([head(orgA, w1, 3)]);
    await store.recordSealHeads([head(orgA, w1, 2), head(orgA, w2, 4)]);
    const sorted = (orgId: string) => store.listSealHeads(orgId).then((heads) => heads.sort((a, b) => (a.writer < b.writer ? -1 : 1)));
    const expected = [{ writer: w1, seq: 3, sealHash: head(orgA, w1, 3).seal_hash }, { writer: w2, seq: 4, sealHash: head(orgA, w2, 4).seal_hash }].sort((a, b) => (a.writer < b.writer ? -1 : 1));
    t.same(await sorted(orgA), expected, 'the highest seq of each chain; an older head does not move it back');
    t.same(await sorted(orgB), [{ writer: w1, seq: 2, sealHash: head(orgB, w1, 2).seal_hash }], 'another org has its own');
    t.same(await store.listSealHeads(randomUUID()), []);
    const orgs = await store.sealHeadOrgs();
    t.ok(orgs.includes(orgA) && orgs.includes(orgB), 'the orgs with a head are listed');
    t.equal(new Set(orgs).size, orgs.length, 'each once');
    const since = await store.sealingSince();
    t.ok(since instanceof Date && !Number.isNaN(since.getTime()) && since.getTime() <= Date.now(), 'when sealing began is kept');
    const before = Date.now();
    const user = await store.createUserWithOrg(uniqueEmail('org-created'), 'hash');
    const created = await store.orgCreatedAt(user.orgId.toUpperCase());
    t.ok(created !== null && created.getTime() >= before - 1000 && created.getTime() <= Date.now() + 1000, `when an org was created is kept (${created?.toISOString()}), its id in any case`);
    t.equal(await store.orgCreatedAt(randomUUID()), null, 'no such org: null');
  });

  t.test(`${name}: a store that cannot be reached rejects with StoreUnavailableError, not the driver's error`, async (t) => {
    const err = await rejectionOf(
      (async () => {
        const store = await stores.openUnreachable(t);
        t.teardown(() => store.close());
        await store.createUserWithOrg(uniqueEmail('unreachable'), 'hash');
      })(),
    );
    t.ok(err instanceof StoreUnavailableError, `rejects with a StoreUnavailableError (${String(err)})`);
    t.equal((err as StoreUnavailableError).name, 'StoreUnavailableError');
    t.ok((err as Error).cause instanceof Error, "the driver's error is kept as the cause");
  });
}
