// The BOLA sweep, generated from the admin route table: org B names org A's real
// ids on every route and gets 404 (never 403: existence is not revealed), and A's
// resources are unchanged afterwards. Adding a route to ROUTE_TABLE without a case
// here fails the first test.
import pdfParse from 'pdf-parse/lib/pdf-parse.js';
import t, { type Test } from 'tap';
import { ROUTE_TABLE } from '../../admin/app.js';
import { api, createAgent, eventually, signup, startTestService, type Session } from '../support/service.js';
import { openSse } from '../support/sse-client.js';

const service = await startTestService();
const base = service.url;
t.teardown(() => service.close());

type Reply = Awaited<ReturnType<typeof api>>;
type RouteKey = `${string} ${string}`;
const routeKey = (r: { method: string; pattern: string }): RouteKey => `${r.method} ${r.pattern}`;

// ---------------------------------------------------------------------------
// Two organizations, each with an agent (with a policy), a credential and an
// audit entry. A's values are distinctive so a leak is found by searching text.

interface Org {
  session: Session;
  agent: { id: string; api_key: string; name: string };
  credentialId: string;
  auditId: string;
  toolName: string;
  taskId: string;
  /** A held call's approval (the call stays held; shutdown answers it). */
  approvalId: string;
}

const POLICY = 'version: "1"\ndefault: allow\nrules:\n  - name: no-deletes\n    tool: "*"\n    action: DELETE\n    decision: deny\n';
const HOSTNAME = 'api.shared-host.example';

async function makeOrg(label: string): Promise<Org> {
  const session = await signup(base);
  const agent = await createAgent(base, session, `${label} Agent`);
  const policy = await api(base, session, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: POLICY });
  if (policy.status !== 200) throw new Error(`policy: ${policy.text}`);
  const credential = await api(base, session, 'POST', '/credentials', { name: `${label}-cred`, hostname: HOSTNAME, cred_type: 'bearer', value: `${label}-secret-value` });
  if (credential.status !== 201) throw new Error(`credential: ${credential.text}`);
  const toolName = `${label.toLowerCase()}-tool`;
  const taskId = `${label.toLowerCase()}-task`;
  const audit = await api(base, session, 'POST', '/audit', { agent_id: agent.id, tool_name: toolName, action: 'GET', decision: 'allowed', task_id: taskId });
  if (audit.status !== 201) throw new Error(`audit: ${audit.text}`);
  const payer = await createAgent(base, session, `${label} Payer`);
  await api(base, session, 'POST', `/agents/${payer.id}/policy`, { rules_yaml: 'version: "1"\nrules:\n  - {name: hold-all, tool: "*", action: "*", decision: approve}\n' });
  void fetch(`${base}/proxy/${payer.api_key}/127.0.0.1:1/pay`, { method: 'POST', body: label }).then((res) => res.arrayBuffer(), () => undefined);
  const approval = await eventually(async () => ((await api(base, session, 'GET', '/approvals')).json as { id: string }[])[0]);
  return { session, agent, credentialId: credential.json.id, auditId: audit.json.id, toolName, taskId, approvalId: approval.id };
}

const A = await makeOrg('Alpha');
const B = await makeOrg('Bravo');

/** Everything A can see of its own resources. */
/** The task id of the entry A writes while B listens on GET /audit/stream. */
const STREAM_PROBE_TASK = 'bola-stream-probe';

async function snapshot(org: Org) {
  const get = async (path: string, headers: Record<string, string> = {}) => {
    const res = await api(base, org.session, 'GET', path, undefined, headers);
    return { status: res.status, body: res.text };
  };
  return {
    agents: await get('/agents'),
    credentials: await get('/credentials'),
    proxyUrl: await get(`/agents/${org.agent.id}/proxy-url`),
    policy: await get(`/agents/${org.agent.id}/policy`),
    // Without the entry A itself writes for the GET /audit/stream case (A adding to its own log is no change by B).
    audit: await get('/audit?limit=1000').then((r) => ({ status: r.status, body: r.status === 200 ? JSON.stringify(JSON.parse(r.body).filter((e: { task_id: string }) => e.task_id !== STREAM_PROBE_TASK)) : r.body })),
    approvals: await get('/approvals'),
    check: (await api(base, org.session, 'POST', '/policy/check', { agent_id: org.agent.id, tool: 'x', action: 'DELETE', reasoning: '' })).text,
  };
}

