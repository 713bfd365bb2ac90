// Each proxy stage on its own: built by its createX(deps), run on one exchange,
// answering (or not) as the contract says. The answer is recorded instead of
// written to a socket; the cache stages read through a real SQLite store.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { createAdmit } from '../../proxy/admit.js';
import { createAuthorize } from '../../proxy/authorize.js';
import { createProxyCaches } from '../../proxy/caches.js';
import type { StageResult } from '../../proxy/exchange.js';
import { createGuardTarget } from '../../proxy/guard-target.js';
import { createHeldCalls } from '../../proxy/hold.js';
import { createInjectCredential } from '../../proxy/inject-credential.js';
import { createParseTarget } from '../../proxy/parse-target.js';
import { createResolveAgent } from '../../proxy/resolve-agent.js';
import { loadConfig } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { PROXY_ALLOW } from '../../shared/http.js';
import { Metrics } from '../../shared/metrics.js';
import { credentialAssociatedData, generateApiKey, hashApiKey, sealValue } from '../../shared/secrets.js';
import { openMetadataStore } from '../../shared/stores/open-stores.js';
import { eventually } from '../support/eventually.js';
import { exchange } from '../support/recorded-response.js';

async function settle(result: StageResult): Promise<undefined | false> {
  return result instanceof Promise ? await result : result;
}

function json(answer: { body: string } | null): Record<string, unknown> {
  return answer === null ? {} : (JSON.parse(answer.body) as Record<string, unknown>);
}

t.test('admit', async (t) => {
  let admitting = true;
  let saturated = false;
  let overfull = false;
  let unrecorded = 0;
  const admit = createAdmit({ admitting: () => admitting, saturated: () => saturated, overfull: () => overfull, unrecorded: () => unrecorded++ });

  t.test('passes a well-formed call', async (t) => {
    const { ex, answer } = exchange();
    t.equal(admit(ex), undefined);
    t.equal(answer(), null);
  });

  t.test('refuses every call once shutdown began, closing the connection', async (t) => {
    admitting = false;
    const { ex, answer } = exchange();
    t.equal(admit(ex), false);
    t.match(answer(), { status: '503 Service Unavailable', closeConnection: true });
    t.equal(json(answer()).error, 'unavailable');
    t.equal(ex.auditDecision, 'denied');
    admitting = true;
  });

  t.test('answers a size problem of the head with its own code', async (t) => {
    const { ex, answer } = exchange({ headError: { code: 'headers_too_large', message: 'too big' } });
    t.equal(admit(ex), false);
    t.equal(answer()!.status, '431 Request Header Fields Too Large');
    t.same(json(answer()), { error: 'headers_too_large', message: 'too big' });
  });

  t.test('answers a framing problem on a later turn, closing the connection', async (t) => {
    const { ex, answer } = exchange({ headError: { code: 'invalid_request', message: 'two lengths' } });
    const result = admit(ex);
    t.type(result, Promise);
    t.equal(answer(), null, 'nothing written inside the handler');
    t.equal(await result, false);
    t.match(answer(), { status: '400 Bad Request', closeConnection: true });
  });

  t.test('refuses a method outside the seven with 405 and Allow', async (t) => {
    const { ex, answer } = exchange({ method: 'PROPFIND' });
    t.equal(admit(ex), false);
    t.equal(answer()!.status, '405 Method Not Allowed');
    t.equal(answer()!.headers.allow, PROXY_ALLOW);
  });

  t.test('fails closed while the audit pipeline is saturated', async (t) => {
    saturated = true;
    const { ex, answer } = exchange();
    t.equal(admit(ex), false);
    t.equal(json(answer()).error, 'unavailable');
    t.equal(ex.unaudited, false, 'the refusal is recorded');
    saturated = false;
  });

  t.test('past the queue\'s headroom, the refusal goes without a record and is counted', async (t) => {
    saturated = true;
    overfull = true;
    const { ex, answer } = exchange();
    t.equal(admit(ex), false);
    t.equal(json(answer()).error, 'unavailable');
    t.equal(ex.unaudited, true, 'no record');
    t.equal(unrecorded, 1, 'counted');
    saturated = false;
    overfull = false;
  });
});

