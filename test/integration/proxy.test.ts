// The streaming proxy (CONTRACT.md "Proxy"), against real HTTPS upstreams on loopback.
import { createHash } from 'node:crypto';
import { get as httpGet } from 'node:http';
import { connect as netConnect } from 'node:net';
import { readFileSync } from 'node:fs';
import { createServer as createTlsServer } from 'node:tls';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { api, createAgent, eventually, signup, startTestService, TLS_DIR, type Session } from '../support/service.js';
import { rawRequest } from '../support/raw-http.js';
import { headThenNext, rawExchange } from '../support/raw-socket.js';
import { patternBytes, startUpstream } from '../support/upstream.js';

/** A tool's answer that would act as the guard's origin in a browser: HTML with a script, a service worker allowed the whole origin. */
const HOSTILE_PAGE = '<script>navigator.serviceWorker.register("sw.js", { scope: "/" })</script>';
/** Another tool, which a relative redirect of the first must not reach through the guard. */
const other = await startUpstream();
const upstream = await startUpstream({
  // Relative references that climb out of the tool's prefix when a client resolves them against the guard's URL.
  '/a/climb': (_req, res) => {
    res.writeHead(307, {
      location: `../../${other.authority}/echo/x?q=1`,
      'content-location': `/${other.authority}/echo/cl`,
      link: `<../${other.authority}/echo/p2>; rel="next", <https://docs.example/page>; rel="help"`,
      refresh: `0; url='/..\\${other.authority}/echo/r'`,
    });
    res.end();
  },
  '/page.html': (_req, res) => {
    res.setHeader('content-type', 'text/html');
    res.setHeader('service-worker-allowed', '/');
    res.end(HOSTILE_PAGE);
  },
  // How an event-stream server tells EventSource to stop reconnecting.
  '/events-done': (_req, res) => {
    res.writeHead(204, { 'content-type': 'text/event-stream' });
    res.end();
  },
});
const service = await startTestService({ UPSTREAM_HEADERS_TIMEOUT_MS: '1500', UPSTREAM_BODY_TIMEOUT_MS: '1500', OUTPUT_CAPTURE_BYTES: '1000' });
const base = service.url;
t.teardown(async () => {
  await service.close();
  await upstream.close();
  await other.close();
});

const owner = await signup(base);

function proxied(key: string, target: string, init: RequestInit = {}) {
  return fetch(`${base}/proxy/${key}/${target}`, init);
}

async function auditFor(session: Session, agentId: string, count = 1): Promise<any[]> {
  return eventually(async () => {
    const res = await api(base, session, 'GET', `/audit?agent_id=${agentId}&limit=1000`);
    return (res.json as any[]).length >= count ? (res.json as any[]) : undefined;
  });
}

async function setPolicy(agentId: string, yaml: string) {
  const res = await api(base, owner, 'POST', `/agents/${agentId}/policy`, { rules_yaml: yaml });
  if (res.status !== 200) throw new Error(`policy: ${res.status} ${res.text}`);
}

t.test('routing: /proxy/{key}/{host:port}/{path}?{query} → https://{host:port}/{path}?{query}', async (t) => {
  const agent = await createAgent(base, owner, 'router');
  const res = await proxied(agent.api_key, `${upstream.authority}/echo/a/b?x=1&y=two%20words&x=3`);
  t.equal(res.status, 200);
  const body = (await res.json()) as any;
  t.equal(body.method, 'GET');
  t.equal(body.url, '/echo/a/b?x=1&y=two%20words&x=3', 'path and query forwarded as given');
  t.equal(body.headers.host, upstream.authority, 'Host is the target');
});

t.test("an upstream's relative Location, Content-Location, Link and Refresh stay under its tool's prefix: a client following them never reaches another tool through the guard", async (t) => {
  const agent = await createAgent(base, owner, 'redirected');
  const prefix = `/proxy/${agent.api_key}/${upstream.authority}`;
  const manual = await proxied(agent.api_key, `${upstream.authority}/a/climb`, { redirect: 'manual' });
  t.equal(manual.status, 307);
  t.equal(manual.headers.get('location'), `${prefix}/${other.authority}/echo/x?q=1`, 'resolved as the upstream means it (/X/echo/x on the same tool), under its prefix');
  t.equal(manual.headers.get('content-location'), `${prefix}/${other.authority}/echo/cl`);
  t.equal(manual.headers.get('link'), `<${prefix}/${other.authority}/echo/p2>; rel="next", <https://docs.example/page>; rel="help"`, 'absolute links left as they are');
  t.equal(manual.headers.get('refresh'), `0; url='${prefix}/${other.authority}/echo/r'`);
  const before = other.seen.length;
  const followed = await proxied(agent.api_key, `${upstream.authority}/a/climb`);
  await followed.arrayBuffer();
  t.equal(other.seen.length, before, 'the other tool got no request');
  t.equal(upstream.seen.at(-1)?.url, `/${other.authority}/echo/x?q=1`, 'the redirect went to the same tool, as the upstream meant');
});

t.test('a method-override header is refused: the policy decides on the method sent, an upstream that honours one would run another', async (t) => {
  const agent = await createAgent(base, owner, 'override');
  await setPolicy(agent.id, 'version: "1"\ndefault: allow\nrules:\n  - name: no-deletes\n    tool: "*"\n    action: DELETE\n    decision: deny\n');
  const before = upstream.seen.length;
  for (const name of ['X-HTTP-Method-Override', 'X-HTTP-Method', 'X-Method-Override']) {
    const res = await proxied(agent.api_key, `${upstream.authority}/echo/repo`, { method: 'POST', body: '{}', headers: { [name]: 'DELETE' } });
    t.equal(res.status, 400, name);
    t.match(await res.json(), { error: 'invalid_request', message: new RegExp(`does not forward ${name.toLowerCase()}`) });
  }
  t.equal(upstream.seen.length, before, 'none reached the tool');
  const plain = await proxied(agent.api_key, `${upstream.authority}/echo/repo`, { method: 'POST', body: '{}' });
  t.equal(plain.status, 200, 'the POST itself is allowed');
  const rows = await auditFor(owner, agent.id, 4);
  t.equal(rows.filter((r) => r.status_code === 400 && r.decision === 'denied').length, 3, 'each refusal audited as denied');
});

