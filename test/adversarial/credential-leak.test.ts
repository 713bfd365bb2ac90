// Credentials never leak (CONTRACT.md "Credentials": no log, audit entry, error or
// metric ever contains a value). One canary value per credential type is used
// throughout a run that goes through every kind of outcome — success, upstream
// errors, a timeout, a policy denial, a redirect, admin errors naming the
// credential — with agents of every log_outputs mode; then the canaries are
// searched for in the logs, the audit rows, every response body the service
// itself produced, the PDF export (raw bytes and text), /metrics, and the files
// of the data directory (the metadata store and its WAL included).
// The upstream's /echo route reflects the request's headers and URL in its body,
// which is what an upstream that echoes its input does.
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import pdfParse from 'pdf-parse/lib/pdf-parse.js';
import t from 'tap';
import { auditRows } from '../support/checks.js';
import { rawExchange } from '../support/raw-socket.js';
import { api, createAgent, eventually, signup, startTestService, type Session } from '../support/service.js';
import { startUpstream, type Route, type Upstream } from '../support/upstream.js';

// What the upstream that receives the redirected client would see: nothing, since
// the proxy never follows a redirect.
const elsewhere = await startUpstream();
const CAPTURE_BYTES = 4096;
const redirectRoutes: Record<string, Route> = {
  '/redirect-away': (_req, res) => {
    res.writeHead(302, { location: `https://${elsewhere.authority}/collect` });
    res.end();
  },
  // The Authorization value reflected so that the capture cap cuts it 8 bytes into the secret.
  '/secret-at-cap': (req, res) => {
    res.setHeader('content-type', 'text/plain');
    res.end(`${'x'.repeat(CAPTURE_BYTES - 'Bearer '.length - 8)}${req.headers.authorization ?? ''} and more`);
  },
  // The echo compressed, as most servers do when the client accepts gzip: redaction cannot see into gzip.
  '/echo-gzip': (req, res) => {
    const body = Buffer.from(JSON.stringify({ headers: req.headers, url: req.url }));
    res.setHeader('content-type', 'application/json');
    if (!/gzip/.test(String(req.headers['accept-encoding'] ?? ''))) return void res.end(body);
    res.setHeader('content-encoding', 'gzip');
    res.end(gzipSync(body));
  },
  // Compressed, with a second Content-Encoding line that says identity (a misbehaving server or middlebox).
  '/gzip-then-identity': (req, res) => {
    res.setHeader('content-type', 'application/json');
    res.setHeader('content-encoding', ['gzip', 'identity']);
    res.end(gzipSync(JSON.stringify({ headers: req.headers, url: req.url })));
  },
  // ... and a server that compresses whatever the client accepts.
  '/always-gzip': (req, res) => {
    res.setHeader('content-type', 'application/json');
    res.setHeader('content-encoding', 'gzip');
    res.end(gzipSync(JSON.stringify({ headers: req.headers, url: req.url })));
  },
  // A redirect that keeps the query (a trailing slash added): with a query credential, the Location holds it.
  '/redirect-keep-query': (req, res) => {
    const query = (req.url ?? '').split('?')[1] ?? '';
    res.writeHead(301, {
      location: `https://${req.headers.host}/echo/?${query}`,
      'content-location': req.url ?? '',
      // Pagination and refresh links are built from the request URL the same way.
      link: `<https://${req.headers.host}/echo?page=2&${query}>; rel="next"`,
      refresh: `0; url=https://${req.headers.host}/echo?${query}`,
    });
    res.end();
  },
  // The Authorization value echoed, then the upstream gone 8 bytes into the secret (a cut body, not the cap).
  '/secret-then-cut': (req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '1000' });
    res.write(`echo: ${(req.headers.authorization ?? '').slice(0, 'Bearer '.length + 8)}`);
    setTimeout(() => res.socket?.destroy(), 100);
  },
  // ... and inside a binary body, which the audit stores as base64.
  '/secret-in-binary': (req, res) => {
    res.setHeader('content-type', 'application/octet-stream');
    res.end(Buffer.concat([Buffer.from([0, 1, 2, 0xff]), Buffer.from(req.headers.authorization ?? ''), Buffer.from([0, 0xfe])]));
  },
};
const bearerHost = await startUpstream(redirectRoutes);
const headerHost = await startUpstream(redirectRoutes);
const queryHost = await startUpstream(redirectRoutes);
// Port 1: nothing listens there (a port freed by a closed server may be taken by a parallel test).
const closedAuthority = '127.0.0.1:1';