/** The key still resolves: the proxy answers about the target (502 for a closed port), not 401 invalid_api_key. */
async function keyStillWorks(t: Test, org: Org): Promise<void> {
  const audited = async () => Number((await api(base, org.session, 'GET', '/audit?limit=1')).headers.get('x-total-count'));
  const count = await audited();
  const res = await fetch(`${base}/proxy/${org.agent.api_key}/127.0.0.1:1/`);
  const body = (await res.json()) as { error?: string };
  t.not(body.error, 'invalid_api_key', `${org.agent.name}'s key still works (${res.status} ${body.error})`);
  t.equal(res.status, 502, 'a GET reaches the (closed) target: not revoked, not denied by a replaced policy');
  // The proxied call is audited in the background; wait so later snapshots are stable.
  await eventually(async () => ((await audited()) > count ? true : undefined));
}

function assertNotFound(t: Test, res: Reply, what: string): void {
  t.equal(res.status, 404, `${what}: 404 (${res.text})`);
  t.equal(res.json?.error, 'not_found', `${what}: not_found`);
  t.match(res.headers.get('content-type') ?? '', /^application\/json/);
}

// ---------------------------------------------------------------------------
// The cases. Every route of ROUTE_TABLE is in exactly one of these maps.

/** Routes under /auth/: no caller, so nothing to isolate. */
const PUBLIC_ROUTES: ReadonlySet<RouteKey> = new Set(['POST /auth/signup', 'POST /auth/login']);

/** Routes whose path names a resource: which of A's ids goes in each `:param`, and a body when the route needs one. */
const PATH_ID_ROUTES: Record<RouteKey, { params: Record<string, (a: Org) => string>; body?: unknown }> = {
  'GET /agents/:id/proxy-url': { params: { id: (a) => a.agent.id } },
  'DELETE /agents/:id': { params: { id: (a) => a.agent.id } },
  'GET /agents/:id/policy': { params: { id: (a) => a.agent.id } },
  'POST /agents/:id/policy': { params: { id: (a) => a.agent.id }, body: { rules_yaml: 'version: "1"\ndefault: deny\nrules: []\n' } },
  'DELETE /credentials/:id': { params: { id: (a) => a.credentialId } },
  'GET /approvals/:id': { params: { id: (a) => a.approvalId } },
  'POST /approvals/:id/approve': { params: { id: (a) => a.approvalId }, body: { note: 'B approves' } },
  'POST /approvals/:id/deny': { params: { id: (a) => a.approvalId }, body: { note: 'B denies' } },
};