t.test('the seven methods are forwarded; others are 405', async (t) => {
  const agent = await createAgent(base, owner, 'methods');
  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
    const res = await proxied(agent.api_key, `${upstream.authority}/echo`, { method, ...(method === 'GET' ? {} : { body: 'x' }) });
    t.equal(res.status, 200, method);
    t.equal(((await res.json()) as any).method, method);
  }
  const head = await proxied(agent.api_key, `${upstream.authority}/bytes?n=5000`, { method: 'HEAD' });
  t.equal(head.status, 200, 'HEAD');
  t.equal(head.headers.get('content-length'), '5000', 'HEAD reports the length the GET would have');
  t.equal((await head.arrayBuffer()).byteLength, 0, 'HEAD has no body');
  const before = upstream.seen.length;
  for (const method of ['TRACE', 'CONNECT']) {
    const res = await rawRequest(service.port, `${method} /proxy/${agent.api_key}/${upstream.authority}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`, 500);
    t.equal(res.status, 405, method);
    t.match(res.text, /"error":"method_not_allowed"/);
  }
  // uWS's parser closes the connection on a method it does not know at all.
  const odd = await rawRequest(service.port, `PROPFIND /proxy/${agent.api_key}/${upstream.authority}/echo HTTP/1.1\r\nHost: x\r\n\r\n`, 500);
  t.ok(odd.status === 405 || (odd.status === 0 && odd.closed), `PROPFIND refused (${odd.status || 'closed'})`);
  t.equal(upstream.seen.length, before, 'a refused method never reaches upstream');
});

t.test('400 invalid_target for a missing or malformed host', async (t) => {
  const agent = await createAgent(base, owner, 'targets');
  for (const target of ['', 'user@127.0.0.1/x', '127.0.0.1:99999/x', '127.0.0.1:0/x', 'bad_host!/x', '%31%32%37.0.0.1/x']) {
    const res = await proxied(agent.api_key, target);
    t.equal(res.status, 400, `'${target}'`);
    t.equal(((await res.json()) as any).error, 'invalid_target');
  }
});

t.test('401 invalid_api_key for a malformed, unknown or revoked key; revocation is immediate', async (t) => {
  for (const key of ['nope', 'agk_short', `agk_${'A'.repeat(40)}`]) {
    const res = await proxied(key, `${upstream.authority}/echo`);
    t.equal(res.status, 401, key);
    t.equal(((await res.json()) as any).error, 'invalid_api_key');
  }
  const agent = await createAgent(base, owner, 'revoked');
  t.equal((await proxied(agent.api_key, `${upstream.authority}/echo`)).status, 200, 'works while it exists (and is cached)');
  t.equal((await api(base, owner, 'DELETE', `/agents/${agent.id}`)).status, 204);
  const res = await proxied(agent.api_key, `${upstream.authority}/echo`);
  t.equal(res.status, 401, 'refused on the very next call');
});

t.test('a denying policy answers 403 policy_denied with rule_matched, never reaches upstream, and is audited', async (t) => {
  const agent = await createAgent(base, owner, 'denied');
  await setPolicy(agent.id, `version: "1"
rules:
  - name: no-deletes
    tool: "*"
    action: DELETE
    decision: deny
    message: Deleting is not allowed.
  - name: no-admin
    tool: "127.0.0.1"
    action: "*"
    path: /admin/**
    decision: deny
`);
  const before = upstream.seen.length;
  const res = await proxied(agent.api_key, `${upstream.authority}/things/1`, { method: 'DELETE', headers: { 'x-agent-reasoning': 'cleanup' } });
  t.equal(res.status, 403);
  const body = (await res.json()) as any;
  t.equal(body.error, 'policy_denied');
  t.equal(body.rule_matched, 'no-deletes');
  t.equal(body.message, 'Deleting is not allowed.');
  const admin = await proxied(agent.api_key, `${upstream.authority}/admin/users`);
  t.equal(admin.status, 403);
  t.equal(((await admin.json()) as any).rule_matched, 'no-admin');
  t.equal(upstream.seen.length, before, 'upstream saw nothing');
  const ok = await proxied(agent.api_key, `${upstream.authority}/things/1`);
  t.equal(ok.status, 200, 'other calls pass');
  const rows = await auditFor(owner, agent.id, 3);
  const denied = rows.filter((r) => r.decision === 'denied');
  t.equal(denied.length, 2);
  t.ok(denied.some((r) => r.rule_matched === 'no-deletes' && r.status_code === 403 && r.reasoning === 'cleanup'));
  // Replacing the policy takes effect at once.
  await setPolicy(agent.id, 'version: "1"\nrules: []\n');
  t.equal((await proxied(agent.api_key, `${upstream.authority}/things/1`, { method: 'DELETE' })).status, 200, 'replaced policy applies to the next call');
});

t.test('policy paths are matched on the normalised path: encoded or dot-segment tricks do not slip past', async (t) => {
  const agent = await createAgent(base, owner, 'tricks');
  await setPolicy(agent.id, 'version: "1"\nrules:\n  - {name: no-admin, tool: "*", action: "*", path: /admin/**, decision: deny}\n');
  const before = upstream.seen.length;
  for (const path of ['%61dmin/x', 'admin%2Fy', '%61%64%6D%69%6E', '/admin/x', 'admin//x']) {
    const res = await proxied(agent.api_key, `${upstream.authority}/${path}`);
    t.equal(res.status, 403, `${path} is seen as /admin/...`);
  }
  // fetch would normalise dot segments away, so these go over a raw socket.
  // '#' and backslashes too: a WHATWG-URL server routes admin#x and x\..\admin to /admin.
  for (const path of ['x/../admin/y', './admin', 'x/%2e%2E/admin', 'x/..', 'admin#x', 'x\\..\\admin', 'admin\\x', 'x%5C..%5Cadmin']) {
    const res = await rawRequest(service.port, `GET /proxy/${agent.api_key}/${upstream.authority}/${path} HTTP/1.1\r\nHost: x\r\n\r\n`, 500);
    t.equal(res.status, 400, `${path} refused`);
    t.match(res.text, /invalid_target/);
  }
  t.equal(upstream.seen.length, before, 'none reached upstream');
  t.equal((await proxied(agent.api_key, `${upstream.authority}/x/%2Fok`)).status, 200, 'other escapes pass');
});