t.test('parse-target', async (t) => {
  const parse = createParseTarget();

  t.test('fills in the target and the policy path', async (t) => {
    const { ex, answer } = exchange({ rawTarget: 'API.GitHub.com.:443/repos//x/%61dmin' });
    t.equal(parse(ex), undefined);
    t.equal(answer(), null);
    t.match(ex.target, { hostname: 'api.github.com', authority: 'api.github.com', port: 443, path: '/repos//x/%61dmin' });
    t.equal(ex.policyPath, '/repos/x/admin');
  });

  t.test('refuses a target with no valid host', async (t) => {
    for (const rawTarget of ['', 'user@host/x', 'host:99999/x', 'bad host/x']) {
      const { ex, answer } = exchange({ rawTarget });
      t.equal(parse(ex), false, rawTarget);
      t.equal(json(answer()).error, 'invalid_target', rawTarget);
    }
  });

  t.test('refuses dot segments, keeping the target for the audit', async (t) => {
    const { ex, answer } = exchange({ rawTarget: 'api.example.com/a/%2e%2e/admin' });
    t.equal(parse(ex), false);
    t.equal(json(answer()).error, 'invalid_target');
    t.equal(ex.target?.hostname, 'api.example.com');
  });
});

t.test('guard-target', async (t) => {
  const guard = createGuardTarget({ allowTargets: ['127.0.0.1'], dnsServer: null });

  t.test('pins an allow-listed literal address', async (t) => {
    const { ex } = exchange({ rawTarget: '127.0.0.1:8443/x' });
    createParseTarget()(ex);
    t.equal(await settle(guard(ex)), undefined);
    t.equal(ex.address, '127.0.0.1');
  });

  t.test('refuses a loopback address the allow-list does not open', async (t) => {
    const { ex, answer } = exchange({ rawTarget: '[::1]:8443/x' });
    createParseTarget()(ex);
    t.equal(await settle(guard(ex)), false);
    t.match(answer()!.status, /^403/);
    t.equal(json(answer()).error, 'target_forbidden');
    t.equal(ex.ruleMatched, 'target_forbidden');
  });
});