const service = await startTestService({ UPSTREAM_HEADERS_TIMEOUT_MS: '800', OUTPUT_CAPTURE_BYTES: String(CAPTURE_BYTES) });
const base = service.url;
t.teardown(async () => {
  await service.close();
  await Promise.all([elsewhere, bearerHost, headerHost, queryHost].map((u) => u.close()));
});

const tag = randomBytes(6).toString('hex');
const CANARY = {
  bearer: `cnry-bearer-${tag}`,
  header: `cnry-header-${tag}`,
  // Characters that the query injection percent-encodes, so both spellings are searched.
  query: `cnry q&${tag}/=`,
  closedPort: `cnry-closed-${tag}`,
};
/** Every spelling of every canary that could show up in text. */
const SPELLINGS = Object.values(CANARY).flatMap((v) => [...new Set([v, encodeURIComponent(v), v.replace(/ /g, '+'), JSON.stringify(v).slice(1, -1)])]);
const leaks = (text: string) => SPELLINGS.filter((s) => text.includes(s));
const leaksIn = (bytes: Buffer) => SPELLINGS.filter((s) => bytes.includes(Buffer.from(s, 'utf8')));

/** Every body the service answered with, for the search at the end. */
const answers: string[] = [];

const owner = await signup(base);
const agents = {
  full: await createAgent(base, owner, 'canary-full', 'full'),
  hash: await createAgent(base, owner, 'canary-hash', 'hash'),
  none: await createAgent(base, owner, 'canary-none', 'none'),
};

async function admin(session: Session, method: string, path: string, body?: unknown) {
  const res = await api(base, session, method, path, body);
  answers.push(res.text);
  return res;
}

/** The proxy's own answers (its error bodies) are searched; what the upstream answered is passed through as it was. */
function ownAnswer(text: string): boolean {
  try {
    const body = JSON.parse(text) as { error?: unknown; message?: unknown };
    return typeof body.error === 'string' && typeof body.message === 'string';
  } catch {
    return false;
  }
}

async function proxied(key: string, target: string, init: RequestInit = {}) {
  const res = await fetch(`${base}/proxy/${key}/${target}`, { redirect: 'manual', ...init });
  const text = await res.text();
  if (ownAnswer(text)) answers.push(text);
  return { status: res.status, headers: res.headers, text };
}

t.test('the credentials are stored, and the admin errors that name them do not repeat their values', async (t) => {
  const creds: Array<[Upstream | string, string, Record<string, string>]> = [
    [bearerHost, CANARY.bearer, { cred_type: 'bearer', name: 'bearer-tok' }],
    [headerHost, CANARY.header, { cred_type: 'header', name: 'X-Api-Key' }],
    [queryHost, CANARY.query, { cred_type: 'query', name: 'api_key' }],
    [closedAuthority, CANARY.closedPort, { cred_type: 'bearer', name: 'closed' }],
  ];
  for (const [host, value, rest] of creds) {
    const hostname = typeof host === 'string' ? host : host.authority;
    const res = await admin(owner, 'POST', '/credentials', { ...rest, hostname, value });
    t.equal(res.status, 201, res.text);
    t.same(leaks(res.text), [], 'the created record does not carry the value');
    const again = await admin(owner, 'POST', '/credentials', { ...rest, hostname, value });
    t.equal(again.status, 409, 'a second one for the host is a conflict');
  }
  const refusals = [
    { name: 'x', hostname: 'bad host', cred_type: 'bearer', value: CANARY.bearer },
    { name: 'x', hostname: 'crlf.example', cred_type: 'bearer', value: `${CANARY.bearer}\r\nX-Evil: 1` },
    { name: 'x', hostname: 'type.example', cred_type: 'basic', value: CANARY.header },
    { name: 'x', hostname: 'long.example', cred_type: 'header', value: CANARY.header.repeat(1000) },
    { name: 'x', hostname: 'hdr.example', cred_type: 'header', header_name: 'host', value: CANARY.header },
    { name: 'x', hostname: 'num.example', cred_type: 'query', value: 42, query_param: CANARY.query },
  ];
  for (const body of refusals) {
    const res = await admin(owner, 'POST', '/credentials', body);
    t.equal(res.status, 400, `refused: ${res.text.slice(0, 120)}`);
  }
  const list = await admin(owner, 'GET', '/credentials');
  t.equal(list.json.length, 4);
  t.same(leaks(list.text), [], 'the list carries no value');
});