t.test('SSRF guard: loopback outside the allow-list is refused with 403 and audited', async (t) => {
  const agent = await createAgent(base, owner, 'ssrf');
  const before = upstream.seen.length;
  for (const host of ['127.0.0.2', '[::1]', '0.0.0.0', '0x7f.0.0.2', '[::ffff:127.0.0.2]', '2130706434']) {
    const res = await proxied(agent.api_key, `${host}:${upstream.port}/echo`);
    t.equal(res.status, 403, host);
    t.equal(((await res.json()) as any).error, 'target_forbidden', host);
  }
  t.equal(upstream.seen.length, before, 'nothing was reached');
  const rows = await auditFor(owner, agent.id, 6);
  t.ok(rows.every((r) => r.decision === 'denied' && r.status_code === 403 && r.rule_matched === 'target_forbidden'));
});

t.test('an IPv4-mapped IPv6 target is its IPv4 address: a rule for the address decides it, and the call reaches that address', async (t) => {
  const agent = await createAgent(base, owner, 'mapped');
  await setPolicy(agent.id, 'version: "1"\ndefault: allow\nrules:\n  - {name: no-echo-here, tool: "127.0.0.1", action: "*", path: /echo, decision: deny}\n');
  const before = upstream.seen.length;
  const denied = await proxied(agent.api_key, `[::ffff:127.0.0.1]:${upstream.port}/echo`);
  t.match({ status: denied.status, json: await denied.json() }, { status: 403, json: { error: 'policy_denied', rule_matched: 'no-echo-here' } });
  t.equal(upstream.seen.length, before, 'not forwarded');
  const allowed = await proxied(agent.api_key, `[::FFFF:7F00:1]:${upstream.port}/json`);
  t.equal(allowed.status, 200, 'another path passes, to 127.0.0.1 (whose certificate names it)');
  await allowed.arrayBuffer();
  const rows = await auditFor(owner, agent.id, 2);
  t.strictSame(rows.map((r) => r.tool_name), ['127.0.0.1', '127.0.0.1'], 'audited under the IPv4 address');
});

t.test('credentials are injected: bearer, header and query; the query value never reaches the audit', async (t) => {
  const other = await signup(base);
  const agent = await createAgent(base, other, 'creds', 'none');
  const cred = await api(base, other, 'POST', '/credentials', { name: 'tok', hostname: upstream.authority, cred_type: 'bearer', value: 'canary-bearer-1' });
  t.equal(cred.status, 201);
  let res = await proxied(agent.api_key, `${upstream.authority}/echo`, { headers: { authorization: 'Bearer client-sent' } });
  let seen = ((await res.json()) as any).headers;
  t.equal(seen.authorization, 'Bearer canary-bearer-1', 'bearer replaces the caller\'s Authorization');
  t.equal((await api(base, other, 'DELETE', `/credentials/${cred.json.id}`)).status, 204);

  const header = await api(base, other, 'POST', '/credentials', { name: 'X-Api-Key', hostname: upstream.authority, cred_type: 'header', value: 'canary-header-2' });
  t.equal(header.status, 201);
  res = await proxied(agent.api_key, `${upstream.authority}/echo`, { headers: { 'x-api-key': 'client-override' } });
  const echoed = (await res.json()) as any;
  t.equal(echoed.headers['x-api-key'], 'canary-header-2', 'a client header of that name cannot override it');
  const last = upstream.seen[upstream.seen.length - 1]!;
  t.equal(last.rawHeaders.filter((h, i) => i % 2 === 0 && h.toLowerCase() === 'x-api-key').length, 1, 'nor duplicate it');
  t.equal((await api(base, other, 'DELETE', `/credentials/${header.json.id}`)).status, 204);

  const query = await api(base, other, 'POST', '/credentials', { name: 'api_key', hostname: upstream.authority, cred_type: 'query', value: 'canary query&3' });
  t.equal(query.status, 201);
  res = await proxied(agent.api_key, `${upstream.authority}/echo?a=1`);
  t.equal(((await res.json()) as any).url, '/echo?a=1&api_key=canary%20query%263', 'query credential appended upstream');
  const rows = await auditFor(other, agent.id, 3);
  for (const row of rows) t.notOk(JSON.stringify(row).includes('canary'), 'no credential value in the audit');
  t.ok(rows.some((r) => r.tool_url === `https://${upstream.authority}/echo?a=1`), 'tool_url is what the agent sent');
  t.notOk(service.logs.join('').includes('canary'), 'no credential value in the logs');
});

t.test('a credential without a port is injected on every port of its host; one with the port wins', async (t) => {
  const org = await signup(base);
  const agent = await createAgent(base, org, 'ports', 'none');
  const injected = async () => ((await (await proxied(agent.api_key, `${upstream.authority}/echo`)).json()) as any).headers.authorization;
  t.equal(await injected(), undefined, 'no credential yet (and "none" is now cached for this host and port)');
  const only443 = await api(base, org, 'POST', '/credentials', { name: '443', hostname: '127.0.0.1:443', cred_type: 'bearer', value: 'canary-443-only' });
  t.equal(only443.json.hostname, '127.0.0.1:443', 'the port written is kept');
  t.equal(await injected(), undefined, `127.0.0.1:443 is for port 443 only, not ${upstream.authority}`);
  const anyPort = await api(base, org, 'POST', '/credentials', { name: 'any', hostname: '127.0.0.1', cred_type: 'bearer', value: 'canary-any-port' });
  t.equal(anyPort.status, 201);
  t.equal(await injected(), 'Bearer canary-any-port', `127.0.0.1 covers ${upstream.authority}, from the next call`);
  const exact = await api(base, org, 'POST', '/credentials', { name: 'exact', hostname: upstream.authority, cred_type: 'bearer', value: 'canary-this-port' });
  t.equal(exact.status, 201);
  t.equal(await injected(), 'Bearer canary-this-port', 'the one with the port wins');
  t.equal((await api(base, org, 'DELETE', `/credentials/${exact.json.id}`)).status, 204);
  t.equal(await injected(), 'Bearer canary-any-port', 'without it, the portless one again');
  t.equal((await api(base, org, 'DELETE', `/credentials/${anyPort.json.id}`)).status, 204);
  t.equal(await injected(), undefined, 'and none once that is deleted too');
});