t.test('the cache stages read through a real store', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-stages-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const store = await openMetadataStore(loadConfig({ DATA_DIR: dir }));
  t.teardown(() => store.close());
  const metrics = new Metrics({ agentLabel: false });
  const encryptionKey = Buffer.alloc(32, 7);
  const caches = createProxyCaches(store, encryptionKey, { maxEntries: 100, ttlMs: 60_000, stats: metrics.caches });
  t.teardown(() => caches.close());
  const user = await store.createUserWithOrg('stages@example.com', 'x');
  const key = generateApiKey();
  const agent = await store.createAgent({ orgId: user.orgId, name: 'a', logOutputs: 'hash', keyHash: hashApiKey(key), apiKeyPrefix: key.slice(0, 12) });
  await store.setPolicy(agent.id, 'version: "1"\nrules:\n  - name: no-admin\n    tool: "*"\n    action: "*"\n    path: /admin/**\n    decision: deny\n');
  await store.createCredential({
    orgId: user.orgId, name: 'tok', hostname: 'api.example.com', credType: 'bearer', headerName: null, queryParam: null,
    sealedValue: sealValue(encryptionKey, 'canary-token', credentialAssociatedData(user.orgId, 'api.example.com')),
  });

  const resolve = createResolveAgent(caches);
  const authorize = createAuthorize(caches);
  const inject = createInjectCredential(caches);
  function call(rawTarget: string, keyHash = hashApiKey(key)): ReturnType<typeof exchange> {
    const made = exchange({ rawTarget });
    made.ex.keyHash = keyHash;
    createParseTarget()(made.ex);
    return made;
  }

  t.test('resolve-agent: a miss waits for the store, a hit answers at once', async (t) => {
    const first = call('api.example.com/x');
    const result = resolve(first.ex);
    t.type(result, Promise, 'first lookup goes to the store');
    t.equal(await result, undefined);
    t.equal(first.ex.agent?.id, agent.id);
    const second = call('api.example.com/x');
    t.equal(resolve(second.ex), undefined, 'second lookup is synchronous');
    t.equal(metrics.caches.agents.hits, 1);
    t.equal(metrics.caches.agents.misses, 1);
  });

  t.test('resolve-agent: a client that leaves during a lookup from the store is recorded 499 under its agent', async (t) => {
    const cold = createProxyCaches(store, encryptionKey, { maxEntries: 100, ttlMs: 60_000, stats: new Metrics({ agentLabel: false }).caches });
    t.teardown(() => cold.close());
    const made = call('api.example.com/x');
    const recorded: Array<{ agentId: string; status: number }> = [];
    let metricsCounted = 0;
    made.ex.onFinish = (ex) => {
      if (!ex.recordingLate) metricsCounted++; // as record-audit.ts: metrics once a call
      if (ex.agent === null) return false; // and no agent, no record
      recorded.push({ agentId: ex.agent.id, status: ex.statusCode });
      return true;
    };
    const done: string[] = [];
    made.ex.onDone = () => done.push(`done after ${recorded.length} record(s)`);
    const result = createResolveAgent(cold)(made.ex);
    t.type(result, Promise, 'the key is read from the store');
    made.ex.clientAborted(); // uWS's onAborted, before the read's answer
    t.same(recorded, [], 'no agent known yet');
    t.same(done, [], "still in flight: shutdown's drain waits for its record");
    t.equal(await settle(result), false, 'the pipeline goes no further');
    t.same(recorded, [{ agentId: agent.id, status: 499 }], 'recorded once the agent is known');
    t.same(done, ['done after 1 record(s)'], 'out of the calls in flight once its record is queued');
    t.equal(metricsCounted, 1, 'and counted in the metrics once');
  });

  t.test('resolve-agent: an unknown key is 401, remembered apart from known agents', async (t) => {
    const unknown = hashApiKey(generateApiKey());
    const first = call('api.example.com/x', unknown);
    t.equal(await settle(resolve(first.ex)), false);
    t.equal(json(first.answer()).error, 'invalid_api_key');
    const second = call('api.example.com/x', unknown);
    t.equal(resolve(second.ex), false, 'answered from the negative cache');
    t.equal(caches.agents.entries.has(unknown), false);
    t.equal(caches.agents.absent?.has(unknown), true);
  });

  t.test('authorize: the policy denies with its rule, else allows', async (t) => {
    const denied = call('api.example.com/admin/users');
    await settle(resolve(denied.ex));
    t.equal(await settle(authorize(denied.ex)), false);
    t.match(json(denied.answer()), { error: 'policy_denied', rule_matched: 'no-admin' });
    const allowed = call('api.example.com/repos');
    await settle(resolve(allowed.ex));
    t.equal(await settle(authorize(allowed.ex)), undefined);
    t.equal(allowed.ex.ruleMatched, 'default');
  });

  t.test('authorize: a stored policy past the path-glob bounds of 2026-11-27 (saved before them) still decides, not 500', async (t) => {
    const oldKey = generateApiKey();
    const old = await store.createAgent({ orgId: user.orgId, name: 'saved-before', logOutputs: 'none', keyHash: hashApiKey(oldKey), apiKeyPrefix: oldKey.slice(0, 12) });
    // Written to the store as an earlier version accepted it: 17 wildcards in one glob.
    await store.setPolicy(old.id, `version: "1"\nrules:\n  - {name: deep, tool: "*", action: "*", path: "/${'*/'.repeat(16)}*", decision: deny}\n`);
    const deep = call(`api.example.com/${'a/'.repeat(16)}b`, hashApiKey(oldKey));
    await settle(resolve(deep.ex));
    t.equal(await settle(authorize(deep.ex)), false, 'decided: denied by its rule');
    t.match(json(deep.answer()), { error: 'policy_denied', rule_matched: 'deep' });
  });

  t.test('inject-credential: replaces the agent\'s header of the same name', async (t) => {
    const made = call('api.example.com/repos');
    made.ex.headers.push('authorization', 'Bearer agent-own', 'accept', '*/*');
    await settle(resolve(made.ex));
    t.equal(await settle(inject(made.ex)), undefined);
    t.same(made.ex.headers, ['accept', '*/*', 'authorization', 'Bearer canary-token']);
  });

  t.test('inject-credential: a host without a credential is forwarded as is', async (t) => {
    const made = call('other.example.com/repos');
    made.ex.headers.push('authorization', 'Bearer agent-own');
    await settle(resolve(made.ex));
    t.equal(await settle(inject(made.ex)), undefined);
    t.equal(made.ex.credential, null);
    t.same(made.ex.headers, ['authorization', 'Bearer agent-own']);
  });

  t.test('a change that evicts a key while it is read makes the lookup read it again, not fail the call', async (t) => {
    caches.clear();
    const made = call('api.example.com/repos');
    await settle(resolve(made.ex));
    const policyRead = authorize(made.ex);
    t.type(policyRead, Promise, 'the policy is being read');
    caches.apply({ kind: 'policy', agentId: agent.id }); // a policy set meanwhile: lru-cache aborts the read
    t.equal(await settle(policyRead), undefined, 'the call goes on (it used to be a 500)');
    t.equal(made.ex.ruleMatched, 'default');
  });

  /** Caches over the real store whose credential reads find their value at once and answer `delayMs()` later, as over a network. */
  function lateCredentialReads(t: Test, delayMs: () => number) {
    const late = new Proxy(store, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver) as unknown;
        if (name !== 'findCredentialForHost') return typeof value === 'function' ? value.bind(target) : value;
        return async (...args: [string, string]) => {
          const found = await target.findCredentialForHost(...args);
          await new Promise((r) => setTimeout(r, delayMs()));
          return found;
        };
      },
    });
    const lateCaches = createProxyCaches(late, encryptionKey, { maxEntries: 100, ttlMs: 60_000, stats: new Metrics({ agentLabel: false }).caches });
    t.teardown(() => lateCaches.close());
    return { lateCaches, lateInject: createInjectCredential(lateCaches) };
  }

  /** The credential a new call to `rawTarget` gets injected. */
  async function credentialOfNextCall(injectWith: ReturnType<typeof createInjectCredential>, rawTarget: string) {
    const made = call(rawTarget);
    await settle(resolve(made.ex));
    await settle(injectWith(made.ex));
    return made.ex.credential;
  }

  t.test('a credential deleted while another port of its host is being read is not cached for that port', async (t) => {
    // The real store, its credential reads answered 50 ms late, as over a network (MongoDB):
    // the read of the :8443 key has found the credential when the delete commits and its change arrives.
    const { lateCaches, lateInject } = lateCredentialReads(t, () => 50);
    const [cred] = await store.listCredentials(user.orgId);
    const ported = call('api.example.com:8443/repos');
    await settle(resolve(ported.ex));
    const read = lateInject(ported.ex);
    t.type(read, Promise, 'the :8443 credential is being read');
    await new Promise((r) => setTimeout(r, 10));
    t.equal(await store.deleteCredential(user.orgId, cred!.id), true);
    lateCaches.apply({ kind: 'credential', orgId: user.orgId, hostname: 'api.example.com' }); // as the change feed delivers it
    t.equal(await settle(read), undefined);
    t.equal(ported.ex.credential, null, 'the read done again after the change finds none');
    t.equal(await credentialOfNextCall(lateInject, 'api.example.com:8443/repos'), null, 'and nothing stale was cached');
  });

  t.test('a credential change reaches a read that replaced an aborted one, after the aborted one ended', async (t) => {
    // The real store, each credential read answered late (100 ms, then 300 ms), its value found at its start.
    const delays = [100, 300];
    const { lateCaches, lateInject } = lateCredentialReads(t, () => delays.shift() ?? 0);
    const created = await store.createCredential({ orgId: user.orgId, name: 'overlap', hostname: 'overlap.example.com', credType: 'bearer', headerName: null, queryParam: null, sealedValue: sealValue(encryptionKey, 'overlap-token', credentialAssociatedData(user.orgId, 'overlap.example.com')) });
    const ported = call('overlap.example.com:8443/repos');
    await settle(resolve(ported.ex));
    const read = lateInject(ported.ex); // read 1: 100 ms
    await new Promise((r) => setTimeout(r, 10));
    lateCaches.apply({ kind: 'credential', orgId: user.orgId, hostname: 'overlap.example.com' }); // aborts read 1; read 2 (300 ms) replaces it
    await new Promise((r) => setTimeout(r, 190)); // read 1 has ended; read 2 has not
    t.equal(await store.deleteCredential(user.orgId, created.id), true);
    lateCaches.apply({ kind: 'credential', orgId: user.orgId, hostname: 'overlap.example.com' });
    t.equal(await settle(read), undefined, 'the call goes on after its second read was aborted too (it was a 500)');
    t.equal(ported.ex.credential, null, 'its third read, after the delete, finds none');
    t.equal(await credentialOfNextCall(lateInject, 'overlap.example.com:8443/repos'), null, 'the deleted credential is not cached from the read before its delete');
  });

  t.test('a credential for port 443 answers for that port only, the target\'s unwritten default port included, and wins there', async (t) => {
    const tokenOf = async (target: string) => {
      const made = call(target);
      made.ex.headers.length = 0;
      await settle(resolve(made.ex));
      await settle(inject(made.ex));
      return made.ex.headers[made.ex.headers.indexOf('authorization') + 1] ?? null;
    };
    const add = (hostname: string, value: string) => store.createCredential({
      orgId: user.orgId, name: hostname, hostname, credType: 'bearer', headerName: null, queryParam: null,
      sealedValue: sealValue(encryptionKey, value, credentialAssociatedData(user.orgId, hostname)),
    });
    // Cached first as "none", so that the change must reach these entries.
    t.equal(await tokenOf('ported.example.com/x'), null);
    t.equal(await tokenOf('ported.example.com:8443/x'), null);
    const only443 = await add('ported.example.com:443', 'canary-443');
    t.equal(await tokenOf('ported.example.com/x'), 'Bearer canary-443', 'the default port, unwritten');
    t.equal(await tokenOf('ported.example.com:443/x'), 'Bearer canary-443', 'and written');
    t.equal(await tokenOf('ported.example.com:8443/x'), null, 'not another port');
    await add('ported.example.com', 'canary-any');
    t.equal(await tokenOf('ported.example.com:8443/x'), 'Bearer canary-any', 'the portless one covers the other ports');
    t.equal(await tokenOf('ported.example.com/x'), 'Bearer canary-443', 'the one for 443 wins on 443');
    await store.deleteCredential(user.orgId, only443.id);
    t.equal(await tokenOf('ported.example.com/x'), 'Bearer canary-any', 'deleted: the portless one, from the next call');
  });

  t.test('a change evicts what it touches, so the next call sees it', async (t) => {
    await store.deleteAgent(user.orgId, agent.id);
    const made = call('api.example.com/x');
    t.equal(await settle(resolve(made.ex)), false);
    t.equal(json(made.answer()).error, 'invalid_api_key');
  });

  t.test('CACHE_MAX_ENTRIES bounds each cache: the least recently used agent goes first, and is counted', async (t) => {
    const small = createProxyCaches(store, encryptionKey, { maxEntries: 2, ttlMs: 60_000, stats: new Metrics({ agentLabel: false }).caches });
    t.teardown(() => small.close());
    const keys = [generateApiKey(), generateApiKey(), generateApiKey()];
    for (const [n, k] of keys.entries()) {
      await store.createAgent({ orgId: user.orgId, name: `bounded-${n}`, logOutputs: 'none', keyHash: hashApiKey(k), apiKeyPrefix: k.slice(0, 12) });
    }
    const resolveSmall = createResolveAgent(small);
    for (const k of [keys[0]!, keys[1]!, keys[0]!, keys[2]!]) {
      const made = call('api.example.com/x', hashApiKey(k));
      t.equal(await settle(resolveSmall(made.ex)), undefined);
    }
    t.equal(small.agents.entries.size, 2);
    t.equal(small.agents.entries.has(hashApiKey(keys[1]!)), false, 'the least recently used was evicted');
    t.same(small.agents.counters, { hits: 1, misses: 3, evictions: 1 });
    const again = call('api.example.com/x', hashApiKey(keys[1]!));
    t.type(resolveSmall(again.ex), Promise, 'an evicted agent is read from the store again');
  });
});