/** Routes without a path id: B either names A's ids in the body or query (404 / nothing), or must see none of A's data. */
const COLLECTION_ROUTES: Record<RouteKey, (t: Test) => Promise<void>> = {
  'GET /agents': async (t) => {
    const res = await api(base, B.session, 'GET', '/agents');
    t.equal(res.status, 200);
    t.same(res.json.map((a: { name: string }) => a.name), ['Bravo Agent', 'Bravo Payer'], 'only B\'s agents');
    t.notOk(res.text.includes(A.agent.id), "no trace of A's agent id");
  },
  'POST /agents': async (t) => {
    // An org field in the body must not place the agent in A's org.
    const res = await api(base, B.session, 'POST', '/agents', { name: 'Intruder', org_id: 'x', orgId: 'x' });
    t.equal(res.status, 201);
    const mine = (await api(base, B.session, 'GET', '/agents')).json.map((a: { id: string }) => a.id);
    t.ok(mine.includes(res.json.id), 'created in B');
    t.equal((await api(base, B.session, 'DELETE', `/agents/${res.json.id}`)).status, 204);
  },
  'GET /credentials': async (t) => {
    const res = await api(base, B.session, 'GET', '/credentials');
    t.equal(res.status, 200);
    t.same(res.json.map((c: { id: string }) => c.id), [B.credentialId], "only B's credential");
    t.notOk(res.text.includes(A.credentialId), "no trace of A's credential id");
    t.notOk(res.text.includes('Alpha'), "no trace of A's credential name");
  },
  'POST /credentials': async (t) => {
    // A's hostname is taken in A only: B already holds the same hostname (made in makeOrg),
    // and a second one in B is a conflict of B's own, not a hint about A.
    const res = await api(base, B.session, 'POST', '/credentials', { name: 'again', hostname: HOSTNAME, cred_type: 'bearer', value: 'v' });
    t.equal(res.status, 409, 'conflict within B');
    const fresh = await api(base, B.session, 'POST', '/credentials', { name: 'other', hostname: 'only-in-bravo.example', cred_type: 'bearer', value: 'v' });
    t.equal(fresh.status, 201);
    t.equal((await api(base, B.session, 'DELETE', `/credentials/${fresh.json.id}`)).status, 204);
  },
  'POST /policy/check': async (t) => {
    const body = { agent_id: A.agent.id, tool: 'x', action: 'DELETE', reasoning: '' };
    const res = await api(base, B.session, 'POST', '/policy/check', body);
    assertNotFound(t, res, "check with A's agent");
    const unknown = await api(base, B.session, 'POST', '/policy/check', { ...body, agent_id: crypto.randomUUID() });
    t.equal(res.text, unknown.text, "the same answer as for an id that does not exist");
    t.notOk(res.text.includes('no-deletes'), "no trace of A's policy");
  },
  'POST /policy/replay': async (t) => {
    const body = { agent_id: A.agent.id, rules_yaml: 'version: "1"\nrules: []\n' };
    const res = await api(base, B.session, 'POST', '/policy/replay', body);
    assertNotFound(t, res, "replay over A's agent");
    const unknown = await api(base, B.session, 'POST', '/policy/replay', { ...body, agent_id: crypto.randomUUID() });
    t.equal(res.text, unknown.text, 'the same answer as for an id that does not exist');
  },
  'POST /audit': async (t) => {
    const res = await api(base, B.session, 'POST', '/audit', { agent_id: A.agent.id, tool_name: 'forged', action: 'GET', decision: 'denied' });
    assertNotFound(t, res, "audit write for A's agent");
    const unknown = await api(base, B.session, 'POST', '/audit', { agent_id: crypto.randomUUID(), tool_name: 'forged', action: 'GET', decision: 'denied' });
    t.equal(res.text, unknown.text, 'the same answer as for an id that does not exist');
  },
  'GET /audit': async (t) => {
    for (const query of ['', '?limit=1000', `?agent_id=${A.agent.id}`, `?tool_name=${A.toolName}`, `?task_id=${A.taskId}`, '?since=2000-01-01']) {
      const res = await api(base, B.session, 'GET', `/audit${query}`);
      t.equal(res.status, 200, `GET /audit${query}`);
      t.notOk(res.text.includes(A.auditId), `${query || '(no filter)'}: no entry of A`);
      t.notOk(res.text.includes(A.agent.id), `${query || '(no filter)'}: no mention of A's agent`);
      const expected = query === '' || query === '?limit=1000' || query === '?since=2000-01-01' ? [B.auditId] : [];
      t.same(res.json.map((e: { id: string }) => e.id), expected, `${query || '(no filter)'}: only B's own entries`);
      t.equal(res.headers.get('x-total-count'), String(expected.length), `${query || '(no filter)'}: the total counts only B's`);
    }
  },
  'GET /approvals': async (t) => {
    for (const query of ['', `?agent_id=${A.agent.id}`, '?status=pending']) {
      const res = await api(base, B.session, 'GET', `/approvals${query}`);
      t.equal(res.status, 200, `GET /approvals${query}`);
      t.notOk(res.text.includes(A.approvalId), `${query || '(no filter)'}: no approval of A`);
      t.same(res.json.map((a: { id: string }) => a.id), query.includes(A.agent.id) ? [] : [B.approvalId], `${query || '(no filter)'}: only B's own`);
    }
  },
  'GET /audit/stream': async (t) => {
    // B listens with no filter and with A's agent named; an entry A writes meanwhile reaches neither.
    const streams = await Promise.all(['', `?agent_id=${A.agent.id}`].map((q) => openSse(`${base}/audit/stream${q}`, B.session.auth)));
    const own = await openSse(`${base}/audit/stream`, A.session.auth);
    t.teardown(() => [...streams, own].forEach((s) => s.close()));
    t.same(streams.map((s) => s.status), [200, 200], 'B may listen to its own org');
    const write = await api(base, A.session, 'POST', '/audit', { agent_id: A.agent.id, tool_name: A.toolName, action: 'GET', decision: 'allowed', task_id: STREAM_PROBE_TASK });
    t.ok(await own.nextEvent((e) => e.id === write.json.id, 3000), 'A\'s own stream gets the entry (so the sweep waited long enough)');
    await new Promise((r) => setTimeout(r, 1200)); // a poll more
    for (const s of streams) t.same(s.events, [], 'B\'s stream got none of A\'s entries');
  },
  'GET /audit/summary': async (t) => {
    const res = await api(base, B.session, 'GET', '/audit/summary?since=2000-01-01');
    t.equal(res.status, 200);
    t.notOk(res.text.includes(A.agent.id), "no mention of A's agent");
    t.match(res.json, { calls: 1, agents_total: 1, agents: [{ agent_id: B.agent.id, calls: 1 }] }, "only B's one call is counted");
  },
  'GET /audit/export/pdf': async (t) => {
    const res = await fetch(`${base}/audit/export/pdf?days=365`, { headers: B.session.auth });
    t.equal(res.status, 200);
    const text = (await pdfParse(Buffer.from(await res.arrayBuffer()))).text;
    t.match(text, 'Bravo Agent', "B's report has B's agent");
    t.notMatch(text, 'Alpha Agent', "and not A's");
    t.notMatch(text, A.toolName, "nor A's tools");
    const sealsA = (await api(base, A.session, 'GET', '/audit/seals?since=2000-01-01')).json as { id: string; root: string }[];
    t.ok(sealsA.length > 0, 'A has seals');
    for (const s of sealsA) t.notOk(text.includes(s.root), "nor A's seals");
  },
  'GET /audit/public-key': async (t) => {
    const res = await api(base, B.session, 'GET', '/audit/public-key');
    t.equal(res.status, 200, 'the one public key of the service, the same for every org');
    t.equal(res.text, (await api(base, A.session, 'GET', '/audit/public-key')).text);
  },
  'GET /audit/seals': async (t) => {
    const sealsA = (await api(base, A.session, 'GET', '/audit/seals?since=2000-01-01')).json as { id: string; batch_id: string }[];
    const res = await api(base, B.session, 'GET', '/audit/seals?since=2000-01-01');
    t.equal(res.status, 200);
    for (const s of sealsA) t.notOk(res.text.includes(s.id) || res.text.includes(s.batch_id), "no seal of A's");
    t.ok((res.json as unknown[]).length > 0, 'B sees its own');
  },
  'GET /audit/verify': async (t) => {
    const res = await api(base, B.session, 'GET', '/audit/verify?since=2000-01-01');
    t.equal(res.status, 200);
    t.match(res.json, { ok: true, entries: 1 }, "only B's one entry is counted");
  },
};