t.test('header_name comes back as written and is injected under any case', async (t) => {
  const org = await signup(base);
  const agent = await createAgent(base, org, 'header-case', 'none');
  const created = await api(base, org, 'POST', '/credentials', { name: 'k', hostname: upstream.authority, cred_type: 'header', header_name: 'X-Api-Key', value: 'canary-case' });
  t.equal(created.json.header_name, 'X-Api-Key', 'POST answers it as written');
  const listed = (await api(base, org, 'GET', '/credentials')).json as any[];
  t.equal(listed[0].header_name, 'X-Api-Key', 'GET /credentials too');
  const res = await proxied(agent.api_key, `${upstream.authority}/echo`, { headers: { 'X-API-KEY': 'client-override' } });
  t.equal(((await res.json()) as any).headers['x-api-key'], 'canary-case', 'the client\'s header of that name, in another case, is replaced');
  const last = upstream.seen[upstream.seen.length - 1]!;
  t.equal(last.rawHeaders.filter((h, i) => i % 2 === 0 && h.toLowerCase() === 'x-api-key').length, 1, 'not duplicated');
  const defaulted = await api(base, org, 'POST', '/credentials', { name: 'My-Token', hostname: 'h.example.com', cred_type: 'header', value: 'v' });
  t.equal(defaulted.json.header_name, 'My-Token', 'the default (the name) as written as well');
});

t.test('hop-by-hop and X-Agent-* headers are removed both ways', async (t) => {
  const agent = await createAgent(base, owner, 'hops');
  // fetch will not send Connection or TE, so this goes over a raw socket.
  const before = upstream.seen.length;
  const res = await rawRequest(service.port, [
    `GET /proxy/${agent.api_key}/${upstream.authority}/echo HTTP/1.1`, 'Host: x', 'X-Agent-Reasoning: why', 'X-Agent-Task-Id: t1',
    'Connection: keep-alive, x-drop-me', 'X-Drop-Me: 1', 'X-Keep: kept', 'TE: trailers', 'Keep-Alive: timeout=5', '', '',
  ].join('\r\n'), 500);
  t.equal(res.status, 200);
  t.equal(upstream.seen.length, before + 1);
  const seen = upstream.seen[upstream.seen.length - 1]!.headers;
  t.equal(seen['x-agent-reasoning'], undefined);
  t.equal(seen['x-agent-task-id'], undefined);
  t.equal(seen['x-drop-me'], undefined, 'a header named in Connection is removed');
  t.equal(seen.te, undefined);
  t.equal(seen['keep-alive'], undefined);
  t.equal(seen['x-keep'], 'kept');
  // Keep-alive alone, as most clients send it (the head reader builds no list for it).
  const alone = await rawRequest(service.port, [
    `GET /proxy/${agent.api_key}/${upstream.authority}/echo HTTP/1.1`, 'Host: x', 'Connection:  Keep-Alive ', 'Keep-Alive: timeout=5', 'X-Keep: kept', '', '',
  ].join('\r\n'), 500);
  t.equal(alone.status, 200);
  const seenAlone = upstream.seen[upstream.seen.length - 1]!.headers;
  t.equal(seenAlone['keep-alive'], undefined, 'Keep-Alive is not forwarded when Connection names only it');
  t.equal(seenAlone['x-keep'], 'kept');
  // Two Connection lines are one list: the first's field goes too, not only the last's.
  const twice = await rawRequest(service.port, [
    `GET /proxy/${agent.api_key}/${upstream.authority}/echo HTTP/1.1`, 'Host: x', 'Connection: x-first-hop', 'Connection: keep-alive', 'X-First-Hop: secret', 'X-Keep: kept', '', '',
  ].join('\r\n'), 500);
  t.equal(twice.status, 200);
  const seenTwice = upstream.seen[upstream.seen.length - 1]!.headers;
  t.equal(seenTwice['x-first-hop'], undefined, 'a field named on the first of two Connection lines is removed');
  t.equal(seenTwice['x-keep'], 'kept');
  const hop = await proxied(agent.api_key, `${upstream.authority}/hop`);
  t.equal(hop.headers.get('x-kept'), 'yes');
  t.equal(hop.headers.get('x-secret-hop'), null, 'response header named in Connection removed');
  t.equal(hop.headers.get('keep-alive'), null);
  t.equal(await hop.text(), 'hop');
});

t.test('a header\'s UTF-8 bytes reach the tool as the agent sent them', async (t) => {
  const agent = await createAgent(base, owner, 'utf8-headers');
  // Each character below U+0100 went out as one Latin-1 byte (undici writes a string's header as Latin-1), and any other was a 400.
  const value = 'x naïve 日本語 résumé x';
  const res = await rawRequest(service.port, [
    `GET /proxy/${agent.api_key}/${upstream.authority}/echo HTTP/1.1`, 'Host: x', `X-Custom: ${value}`, `X-Agent-Reasoning: x checking 日本語 x`, '', '',
  ].join('\r\n'), 500);
  t.equal(res.status, 200);
  const seen = upstream.seen[upstream.seen.length - 1]!.headers;
  // Node's parser reads header bytes as Latin-1: the bytes are the UTF-8 sent.
  t.equal(Buffer.from(seen['x-custom'] as string, 'latin1').toString('utf8'), value, 'the bytes as sent');
  const rows = await eventually(async () => {
    const r = (await api(base, owner, 'GET', `/audit?agent_id=${agent.id}`)).json as any[];
    return r.length > 0 ? r : undefined;
  });
  t.equal(rows[0].reasoning, 'x checking 日本語 x', 'the reasoning recorded as text');
});