t.test('the exchange reads the head as the proxy forwards it', async (t) => {
  const { ex } = exchange();
  const pairs: Array<[string, string]> = [
    ['accept', '*/*'], ['keep-alive', 'timeout=5'], ['x-agent-reasoning', 'why'], ['x-agent-task-id', 'task-1'],
    ['x-request-id', 'rid-1'], ['proxy-authorization', 'secret'], ['x-named', 'dropped'], ['expect', '100-continue'],
  ];
  for (const [name, value] of pairs) ex.header(name, value);
  ex.dropConnectionFields(['x-named']);
  t.same(ex.headers, ['accept', '*/*', 'x-request-id', 'rid-1']);
  t.equal(ex.reasoning, 'why');
  t.equal(ex.taskId, 'task-1');
  t.equal(ex.requestId, 'rid-1');
  t.equal(ex.readProxyPath(`/proxy/${generateApiKey()}/api.example.com/x`), true);
  t.equal(ex.rawTarget, 'api.example.com/x');
  const bad = exchange().ex;
  t.equal(bad.readProxyPath('/proxy/agk_short/api.example.com/x'), false);
  t.equal(bad.keyHash, '');
});


t.test('held calls: a claim that wins as its call ends, or after its approval was given back, never spends the approval on nothing', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-claims-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const store = await openMetadataStore(loadConfig({ DATA_DIR: dir }));
  t.teardown(() => store.close());
  const user = await store.createUserWithOrg('claims@example.com', 'x');
  const key = generateApiKey();
  const agent = await store.createAgent({ orgId: user.orgId, name: 'a', logOutputs: 'none', keyHash: hashApiKey(key), apiKeyPrefix: key.slice(0, 12) });
  const approved = async () => {
    const made = (await store.createApproval({ orgId: user.orgId, agentId: agent.id, agentName: 'a', toolName: 't.example', action: 'POST', host: 't.example', path: '/', query: '', reasoning: '', taskId: '', ruleMatched: 'r', bodySha256: '0'.repeat(64), bodyBytes: 0, timeoutS: 600 }, null))!;
    return store.decideApproval(user.orgId, made.id, 'approved', 'claims@example.com', null);
  };
  const status = async (id: string) => (await store.getApproval(user.orgId, id))!.status;
  // The real store, its writes a round trip away as over MongoDB's network (SQLite answers in the same turn).
  let afterLosingUse: ((id: string) => Promise<unknown>) | null = null;
  const remote = {
    ...store,
    useApproval: async (orgId: string, id: string) => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      const won = await store.useApproval(orgId, id);
      if (!won) await afterLosingUse?.(id);
      return won;
    },
  };
  const { claim, ended } = createHeldCalls({ store: remote, holdS: 0, policyChanges: () => 0, maxPending: 10, metrics: null, publicUrl: () => 'http://guard.test', webhook: null, log: createLogger('error') });
  const retry = (approval: Awaited<ReturnType<typeof approved>>) => {
    const made = exchange({ method: 'POST' });
    Object.assign(made.ex, { approved: true, approval, approvalId: approval.id });
    made.ex.onFinish = (ex) => {
      if (ex.claimed) ended(ex); // as the pipeline does
      return false;
    };
    return made;
  };

  const first = await approved();
  const gone = retry(first);
  const claimed = claim(gone.ex);
  setTimeout(() => gone.ex.clientAborted(), 5); // while the claim's write is on its way
  t.equal(await settle(claimed), false, 'the call ended');
  t.equal(await eventually(async () => ((await status(first.id)) === 'approved' ? 'approved' : undefined), 2000), 'approved', 'its claim won after the client left: given back');

  const second = await approved();
  t.equal(await store.useApproval(user.orgId, second.id), true, 'another call claimed it...');
  afterLosingUse = (id) => store.returnApproval(user.orgId, id); // ...and gives it back just after this claim lost
  const again = retry(second);
  t.equal(await settle(claim(again.ex)), undefined, 'claimed once more, once given back: the call goes on');
  t.equal(again.answer(), null, 'nothing answered');
  t.equal(await status(second.id), 'used');
});
