// The BOLA sweep's second half. test/integration/admin-isolation.test.ts names org
// A's ids on every route of ROUTE_TABLE (path ids, the agent_id of
// /policy/check and POST /audit, the agent_id / tool_name / task_id filters of
// GET /audit, the PDF). This file adds the other spellings an id can take (upper
// case, percent-encoded, a trailing slash, HEAD, the YAML form of a policy), the
// id inputs by name for every route (so a new route with an id input fails the
// first test until it is swept), and the proxy's own lookups across orgs:
// another org's credential is never injected, and proxied audit rows stay in
// their org.
import pdfParse from 'pdf-parse/lib/pdf-parse.js';
import t from 'tap';
import { ROUTE_TABLE } from '../../admin/app.js';
import { auditRows } from '../support/checks.js';
import { api, createAgent, eventually, signup, startTestService, type Session } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';

const upstream = await startUpstream();
const service = await startTestService();
const base = service.url;
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

type RouteKey = `${string} ${string}`;

/**
 * Where each route takes an id (a path `:param`, a body field, a query
 * parameter), or none. A route added to ROUTE_TABLE must be listed here.
 */
const ID_INPUTS: Record<RouteKey, { path?: string[]; body?: string[]; query?: string[] }> = {
  'POST /auth/signup': {},
  'POST /auth/login': {},
  'GET /agents': {},
  'POST /agents': {},
  'GET /agents/:id/proxy-url': { path: ['id'] },
  'DELETE /agents/:id': { path: ['id'] },
  'GET /agents/:id/policy': { path: ['id'] },
  'POST /agents/:id/policy': { path: ['id'] },
  'GET /credentials': {},
  'POST /credentials': {},
  'DELETE /credentials/:id': { path: ['id'] },
  'POST /policy/check': { body: ['agent_id'] },
  'POST /policy/replay': { body: ['agent_id'] },
  'POST /audit': { body: ['agent_id'] },
  'GET /audit': { query: ['agent_id'] },
  'GET /audit/summary': {},
  'GET /audit/export/pdf': {},
  'GET /audit/public-key': {},
  'GET /audit/seals': {},
  'GET /audit/verify': {},
  'GET /audit/stream': { query: ['agent_id'] },
  'GET /approvals': { query: ['agent_id'] },
  'GET /approvals/:id': { path: ['id'] },
  'POST /approvals/:id/approve': { path: ['id'] },
  'POST /approvals/:id/deny': { path: ['id'] },
};

const A = await signup(base);
const B = await signup(base);
const agentA = await createAgent(base, A, 'Alpha Agent', 'full');
const agentB = await createAgent(base, B, 'Bravo Agent', 'full');
const policyA = 'version: "1"\ndefault: deny\nrules:\n  - {name: alpha-secret-rule, tool: "*", action: GET, decision: allow}\n';
await api(base, A, 'POST', `/agents/${agentA.id}/policy`, { rules_yaml: policyA });
const credA = await api(base, A, 'POST', '/credentials', { name: 'alpha', hostname: upstream.authority, cred_type: 'bearer', value: 'alpha-secret-token' });
if (credA.status !== 201) throw new Error(credA.text);
// A held call of A's (left held: shutdown answers it), for the approval routes.
const heldAgentA = await createAgent(base, A, 'Alpha Payer');
await api(base, A, 'POST', `/agents/${heldAgentA.id}/policy`, { rules_yaml: 'version: "1"\nrules:\n  - {name: hold-all, tool: "*", action: "*", decision: approve}\n' });
void fetch(`${base}/proxy/${heldAgentA.api_key}/${upstream.authority}/echo`).then((res) => res.arrayBuffer(), () => undefined);
const approvalA = await eventually(async () => ((await api(base, A, 'GET', '/approvals')).json as { id: string }[])[0]);