t.test('a tool\'s answer is sandboxed: served from the console\'s origin, it runs no script there and claims no service worker', async (t) => {
  const agent = await createAgent(base, owner, 'same-origin');
  const res = await proxied(agent.api_key, `${upstream.authority}/page.html`);
  t.equal(res.status, 200);
  t.equal(res.headers.get('content-security-policy'), 'sandbox', 'a browser runs it with no script, in an opaque origin');
  t.equal(res.headers.get('x-content-type-options'), 'nosniff');
  t.equal(res.headers.get('service-worker-allowed'), null, 'no service worker scope wider than the tool\'s own path');
  t.equal(res.headers.get('content-type'), 'text/html', 'the rest of the head passes');
  t.equal(await res.text(), HOSTILE_PAGE, 'the body is untouched');
  const head = await proxied(agent.api_key, `${upstream.authority}/json`, { method: 'HEAD' });
  t.equal(head.headers.get('content-security-policy'), 'sandbox', 'on a bodiless answer too');
});

t.test('byte-identical 1 MiB bodies both ways (streamed)', async (t) => {
  const agent = await createAgent(base, owner, 'bulk', 'hash');
  const payload = patternBytes(1024 * 1024 + 7);
  const up = await proxied(agent.api_key, `${upstream.authority}/echo`, { method: 'POST', body: new Uint8Array(payload), headers: { 'content-type': 'application/octet-stream' } });
  const echoed = (await up.json()) as any;
  t.equal(echoed.body_bytes, payload.length);
  t.equal(echoed.body_sha256, createHash('sha256').update(payload).digest('hex'));
  // A chunked upload (no Content-Length).
  const stream = new ReadableStream({
    start(controller) {
      for (let i = 0; i < payload.length; i += 100_000) controller.enqueue(new Uint8Array(payload.subarray(i, i + 100_000)));
      controller.close();
    },
  });
  const chunked = await proxied(agent.api_key, `${upstream.authority}/echo`, { method: 'PUT', body: stream, duplex: 'half' } as RequestInit);
  t.equal(((await chunked.json()) as any).body_sha256, createHash('sha256').update(payload).digest('hex'), 'chunked upload identical');
  const down = await proxied(agent.api_key, `${upstream.authority}/bytes?n=${1024 * 1024}`);
  const got = Buffer.from(await down.arrayBuffer());
  t.ok(got.equals(patternBytes(1024 * 1024)), 'download identical');
  const rows = await auditFor(owner, agent.id, 3);
  const download = rows.find((r) => r.tool_url.includes('/bytes'));
  t.equal(download.output_hash, createHash('sha256').update(got).digest('hex'), 'hash mode: SHA-256 of the whole body');
  t.equal(download.response_bytes, 1024 * 1024);
  t.equal(download.output, null);
  const upload = rows.find((r) => r.action === 'POST');
  t.equal(upload.request_bytes, payload.length);
});

/**
 * GETs url with node:http (room for a 64 KiB head; fetch stops at 16 KiB),
 * pausing `pauseMs` after every `pauseEvery` bytes read, so that the proxy
 * meets a client that is behind (by default it reads at once).
 */
function download(url: string, pauseEvery = Infinity, pauseMs = 0): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    httpGet(url, { maxHeaderSize: 64 * 1024 }, (res) => {
      const chunks: Buffer[] = [];
      let sincePause = 0;
      res.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        sincePause += chunk.length;
        if (sincePause < pauseEvery) return;
        sincePause = 0;
        res.pause();
        setTimeout(() => res.resume(), pauseMs);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    }).on('error', reject);
  });
}

t.test('a client that reads slowly gets a large answer whole and in order (Content-Length and chunked)', async (t) => {
  // The proxy gathers the chunks of a turn into one send, and holds what comes
  // while the client is behind until it drains (stream-response.ts): every
  // byte must still arrive once, in order, and the audit must count them all.
  const agent = await createAgent(base, owner, 'slow-reader', 'hash');
  const n = 16 * 1024 * 1024 + 3;
  const expected = patternBytes(n);
  const sha = createHash('sha256').update(expected).digest('hex');
  const sized = await download(`${base}/proxy/${agent.api_key}/${upstream.authority}/bytes?n=${n}`, 1024 * 1024, 20);
  t.equal(sized.status, 200);
  t.equal(sized.headers['content-length'], String(n), 'the upstream\'s length');
  t.equal(sized.body.length, n);
  t.ok(sized.body.equals(expected), 'Content-Length answer identical');
  const chunked = await download(`${base}/proxy/${agent.api_key}/${upstream.authority}/bytes-chunked?n=${n}`, 1024 * 1024, 20);
  t.equal(chunked.status, 200);
  t.equal(chunked.headers['transfer-encoding'], 'chunked');
  t.equal(chunked.body.length, n);
  t.ok(chunked.body.equals(expected), 'chunked answer identical');
  const rows = await auditFor(owner, agent.id, 2);
  for (const row of rows) {
    t.equal(row.response_bytes, n, `${row.tool_url}: every byte counted`);
    t.equal(row.output_hash, sha, `${row.tool_url}: the hash of what the client got`);
  }
});

t.test('slow readers at once each get their own bytes', async (t) => {
  // Four Content-Length answers held back at once (stream-response.ts keeps
  // what a client behind cannot take yet, per answer): readers falling behind
  // at different rhythms must each get their own bytes, whole and in order.
  const agent = await createAgent(base, owner, 'slow-readers', 'none');
  const sizes = [4 * 1024 * 1024 + 1, 3 * 1024 * 1024 + 333, 5 * 1024 * 1024 + 17, 2 * 1024 * 1024 + 4099];
  const got = await Promise.all(sizes.map((n, i) => download(`${base}/proxy/${agent.api_key}/${upstream.authority}/bytes?n=${n}`, (i + 1) * 64 * 1024, 3 + 4 * i)));
  for (const [i, n] of sizes.entries()) {
    t.equal(got[i]!.body.length, n, `reader ${i}: every byte`);
    t.ok(got[i]!.body.equals(patternBytes(n)), `reader ${i}: its own bytes, in order`);
  }
});