// ---------------------------------------------------------------------------

t.test('every route of ROUTE_TABLE has an isolation case, and every case a route', async (t) => {
  const table = ROUTE_TABLE.map(routeKey);
  t.equal(new Set(table).size, table.length, 'no route listed twice');
  const withParams = ROUTE_TABLE.filter((r) => /:[A-Za-z]+/.test(r.pattern)).map(routeKey);
  t.ok(withParams.length >= 5, 'the table has the id routes (the sweep is not vacuous)');
  t.same(withParams.sort(), Object.keys(PATH_ID_ROUTES).sort(), 'every route with a path id has a PATH_ID_ROUTES case');
  for (const route of ROUTE_TABLE) {
    const key = routeKey(route);
    const names = [...route.pattern.matchAll(/:([A-Za-z]+)/g)].map((m) => m[1]!);
    const cases = [PUBLIC_ROUTES.has(key), key in PATH_ID_ROUTES, key in COLLECTION_ROUTES].filter(Boolean).length;
    t.equal(cases, 1, `${key} has exactly one case`);
    t.equal(route.auth, !PUBLIC_ROUTES.has(key), `${key}: ${route.auth ? 'needs a token' : 'public'}`);
    if (key in PATH_ID_ROUTES) t.same(Object.keys(PATH_ID_ROUTES[key]!.params).sort(), names.sort(), `${key}: a value for every :param`);
  }
  for (const key of [...PUBLIC_ROUTES, ...Object.keys(PATH_ID_ROUTES), ...Object.keys(COLLECTION_ROUTES)]) {
    t.ok(table.includes(key as RouteKey), `${key} is still a route (no stale case)`);
  }
});