t.test('a full run through every outcome, for every log_outputs mode', async (t) => {
  await admin(owner, 'POST', `/agents/${agents.hash.id}/policy`, {
    rules_yaml: 'version: "1"\nrules:\n  - {name: no-deletes, tool: "*", action: DELETE, decision: deny}\n',
  });
  for (const agent of Object.values(agents)) {
    for (const host of [bearerHost, headerHost, queryHost]) {
      const a = host.authority;
      t.equal((await proxied(agent.api_key, `${a}/echo?x=1`)).status, 200);
      t.equal((await proxied(agent.api_key, `${a}/echo`, { method: 'POST', body: 'payload', headers: { 'x-agent-reasoning': 'why', 'x-agent-task-id': 't-1' } })).status, 200);
      t.equal((await proxied(agent.api_key, `${a}/json`)).status, 200);
      t.equal((await proxied(agent.api_key, `${a}/bytes?n=3000`)).status, 200);
      t.equal((await proxied(agent.api_key, `${a}/status?code=500`)).status, 500);
      t.equal((await proxied(agent.api_key, `${a}/redirect-away`)).status, 302);
      t.equal((await proxied(agent.api_key, `${a}/echo-gzip`, { headers: { 'accept-encoding': 'gzip' } })).status, 200);
      t.equal((await proxied(agent.api_key, `${a}/always-gzip`)).status, 200);
      const kept = await proxied(agent.api_key, `${a}/redirect-keep-query?x=1`);
      t.equal(kept.status, 301);
      t.match(kept.headers.get('location'), /\/echo\/\?x=1/, 'the Location is passed back');
      t.match(kept.headers.get('link'), /page=2&x=1/, 'the Link is passed back');
      t.same(leaks(['location', 'content-location', 'link', 'refresh'].map((h) => kept.headers.get(h)).join(' ')), [], 'without the credential in it');
      t.equal((await proxied(agent.api_key, `${a}/stall-headers`)).status, 504);
      t.equal((await proxied(agent.api_key, `${a.replace('127.0.0.1', 'bad_host!')}/echo`)).status, 400);
      const deleted = await proxied(agent.api_key, `${a}/echo`, { method: 'DELETE' });
      t.equal(deleted.status, agent === agents.hash ? 403 : 200);
    }
    t.equal((await proxied(agent.api_key, `${closedAuthority}/echo`)).status, 502, 'the host of the closed port: 502');
    t.equal((await proxied(agent.api_key, `${bearerHost.authority}/secret-at-cap`)).status, 200);
    t.equal((await proxied(agent.api_key, `${bearerHost.authority}/secret-in-binary`)).status, 200);
  }
  const bad = await proxied(`agk_${'0'.repeat(40)}`, `${bearerHost.authority}/echo`);
  t.equal(bad.status, 401);
  t.equal(elsewhere.seen.length, 0, 'no redirect was followed');
});

t.test('an upstream 302 to another host: the Location is passed back and no second request is made', async (t) => {
  const before = bearerHost.seen.length;
  const res = await proxied(agents.none.api_key, `${bearerHost.authority}/redirect-away`);
  t.equal(res.status, 302);
  t.equal(res.headers.get('location'), `https://${elsewhere.authority}/collect`, 'the Location, unchanged');
  t.equal(bearerHost.seen.length, before + 1, 'the credentialed host saw exactly one request');
  t.equal(bearerHost.seen.at(-1)!.headers.authorization, `Bearer ${CANARY.bearer}`, 'which carried the credential');
  t.equal(elsewhere.seen.length, 0, 'the other host saw nothing: the credential went nowhere else');
});