t.test('a client that is always behind gets a chunked answer of uneven pieces whole', async (t) => {
  // Pieces below, at and above uWS's 16 KiB cork buffer, one a turn: the proxy
  // writes them in pieces that fit it (stream-response.ts), and every byte must
  // still arrive once and in order. small-socket-buffers.test.ts runs this where
  // the client's socket is full most of the time.
  const agent = await createAgent(base, owner, 'uneven-reader', 'hash');
  const n = 8 * 1024 * 1024 + 5;
  const expected = patternBytes(n);
  const got = await download(`${base}/proxy/${agent.api_key}/${upstream.authority}/bytes-uneven?n=${n}`, 1, 1);
  t.equal(got.status, 200);
  t.equal(got.headers['transfer-encoding'], 'chunked');
  t.equal(got.body.length, n, 'every byte');
  t.ok(got.body.equals(expected), 'in order');
  const [row] = await auditFor(owner, agent.id, 1);
  t.equal(row.output_hash, createHash('sha256').update(expected).digest('hex'), 'the audit\'s hash is of what the client got');
});

t.test('a head larger than uWS\'s cork buffer arrives whole, with its body (Content-Length, chunked, event stream)', async (t) => {
  // Such a head is written before any cork (stream-response.ts, #largeHeadFirst).
  const agent = await createAgent(base, owner, 'big-head');
  const n = 100_000;
  for (const query of ['', '&chunked=1', '&sse=1']) {
    const res = await download(`${base}/proxy/${agent.api_key}/${upstream.authority}/big-head?n=${n}${query}`);
    t.equal(res.status, 200, `${query || 'Content-Length'}: status`);
    t.equal(res.headers['x-big'], 'b'.repeat(20_000), `${query || 'Content-Length'}: the large header`);
    t.equal(res.headers['x-after'], 'still here', `${query || 'Content-Length'}: the header after it`);
    const body = res.body;
    const expected = query === '&sse=1' ? Buffer.concat([Buffer.from(':\n'), patternBytes(n)]) : patternBytes(n);
    t.ok(body.equals(expected), `${query || 'Content-Length'}: the body`);
  }
});

t.test('a stream that goes quiet after a burst reaches a client that was behind, without waiting for more', async (t) => {
  // The client reads nothing while 8 MiB go by, so uWS keeps part of them; then
  // the upstream sends END and stays quiet for 5 s. uWS does not drain its own
  // buffer while the response has an onWritable handler: the handler must.
  const agent = await createAgent(base, owner, 'idle-stream');
  const n = 8 * 1024 * 1024;
  const socket = netConnect(service.port, '127.0.0.1');
  await new Promise<void>((r) => socket.once('connect', () => r()));
  socket.pause();
  socket.write(`GET /proxy/${agent.api_key}/${upstream.authority}/burst-then-idle?n=${n} HTTP/1.1\r\nHost: x\r\n\r\n`);
  await new Promise((r) => setTimeout(r, 1000));
  const started = Date.now();
  let tail = '';
  let bytes = 0;
  const raw: Buffer[] = [];
  const ended = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 3000);
    socket.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      raw.push(chunk);
      // Slowly, so that the proxy meets a full socket again and again, up to the end.
      socket.pause();
      setTimeout(() => socket.resume(), 1);
      tail = (tail + chunk.toString('latin1')).slice(-64);
      if (tail.includes('END\n')) {
        clearTimeout(timer);
        resolve(true);
      }
    });
    socket.resume();
  });
  socket.destroy();
  t.ok(ended, `END arrived ${Date.now() - started} ms after the client read again (${bytes} bytes), before the upstream's end at 5 s`);
  t.ok(bytes > n, 'with every byte before it');
  const body = dechunk(Buffer.concat(raw));
  t.ok(body.equals(Buffer.concat([Buffer.from(':\n'), patternBytes(n), Buffer.from('END\n')])), 'each once, in order, in intact chunks');
});