t.test('org B naming org A\'s ids in the path gets 404, the same as an unknown id', async (t) => {
  const before = await snapshot(A);
  t.equal(before.agents.status, 200);
  t.equal(before.policy.status, 200);
  t.match(before.policy.body, 'no-deletes', "A's policy is set (so a replaced one would show)");
  t.match(before.credentials.body, A.credentialId);
  t.match(before.audit.body, A.auditId);

  for (const route of ROUTE_TABLE.filter((r) => routeKey(r) in PATH_ID_ROUTES)) {
    const key = routeKey(route);
    const spec = PATH_ID_ROUTES[key]!;
    const pathFor = (value: (name: string) => string) => route.pattern.replace(/:([A-Za-z]+)/g, (_m, name: string) => value(name));
    const realPath = pathFor((name) => spec.params[name]!(A));
    const upperPath = pathFor((name) => spec.params[name]!(A).toUpperCase());
    const unknownPath = pathFor(() => crypto.randomUUID());
    await t.test(key, async (t) => {
      const real = await api(base, B.session, route.method, realPath, spec.body);
      assertNotFound(t, real, `${route.method} ${realPath}`);
      const upper = await api(base, B.session, route.method, upperPath, spec.body);
      assertNotFound(t, upper, 'the upper-cased id');
      const unknown = await api(base, B.session, route.method, unknownPath, spec.body);
      assertNotFound(t, unknown, 'an unknown id');
      t.equal(real.text, unknown.text, 'byte-identical to the answer for an id that does not exist');
      t.same(await snapshot(A), before, "A's resources are unchanged");
      // The same call from A itself succeeds, so the 404 above is about the org and
      // not a broken request; read-only routes only (A's data must stay).
      if (route.method === 'GET') t.equal((await api(base, A.session, route.method, realPath)).status, 200, 'A itself may');
    });
  }
  t.same(await snapshot(A), before, "after the whole sweep A's resources are unchanged");
  await keyStillWorks(t, A);
});

t.test('collection and body-id routes show org B nothing of org A', async (t) => {
  const before = await snapshot(A);
  for (const route of ROUTE_TABLE.filter((r) => routeKey(r) in COLLECTION_ROUTES)) {
    await t.test(routeKey(route), (t) => COLLECTION_ROUTES[routeKey(route)]!(t));
  }
  t.same(await snapshot(A), before, "A's resources are unchanged");
  await keyStillWorks(t, A);
});

t.test('org A can still delete its own resources (the sweep ran against real ids)', async (t) => {
  t.equal((await api(base, A.session, 'DELETE', `/credentials/${A.credentialId}`)).status, 204);
  t.equal((await api(base, A.session, 'DELETE', `/agents/${A.agent.id}`)).status, 204);
  const res = await fetch(`${base}/proxy/${A.agent.api_key}/127.0.0.1:1/`);
  t.equal(res.status, 401, 'and then the key is revoked');
  t.equal(((await api(base, B.session, 'GET', '/credentials')).json as unknown[]).length, 1, "B's credential on the same hostname stays");
});