t.test('a client header cannot override or duplicate the injected one, in any case spelling', async (t) => {
  const key = agents.none.api_key;
  const variants = [
    ['Authorization: Bearer client-1'],
    ['AUTHORIZATION: Bearer client-2'],
    ['aUtHoRiZaTiOn: Basic Y2xpZW50OjM='],
    ['Authorization: Bearer client-4', 'authorization: Bearer client-5', 'AUTHORIZATION: Bearer client-6'],
    ['Connection: authorization', 'Authorization: Bearer client-7'],
  ];
  for (const lines of variants) {
    const before = bearerHost.seen.length;
    const res = await rawExchange(service.port, `GET /proxy/${key}/${bearerHost.authority}/echo HTTP/1.1\r\nHost: x\r\n${lines.join('\r\n')}\r\nConnection: close\r\n\r\n`);
    t.same(res.statuses, [200], lines.join(' | '));
    t.equal(bearerHost.seen.length, before + 1);
    const seen = bearerHost.seen.at(-1)!;
    const names = seen.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
    t.equal(names.filter((n) => n === 'authorization').length, 1, 'exactly one Authorization upstream');
    t.equal(seen.headers.authorization, `Bearer ${CANARY.bearer}`, 'and it is the injected one');
  }
  for (const lines of [['X-API-KEY: client-1'], ['x-api-key: client-2', 'X-Api-Key: client-3'], ['X-Api-Key: client-4', 'Authorization: Bearer other']]) {
    const before = headerHost.seen.length;
    const res = await rawExchange(service.port, `GET /proxy/${key}/${headerHost.authority}/echo HTTP/1.1\r\nHost: x\r\n${lines.join('\r\n')}\r\nConnection: close\r\n\r\n`);
    t.same(res.statuses, [200], lines.join(' | '));
    t.equal(headerHost.seen.length, before + 1);
    const seen = headerHost.seen.at(-1)!;
    const names = seen.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
    t.equal(names.filter((n) => n === 'x-api-key').length, 1, 'exactly one X-Api-Key upstream');
    t.equal(seen.headers['x-api-key'], CANARY.header, 'and it is the injected one');
  }
});

t.test('the query credential goes to the upstream query only', async (t) => {
  const before = queryHost.seen.length;
  const res = await proxied(agents.none.api_key, `${queryHost.authority}/echo?a=1`);
  t.equal(res.status, 200);
  t.equal(queryHost.seen.length, before + 1);
  t.equal(queryHost.seen.at(-1)!.url, `/echo?a=1&api_key=${encodeURIComponent(CANARY.query)}`, 'appended, encoded');
});

t.test('no canary in the audit rows (every field, every mode, output included)', async (t) => {
  // 3 hosts × 12 calls + the closed port + the two reflecting routes.
  const rows = await auditRows(base, owner, agents.full.id, 39, 15_000);
  t.equal(rows.length, 39, 'every call of the full agent was audited');
  t.ok(rows.some((r) => typeof r.output === 'string' && r.output.includes('"headers"')), 'the full agent stored the /echo bodies');
  const atCap = rows.find((r) => r.tool_url.endsWith('/secret-at-cap'));
  t.equal(atCap.output_truncated, true, 'the reflected secret was cut by the cap');
  t.notOk(atCap.output.includes('cnry'), 'and not even its first bytes were kept');
  t.ok(atCap.output.endsWith('Bearer '), 'the output ends where the secret began');
  const gzipped = rows.filter((r) => r.tool_url.endsWith('/echo-gzip'));
  t.equal(gzipped.length, 3);
  for (const r of gzipped) {
    const echo = JSON.parse(r.output);
    t.equal(echo.headers['accept-encoding'], 'identity', 'a full agent\'s call asks for the body as it is');
    t.ok(r.output.includes('[REDACTED]'), 'so its echo is stored, redacted');
  }
  for (const r of rows.filter((r) => r.tool_url.endsWith('/always-gzip'))) {
    t.equal(r.output, null, 'a body compressed anyway is not stored');
    t.equal(r.output_truncated, false);
  }
  const binary = rows.find((r) => r.tool_url.endsWith('/secret-in-binary'));
  t.ok(Buffer.from(binary.output, 'base64').includes(Buffer.from('Bearer [REDACTED]')), 'binary output: redacted before base64');
  const all = await api(base, owner, 'GET', '/audit?limit=1000');
  t.ok(all.json.length >= 90, `${all.json.length} rows`);
  t.same(leaks(all.text), [], 'no spelling of any canary in any row');
  // Binary captures are base64: decode every output and search the bytes too.
  const decoded = all.json.filter((r: any) => typeof r.output === 'string').map((r: any) => Buffer.from(r.output, 'base64'));
  t.same(leaksIn(Buffer.concat(decoded)), [], 'nor in any output read as base64');
});