/** The body of a raw chunked HTTP/1.1 response (head and all), as far as it came. */
function dechunk(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = raw.indexOf('\r\n\r\n') + 4;
  for (;;) {
    const lineEnd = raw.indexOf('\r\n', at);
    if (lineEnd < 0) break;
    const size = parseInt(raw.subarray(at, lineEnd).toString('latin1'), 16);
    if (!(size > 0) || lineEnd + 2 + size > raw.length) break;
    parts.push(raw.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

t.test('chunked and server-sent-event responses arrive as they are produced', async (t) => {
  const agent = await createAgent(base, owner, 'sse');
  const res = await proxied(agent.api_key, `${upstream.authority}/sse`);
  t.equal(res.headers.get('content-type'), 'text/event-stream');
  const reader = res.body!.getReader();
  const arrivals: number[] = [];
  const start = Date.now();
  let text = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    arrivals.push(Date.now() - start);
    text += Buffer.from(value).toString();
  }
  // The head goes out at once with an SSE comment line (":"), which event-stream parsers ignore.
  t.equal(text, ':\ndata: event 1\n\ndata: event 2\n\ndata: event 3\n\n');
  t.ok(arrivals.length >= 3, `events arrived separately (${arrivals.join(', ')} ms)`);
  t.ok(arrivals[0]! < 250 && arrivals[arrivals.length - 1]! >= 250, 'the first event did not wait for the last');
  const chunked = await proxied(agent.api_key, `${upstream.authority}/chunked`);
  t.equal(await chunked.text(), 'one,two,three');
});

t.test("a tool's cookies are scoped to its prefix: never sent by a browser to the console, the admin API or another tool", async (t) => {
  const agent = await createAgent(base, owner, 'cookies');
  const res = await proxied(agent.api_key, `${upstream.authority}/cookies`);
  t.equal(res.status, 200);
  const prefix = `/proxy/${agent.api_key}/${upstream.authority}`;
  t.strictSame(res.headers.getSetCookie(), [`session=s1; HttpOnly; Path=${prefix}/`, `pref=dark; Secure; Path=${prefix}/docs`, `plain=1; Path=${prefix}/`], 'Path under the prefix (without one, the upstream path\'s directory), Domain dropped, the rest as sent');
  t.equal(await res.text(), 'cookies');
});

t.test('redirects are passed back, never followed; 204 and 304 have no body', async (t) => {
  const agent = await createAgent(base, owner, 'redirect');
  const res = await proxied(agent.api_key, `${upstream.authority}/redirect`, { redirect: 'manual' });
  t.equal(res.status, 302);
  t.equal(res.headers.get('location'), 'https://elsewhere.example/next');
  for (const code of [204, 304, 404, 500]) {
    const r = await proxied(agent.api_key, `${upstream.authority}/status?code=${code}`);
    t.equal(r.status, code);
    const body = await r.text();
    t.equal(body, code === 204 || code === 304 ? '' : `status ${code}`);
  }
  for (let i = 0; i < 2; i++) {
    const r = await proxied(agent.api_key, `${upstream.authority}/status?code=304&length=11`);
    t.equal(r.status, 304, `a 304 with the Content-Length a 200 would have is passed on, not 502 (${i === 0 ? 'first' : 'again'})`);
    t.equal(await r.text(), '');
  }
  const audited = await auditFor(owner, agent.id, 7);
  t.equal(audited.filter((e) => e.status_code === 304 && e.decision === 'allowed').length, 3, 'each 304 audited as such, allowed');
  // A 204 with an event-stream type: no body (not the stream's opening line,
  // chunked), and the kept-alive connection serves the next request.
  const target = `/proxy/${agent.api_key}/${upstream.authority}`;
  const raw = await rawExchange(service.port, [`GET ${target}/events-done HTTP/1.1\r\nHost: x\r\n\r\n`, `GET ${target}/json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`], { gapMs: 300 });
  t.same(raw.statuses, [204, 200], 'the 204, then the next answer');
  const first = raw.text.slice(0, raw.text.indexOf('HTTP/1.1 200'));
  t.notMatch(first, /transfer-encoding/i, 'the 204 has no framing of a body');
  t.ok(first.endsWith('\r\n\r\n'), 'and nothing after its head');
});

t.test('upstream failures: 502 upstream_unreachable (refused, TLS), 504 upstream_timeout; all audited', async (t) => {
  const agent = await createAgent(base, owner, 'failures');
  // A port with nothing listening: port 1 (a port freed by a closed server may be taken by a parallel test).
  let res = await proxied(agent.api_key, '127.0.0.1:1/x');
  t.equal(res.status, 502);
  t.equal(((await res.json()) as any).error, 'upstream_unreachable');
  // A certificate from no trusted CA.
  const untrusted = await startUpstream({}, { cert: 'untrusted.crt', key: 'untrusted.key' });
  res = await proxied(agent.api_key, `${untrusted.authority}/echo`);
  t.equal(res.status, 502);
  t.match(((await res.json()) as any).message, /TLS/);
  t.equal(untrusted.seen.length, 0, 'no request was sent over an unverified connection');
  await untrusted.close();
  // Headers that never come.
  const started = Date.now();
  res = await proxied(agent.api_key, `${upstream.authority}/stall-headers`);
  t.equal(res.status, 504);
  t.equal(((await res.json()) as any).error, 'upstream_timeout');
  t.ok(Date.now() - started < 4000, 'within the configured deadline');
  const rows = await auditFor(owner, agent.id, 3);
  t.same(rows.map((r) => r.status_code).sort(), [502, 502, 504]);
});

t.test('a garbage or early-closing upstream never crashes the proxy', async (t) => {
  const agent = await createAgent(base, owner, 'garbage');
  const behaviours: ((socket: import('node:tls').TLSSocket) => void)[] = [
    (s) => s.end('HTTP/1.1 abc def\r\n\r\n'),
    (s) => s.end('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort'),
    (s) => s.end(`HTTP/1.1 200 OK\r\nx-big: ${'a'.repeat(200_000)}\r\n\r\n`),
    (s) => s.destroy(),
  ];
  for (const behave of behaviours) {
    const server = createTlsServer({ cert: readFileSync(`${TLS_DIR}server.crt`), key: readFileSync(`${TLS_DIR}server.key`) }, (socket) => {
      socket.once('data', () => behave(socket));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    const res = await proxied(agent.api_key, `127.0.0.1:${port}/x`);
    t.ok(res.status === 502 || res.status === 200, `answered ${res.status}`);
    await res.arrayBuffer().catch(() => undefined);
    server.close();
  }
  const health = await fetch(`${base}/health`);
  t.equal(health.status, 200, 'still healthy');
});

t.test('an upstream that sends part of its body and closes in one write: the client gets the head and the part, then a cut; audited 502', async (t) => {
  // Head, 5 of 100 bytes and the close arrive in one read: the bytes gathered
  // for the turn's send must still go out before the cut (stream-response.ts).
  const agent = await createAgent(base, owner, 'short-body', 'full');
  const server = createTlsServer({ cert: readFileSync(`${TLS_DIR}server.crt`), key: readFileSync(`${TLS_DIR}server.key`) }, (socket) => {
    socket.once('data', () => socket.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\nshort'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const port = (server.address() as AddressInfo).port;
  const { text, closed } = await rawExchange(service.port, `GET /proxy/${agent.api_key}/127.0.0.1:${port}/x HTTP/1.1\r\nHost: x\r\n\r\n`, { maxMs: 10_000 });
  t.ok(closed, 'the proxy closes the connection');
  t.match(text, /^HTTP\/1\.1 200 OK\r\n/, 'the upstream\'s head');
  t.match(text, /content-length: 100\r\n/i, 'with its length');
  t.ok(text.endsWith('\r\n\r\nshort'), 'then the 5 bytes that came, then the connection closes');
  const rows = await auditFor(owner, agent.id, 1);
  t.equal(rows[0].status_code, 502, 'audited as a failed upstream');
  t.equal(rows[0].response_bytes, 5);
  t.equal(rows[0].output, 'short');
});

t.test('an upstream that sends its head and closes before any body: the proxy\'s 502 is audited with no output of the upstream\'s', async (t) => {
  const server = createTlsServer({ cert: readFileSync(`${TLS_DIR}server.crt`), key: readFileSync(`${TLS_DIR}server.key`) }, (socket) => {
    socket.once('data', () => socket.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\n'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const port = (server.address() as AddressInfo).port;
  for (const mode of ['hash', 'full'] as const) {
    const agent = await createAgent(base, owner, `head-only-${mode}`, mode);
    const res = await proxied(agent.api_key, `127.0.0.1:${port}/x`);
    t.equal(res.status, 502, `${mode}: the proxy answers itself`);
    await res.arrayBuffer();
    const [row] = await auditFor(owner, agent.id, 1);
    t.equal(row.status_code, 502);
    t.equal(row.output_hash, null, `${mode}: no hash of a body the agent never got (not the empty body's)`);
    t.equal(row.output, null, `${mode}: no output`);
  }
});

t.test('a client that goes away is audited with 499 and the upstream request is aborted', async (t) => {
  const agent = await createAgent(base, owner, 'quitter', 'full');
  const socket = netConnect(service.port, '127.0.0.1');
  await new Promise<void>((r) => socket.once('connect', () => r()));
  socket.write(`GET /proxy/${agent.api_key}/${upstream.authority}/endless HTTP/1.1\r\nHost: x\r\n\r\n`);
  await new Promise<void>((r) => socket.once('data', () => r()));
  socket.destroy();
  const rows = await auditFor(owner, agent.id, 1);
  t.equal(rows[0].status_code, 499);
  t.ok(rows[0].response_bytes > 0);
  t.equal(rows[0].output_truncated, true, 'capture stays capped');
  t.equal(rows[0].output.length, 1000);
});

t.test('log_outputs: full stores text up to the cap, base64 for binary; none stores nothing', async (t) => {
  const full = await createAgent(base, owner, 'full', 'full');
  const text = await (await proxied(full.api_key, `${upstream.authority}/json`)).text();
  await (await proxied(full.api_key, `${upstream.authority}/bytes?n=5000`)).arrayBuffer();
  const rows = await auditFor(owner, full.id, 2);
  const json = rows.find((r) => r.tool_url.endsWith('/json'));
  t.equal(json.output, text);
  t.equal(json.output_truncated, false);
  t.equal(json.output_hash, null);
  const bin = rows.find((r) => r.tool_url.includes('/bytes'));
  t.equal(bin.output_truncated, true);
  t.ok(Buffer.from(bin.output, 'base64').equals(patternBytes(5000).subarray(0, 1000)), 'binary capture is base64 of the first bytes');
  await (await proxied(full.api_key, `${upstream.authority}/status?code=204`)).arrayBuffer();
  const [empty] = (await auditFor(owner, full.id, 3)).filter((r) => r.status_code === 204);
  t.equal(empty.output, '', 'an empty upstream body is stored as an empty string, not null');
  const none = await createAgent(base, owner, 'none', 'none');
  await (await proxied(none.api_key, `${upstream.authority}/json`)).text();
  const [row] = await auditFor(owner, none.id, 1);
  t.equal(row.output, null);
  t.equal(row.output_hash, null);
  t.ok(row.latency_ms >= 0);
});

t.test('a request head over 16 KiB is answered 431 without reaching upstream', async (t) => {
  const agent = await createAgent(base, owner, 'bighead');
  const before = upstream.seen.length;
  const res = await proxied(agent.api_key, `${upstream.authority}/echo`, { headers: { 'x-big': 'a'.repeat(20_000) } });
  t.equal(res.status, 431);
  t.equal(((await res.json()) as any).error, 'headers_too_large');
  t.equal(upstream.seen.length, before);
  const admin = await api(base, owner, 'GET', '/agents', undefined, { 'x-big': 'a'.repeat(20_000) });
  t.equal(admin.status, 431, 'admin paths too');
});

t.test('after a HEAD (proxied or admin) the keep-alive connection serves the next request', async (t) => {
  const agent = await createAgent(base, owner, 'heads');
  for (const head of [`/proxy/${agent.api_key}/${upstream.authority}/bytes?n=5000`, '/agents']) {
    const { head: answer, after } = await headThenNext(service.port, head, 300, `Authorization: Bearer ${owner.token}\r\n`);
    t.match(answer, /^HTTP\/1\.1 200 /, `HEAD ${head.slice(0, 20)} answered`);
    t.match(answer, /content-length: \d+/i, 'with the length the GET would have');
    t.match(after, /"status":"ok"/, 'the same connection answered the next request');
  }
});

t.test("the proxy's own answers to HEAD (401, 403, 429) have a length and no body: a keep-alive client reads its next answer", async (t) => {
  const agent = await createAgent(base, owner, 'own-heads');
  await setPolicy(agent.id, `version: "1"
default: allow
rules:
  - {name: no-head, tool: "*", action: HEAD, path: /denied, decision: deny}
limits:
  - {name: one-head, tool: "*", action: HEAD, path: /limited, rate: 1/minute}
`);
  const limited = `/proxy/${agent.api_key}/${upstream.authority}/limited`;
  t.equal((await fetch(`${base}${limited}`, { method: 'HEAD' })).status, 200, 'the first HEAD within the limit');
  for (const [path, status] of [
    [`/proxy/not-a-key/${upstream.authority}/json`, 401],
    [`/proxy/${agent.api_key}/${upstream.authority}/denied`, 403],
    [limited, 429],
  ] as const) {
    const { statuses, head, after } = await headThenNext(service.port, path);
    t.strictSame(statuses, [status, 200], `${status}, then the next answer`);
    t.match(head, /\r\ncontent-length: [1-9]\d*\r\n/i, `${status}: with the length the GET's body would have`);
    t.match(after, /^HTTP\/1\.1 200 /, `${status}: no body after the head (${JSON.stringify(after.slice(0, 120))})`);
  }
});