/** Every spelling of A's agent id a caller could send. */
const spellings = (id: string) => ({
  upper: id.toUpperCase(),
  encoded: [...id].map((c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`).join(''),
  mixed: id.replace(/[a-f]/g, (c, i: number) => (i % 2 === 0 ? c.toUpperCase() : c)),
});

t.test('every route of ROUTE_TABLE is classified by its id inputs, and each path param is known', async (t) => {
  const keys = ROUTE_TABLE.map((r) => `${r.method} ${r.pattern}` as RouteKey);
  t.same([...keys].sort(), Object.keys(ID_INPUTS).sort(), 'ID_INPUTS lists exactly the routes of ROUTE_TABLE');
  for (const route of ROUTE_TABLE) {
    const params = [...route.pattern.matchAll(/:([A-Za-z]+)/g)].map((m) => m[1]!);
    t.same(params, ID_INPUTS[`${route.method} ${route.pattern}`]?.path ?? [], `${route.method} ${route.pattern}: path params`);
  }
});

t.test('path ids in other spellings (upper case, percent-encoded, trailing slash, HEAD, YAML): 404, like an unknown id', async (t) => {
  const unknown = crypto.randomUUID();
  const forms = spellings(agentA.id);
  for (const route of ROUTE_TABLE.filter((r) => r.pattern.includes(':id'))) {
    const id = route.pattern.startsWith('/credentials') ? credA.json.id as string : route.pattern.startsWith('/approvals') ? approvalA.id : agentA.id;
    const body = route.method === 'POST' ? { rules_yaml: 'version: "1"\ndefault: allow\nrules: []\n' } : undefined;
    const reference = await api(base, B, route.method, route.pattern.replace(':id', unknown), body);
    t.equal(reference.status, 404, `${route.method} ${route.pattern} with an unknown id`);
    const variants = { ...spellings(id), plain: id };
    for (const [how, value] of Object.entries(variants)) {
      for (const slash of ['', '/']) {
        const path = route.pattern.replace(':id', value) + slash;
        const res = await api(base, B, route.method, path, body);
        t.equal(res.status, 404, `${route.method} ${path.replace(id, '<A>')} (${how}${slash ? ', trailing slash' : ''})`);
        t.equal(res.text, reference.text, `${how}: the same body as for an unknown id`);
      }
    }
  }
  for (const path of [`/agents/${forms.upper}/policy`, `/agents/${agentA.id}/proxy-url`]) {
    const head = await fetch(`${base}${path}`, { method: 'HEAD', headers: B.auth });
    t.equal(head.status, 404, `HEAD ${path.replace(agentA.id, '<A>').replace(forms.upper, '<A upper>')}`);
  }
  const yaml = await api(base, B, 'GET', `/agents/${agentA.id}/policy`, undefined, { accept: 'application/yaml' });
  t.equal(yaml.status, 404, 'the YAML form of A\'s policy: 404');
  t.notOk(yaml.text.includes('alpha-secret-rule'), 'with none of its text');
  t.match(yaml.headers.get('content-type') ?? '', /^application\/json/);
  // A itself reaches its agent under every spelling (so the 404s above are about the org).
  for (const path of [`/agents/${forms.upper}/policy`, `/agents/${forms.encoded}/policy`, `/agents/${forms.mixed}/policy`, `/agents/${agentA.id}/policy/`]) {
    t.equal((await api(base, A, 'GET', path)).status, 200, `A: ${path}`);
  }
});

t.test('body and query ids in other spellings: 404 (body) or nothing (filter), like an unknown id', async (t) => {
  const forms = spellings(agentA.id);
  for (const [how, value] of Object.entries({ upper: forms.upper, mixed: forms.mixed, plain: agentA.id })) {
    const check = await api(base, B, 'POST', '/policy/check', { agent_id: value, tool: 'x', action: 'GET', reasoning: '' });
    t.equal(check.status, 404, `/policy/check agent_id ${how}`);
    t.notOk(check.text.includes('alpha-secret-rule'), 'no trace of A\'s rule');
    const replay = await api(base, B, 'POST', '/policy/replay', { agent_id: value, rules_yaml: 'version: "1"\nrules: []\n' });
    t.equal(replay.status, 404, `/policy/replay agent_id ${how}`);
    const write = await api(base, B, 'POST', '/audit', { agent_id: value, tool_name: 'forged', action: 'GET', decision: 'allowed' });
    t.equal(write.status, 404, `POST /audit agent_id ${how}`);
    const list = await api(base, B, 'GET', `/audit?agent_id=${value}`);
    t.equal(list.status, 200, `GET /audit?agent_id ${how}`);
    t.same(list.json, [], 'nothing');
    t.equal(list.headers.get('x-total-count'), '0');
    const approvals = await api(base, B, 'GET', `/approvals?agent_id=${value}`);
    t.equal(approvals.status, 200, `GET /approvals?agent_id ${how}`);
    t.same(approvals.json, [], 'nothing');
  }
  // Repeated parameters: the first one is used; a second with A's id changes nothing.
  const repeated = await api(base, B, 'GET', `/audit?agent_id=${agentB.id}&agent_id=${agentA.id}`);
  t.equal(repeated.status, 200);
  t.notOk(repeated.text.includes(agentA.id), 'no row of A');
  // A's own calls with the same spellings succeed.
  t.equal((await api(base, A, 'POST', '/policy/check', { agent_id: forms.upper, tool: 'x', action: 'GET', reasoning: '' })).status, 200, 'A may, upper-cased');
  const forged = (await api(base, A, 'GET', '/audit?tool_name=forged')).json as unknown[];
  t.same(forged, [], 'no forged entry landed in A');
  t.equal((await api(base, A, 'GET', `/approvals/${approvalA.id}`)).json.status, 'pending', "A's approval is as it was");
});

t.test('the proxy never injects another org\'s credential, and each org\'s proxied rows stay its own', async (t) => {
  const seen = () => upstream.seen.at(-1)!;
  let res = await fetch(`${base}/proxy/${agentB.api_key}/${upstream.authority}/echo`);
  t.equal(res.status, 200);
  await res.arrayBuffer();
  t.equal(seen().headers.authorization, undefined, 'B\'s call to A\'s credentialed host carries no credential');
  res = await fetch(`${base}/proxy/${agentA.api_key}/${upstream.authority}/echo`);
  await res.arrayBuffer();
  t.equal(seen().headers.authorization, 'Bearer alpha-secret-token', 'A\'s call carries A\'s');
  const credB = await api(base, B, 'POST', '/credentials', { name: 'bravo', hostname: upstream.authority, cred_type: 'bearer', value: 'bravo-token' });
  t.equal(credB.status, 201, 'B may hold a credential for the same host');
  res = await fetch(`${base}/proxy/${agentB.api_key}/${upstream.authority}/echo`);
  await res.arrayBuffer();
  t.equal(seen().headers.authorization, 'Bearer bravo-token', 'B\'s call carries B\'s own');
  t.equal((await api(base, B, 'DELETE', `/credentials/${credA.json.id}`)).status, 404, 'B cannot delete A\'s');
  res = await fetch(`${base}/proxy/${agentA.api_key}/${upstream.authority}/echo`);
  await res.arrayBuffer();
  t.equal(seen().headers.authorization, 'Bearer alpha-secret-token', 'A\'s is still injected');
  // A's policy (default deny, GET allowed) does not apply to B's agent.
  res = await fetch(`${base}/proxy/${agentB.api_key}/${upstream.authority}/echo`, { method: 'POST', body: 'x' });
  t.equal(res.status, 200, 'B\'s POST is not judged by A\'s policy');
  await res.arrayBuffer();
  res = await fetch(`${base}/proxy/${agentA.api_key}/${upstream.authority}/echo`, { method: 'POST', body: 'x' });
  t.equal(res.status, 403, 'A\'s POST is');
  await res.arrayBuffer();

  const rowsA = await auditRows(base, A, agentA.id, 3);
  const rowsB = await auditRows(base, B, agentB.id, 3);
  t.ok(rowsA.every((r) => r.agent_id === agentA.id), 'A sees its rows');
  const allB = await api(base, B, 'GET', '/audit?limit=1000');
  t.notOk(allB.text.includes(agentA.id) || allB.text.includes('alpha-secret'), 'B\'s audit has nothing of A (and the echoed credential is redacted)');
  const allA = await api(base, A, 'GET', '/audit?limit=1000');
  t.notOk(allA.text.includes(agentB.id) || allA.text.includes('bravo-token'), 'A\'s audit has nothing of B');
  t.ok(rowsB.length >= 3);
  const pdf = await fetch(`${base}/audit/export/pdf?days=1`, { headers: B.auth });
  const text = (await pdfParse(Buffer.from(await pdf.arrayBuffer()))).text;
  t.match(text, 'Bravo Agent');
  t.notMatch(text, 'Alpha Agent', 'B\'s PDF has no row of A\'s proxied calls');
});

t.test('a deleted agent\'s id stays unknown to every org, its rows stay with its org', async (t) => {
  const doomed = await createAgent(base, A, 'Doomed Agent');
  await (await fetch(`${base}/proxy/${doomed.api_key}/${upstream.authority}/echo`)).arrayBuffer();
  await auditRows(base, A, doomed.id, 1);
  t.equal((await api(base, A, 'DELETE', `/agents/${doomed.id}`)).status, 204);
  for (const session of [A, B] as Session[]) {
    t.equal((await api(base, session, 'GET', `/agents/${doomed.id}/policy`)).status, 404);
    t.equal((await api(base, session, 'POST', '/policy/check', { agent_id: doomed.id, tool: 'x', action: 'GET', reasoning: '' })).status, 404);
  }
  t.equal(((await api(base, A, 'GET', `/audit?agent_id=${doomed.id}`)).json as unknown[]).length, 1, 'A keeps the deleted agent\'s row');
  t.same((await api(base, B, 'GET', `/audit?agent_id=${doomed.id}`)).json, [], 'B sees none of it');
});