t.test('a compressed body is not stored when a later Content-Encoding line says identity: the redaction cannot see into it', async (t) => {
  const res = await proxied(agents.full.api_key, `${bearerHost.authority}/gzip-then-identity`);
  t.equal(res.status, 200);
  const rows = await eventually(async () => {
    const page = (await api(base, owner, 'GET', `/audit?agent_id=${agents.full.id}&limit=1000`)).json as any[];
    const row = page.find((r) => r.tool_url.endsWith('/gzip-then-identity'));
    return row === undefined ? undefined : row;
  });
  t.equal(rows.output, null, 'not stored');
});

t.test('a body cut inside the credential (the upstream gone, or the client) keeps none of its bytes in the audit', async (t) => {
  const cut = await fetch(`${base}/proxy/${agents.full.api_key}/${bearerHost.authority}/secret-then-cut`).then((r) => r.text()).then(() => 'complete', () => 'cut');
  t.equal(cut, 'cut', 'the client saw the cut');
  const rows = await eventually(async () => {
    const page = (await api(base, owner, 'GET', `/audit?agent_id=${agents.full.id}&limit=1000`)).json as any[];
    return page.find((r) => r.tool_url.endsWith('/secret-then-cut'));
  });
  t.equal(rows.status_code, 502, 'audited as the upstream\'s failure');
  t.equal(rows.output, 'echo: Bearer ', `the secret's first bytes are not kept (${JSON.stringify(rows.output)})`);
});

t.test('an answer with no body but a Content-Encoding (a HEAD of a compressed resource) stores output "" for a full agent', async (t) => {
  const res = await proxied(agents.full.api_key, `${bearerHost.authority}/always-gzip?head=1`, { method: 'HEAD' });
  t.equal(res.status, 200);
  const rows = await auditRows(base, owner, agents.full.id, 42, 15_000);
  const head = rows.find((r) => r.action === 'HEAD' && r.tool_url.endsWith('/always-gzip?head=1'));
  t.equal(head?.output, '', 'no bytes, so nothing a credential could hide in: "" as for any empty body (it was null)');
});

t.test('no canary in the logs, the answers, /metrics or the PDF export', async (t) => {
  t.ok(service.logs.length > 50, `${service.logs.length} log lines`);
  t.same(leaks(service.logs.join('\n')), [], 'logs');
  t.ok(answers.length > 30, `${answers.length} answers of the service itself`);
  t.same(leaks(answers.join('\n')), [], 'the error (and admin) bodies the service produced');
  const metrics = await fetch(`${base}/metrics`);
  t.same(leaks(await metrics.text()), [], `/metrics (${metrics.status})`);
  const pdf = await fetch(`${base}/audit/export/pdf?days=1`, { headers: owner.auth });
  t.equal(pdf.status, 200);
  const bytes = Buffer.from(await pdf.arrayBuffer());
  t.same(leaksIn(bytes), [], 'PDF raw bytes');
  const text = (await pdfParse(bytes)).text;
  t.match(text, 'canary-full', 'the parsed PDF has the run in it');
  t.same(leaks(text), [], 'PDF text');
});

t.test('no canary in the metadata store file, its WAL, or any other file of the data directory', async (t) => {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile() && statSync(path).size < 64 * 1024 * 1024) files.push(path);
    }
  };
  walk(service.dataDir);
  const store = join(service.dataDir, 'metadata.sqlite');
  t.ok(files.includes(store), 'the store file is there');
  for (const suffix of ['', '-wal', '-shm']) {
    const path = store + suffix;
    if (!files.includes(path)) continue;
    t.same(leaksIn(readFileSync(path)), [], `${path.slice(service.dataDir.length + 1)}`);
  }
  const found = files.filter((path) => leaksIn(readFileSync(path)).length > 0).map((path) => path.slice(service.dataDir.length + 1));
  t.same(found, [], `none of ${files.length} files holds a canary`);
});
