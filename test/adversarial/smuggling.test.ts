// Request smuggling and head parsing over raw sockets (RFC 9112 §6.1, §6.3, §11.2).
// Every hostile head is answered without contacting upstream, the bytes that follow
// an ambiguous head are never served as a request of their own, and a fresh
// connection is served normally afterwards.
//
// What the uWS build does by itself (measured): it closes the connection on
// Content-Length with Transfer-Encoding and on a malformed Content-Length; it
// hands two Content-Lengths, a Transfer-Encoding other than chunked and two Hosts
// to the handler (the service refuses them); and on obs-fold, a NUL, a bare CR or
// LF, or more header fields than it holds, it stalls until its idle timeout
// (~10 s) and then closes. Those waits run concurrently, from the start of the file.
import t, { type Test } from 'tap';
import { MAX_ADMIN_BODY_BYTES } from '../../admin/http.js';
import { healthLatency } from '../support/checks.js';
import { rawExchange, type RawExchange } from '../support/raw-socket.js';
import { createAgent, signup, startTestService } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';

const upstream = await startUpstream();
const service = await startTestService();
const base = service.url;
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

const owner = await signup(base);
const agent = await createAgent(base, owner, 'smuggler');
// Warm the key: with a warm cache the proxy answers inside the request handler,
// which is when uWS goes on parsing the bytes buffered after the head.
if ((await fetch(`${base}/proxy/${agent.api_key}/${upstream.authority}/echo`)).status !== 200) throw new Error('warm-up call failed');

const PROXY = `/proxy/${agent.api_key}/${upstream.authority}`;
const AUTH = `Authorization: Bearer ${owner.token}\r\n`;

/** A request for `/marker-<name>` upstream: if the upstream ever sees that path, the bytes were served. */
const smuggled = (name: string) => `GET ${PROXY}/marker-${name} HTTP/1.1\r\nHost: x\r\n\r\n`;
const reached = (name: string) => upstream.seen.some((s) => s.url.startsWith(`/marker-${name}`));
const ok2xx = (r: RawExchange) => r.statuses.some((s) => s >= 200 && s < 300);

/** A fresh connection is served normally: /health, an admin read and a proxied call. */
async function stillServes(t: Test): Promise<void> {
  t.ok((await healthLatency(base)) < 1000, '/health answers on a fresh connection');
  const agents = await fetch(`${base}/agents`, { headers: owner.auth });
  t.equal(agents.status, 200, 'an admin call works');
  const proxied = await fetch(`${base}${PROXY}/echo`);
  t.equal(proxied.status, 200, 'a proxied call works');
  await Promise.all([agents.arrayBuffer(), proxied.arrayBuffer()]);
}

/** Refused without any 2xx, nothing of it upstream, and the connection ended. */
function assertRefusedAndClosed(t: Test, what: string, res: RawExchange, marker: string): void {
  t.notOk(ok2xx(res), `${what}: no 2xx (statuses ${JSON.stringify(res.statuses)})`);
  t.ok(res.statuses.every((s) => s >= 400 && s < 500), `${what}: any answer is a 4xx`);
  t.ok(res.closed, `${what}: the connection was closed`);
  t.notOk(reached(marker), `${what}: nothing reached upstream`);
}

// ---------------------------------------------------------------------------
// The stalling cases start now and are checked last (each waits for the idle timeout).

const STALLING: Record<string, string> = {
  'obs-fold': `GET ${PROXY}/marker-fold HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n`,
  'obs-fold in an admin head': `GET /agents HTTP/1.1\r\nHost: x\r\n${AUTH}X-A: a\r\n\tb\r\n\r\n${smuggled('fold-admin')}`,
  'a bare CR in a header value': `GET ${PROXY}/marker-cr HTTP/1.1\r\nHost: x\r\nX-A: a\rX-Injected: 1\r\n\r\n`,
  'a bare LF in a header value': `GET ${PROXY}/marker-lf HTTP/1.1\r\nHost: x\r\nX-A: a\nX-Injected: 1\r\n\r\n`,
  'bare LF line endings': `GET ${PROXY}/marker-lfonly HTTP/1.1\nHost: x\n\n`,
  'a NUL in the path': `GET ${PROXY}/marker-nul\0/x HTTP/1.1\r\nHost: x\r\n\r\n`,
  'a NUL in a header value': `GET ${PROXY}/marker-nulh HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n`,
  'more header fields than the parser holds': `GET ${PROXY}/marker-many HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 80 }, (_, i) => `X-H${i}: v\r\n`).join('')}\r\n`,
};
const MARKERS: Record<string, string> = {
  'obs-fold': 'fold', 'obs-fold in an admin head': 'fold-admin', 'a bare CR in a header value': 'cr', 'a bare LF in a header value': 'lf',
  'bare LF line endings': 'lfonly', 'a NUL in the path': 'nul', 'a NUL in a header value': 'nulh', 'more header fields than the parser holds': 'many',
};
const stalling = Promise.all(Object.entries(STALLING).map(async ([name, bytes]) => [name, await rawExchange(service.port, bytes, { maxMs: 14_000 })] as const));

// ---------------------------------------------------------------------------

t.test('Content-Length with Transfer-Encoding is closed by the parser, and the smuggled request never runs', async (t) => {
  const cases: Record<string, string> = {
    proxy: `POST ${PROXY}/marker-clte HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled('clte-1')}`,
    'proxy, TE first': `POST ${PROXY}/marker-tecl HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n${smuggled('clte-2')}`,
    admin: `POST /agents HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled('clte-3')}`,
  };
  for (const [what, bytes] of Object.entries(cases)) {
    const res = await rawExchange(service.port, bytes);
    assertRefusedAndClosed(t, what, res, 'cl');
  }
  for (const m of ['clte', 'tecl', 'clte-1', 'clte-2', 'clte-3']) t.notOk(reached(m), `${m} never reached upstream`);
  await stillServes(t);
});

t.test('two Content-Lengths: 400 and the connection closed; the bytes after the first length are never served', async (t) => {
  const alone = await rawExchange(service.port, `POST ${PROXY}/marker-2cl HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello`);
  t.same(alone.statuses, [400], 'answered 400 once');
  t.match(alone.text, /"error":"invalid_request"/);
  t.ok(alone.closed, 'and closed');
  const cases: Record<string, string> = {
    'short length first (the smuggling order)': `POST ${PROXY}/marker-2cl-a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: ${5 + smuggled('2cl-1').length}\r\n\r\nhello${smuggled('2cl-1')}`,
    'long length first': `POST ${PROXY}/marker-2cl-b HTTP/1.1\r\nHost: x\r\nContent-Length: ${5 + smuggled('2cl-2').length}\r\nContent-Length: 5\r\n\r\nhello${smuggled('2cl-2')}`,
    'a GET with two lengths and a pipelined request': `GET ${PROXY}/marker-2cl-c HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n${smuggled('2cl-3')}`,
  };
  for (const [what, bytes] of Object.entries(cases)) {
    const res = await rawExchange(service.port, bytes);
    assertRefusedAndClosed(t, what, res, '2cl');
  }
  // A key the proxy has not cached yet: the answer comes after a store lookup.
  const cold = await createAgent(base, owner, 'cold');
  const res = await rawExchange(service.port, `POST /proxy/${cold.api_key}/${upstream.authority}/marker-2cl-d HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: ${5 + smuggled('2cl-4').length}\r\n\r\nhello${smuggled('2cl-4')}`);
  assertRefusedAndClosed(t, 'cold key', res, '2cl');
  for (const m of ['2cl-1', '2cl-2', '2cl-3', '2cl-4']) t.notOk(reached(m), `${m} never reached upstream`);
  await stillServes(t);
});

t.test('a Transfer-Encoding other than chunked: 400 or closed; what follows is never served', async (t) => {
  const alone = await rawExchange(service.port, `POST ${PROXY}/marker-te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`);
  t.same(alone.statuses, [400], 'gzip, chunked: 400');
  t.match(alone.text, /Transfer-Encoding/);
  t.ok(alone.closed, 'and closed');
  const encodings = ['gzip, chunked', 'xchunked', 'chunked, identity', 'gzip', 'identity', 'chunked;q=1'];
  for (const [i, te] of encodings.entries()) {
    const res = await rawExchange(service.port, `POST ${PROXY}/marker-te-${i} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ${te}\r\n\r\n5\r\nhello\r\n0\r\n\r\n${smuggled(`te-s${i}`)}`);
    assertRefusedAndClosed(t, `Transfer-Encoding: ${te}`, res, `te-${i}`);
    t.notOk(reached(`te-s${i}`), `${te}: the trailing request never ran`);
  }
  await stillServes(t);
});

t.test('a duplicate Host: 400, closed, and a pipelined request after it never runs', async (t) => {
  const alone = await rawExchange(service.port, `GET ${PROXY}/marker-host HTTP/1.1\r\nHost: x\r\nHost: evil.example\r\n\r\n`);
  t.same(alone.statuses, [400]);
  t.match(alone.text, /Host/);
  t.ok(alone.closed, 'closed');
  const res = await rawExchange(service.port, `GET ${PROXY}/marker-host-a HTTP/1.1\r\nHost: x\r\nHost: evil.example\r\n\r\n${smuggled('host-1')}`);
  assertRefusedAndClosed(t, 'two Hosts then a pipelined request', res, 'host-a');
  t.notOk(reached('host-1'));
  await stillServes(t);
});

t.test('a framing error on an admin path or with a malformed key closes before any pipelined request is served', async (t) => {
  const cases: Record<string, string> = {
    'admin, two lengths': `POST /agents HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nContent-Length: 2\r\nContent-Length: ${2 + smuggled('adm-1').length}\r\n\r\n{}${smuggled('adm-1')}`,
    'admin, two Hosts': `GET /agents HTTP/1.1\r\nHost: x\r\nHost: y\r\n${AUTH}\r\n${smuggled('adm-2')}`,
    'admin, non-chunked TE': `POST /agents HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n${smuggled('adm-3')}`,
    'malformed key, two lengths': `POST /proxy/agk_bad/${upstream.authority}/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: ${5 + smuggled('adm-4').length}\r\n\r\nhello${smuggled('adm-4')}`,
    'malformed key, two Hosts': `GET /proxy/agk_bad/${upstream.authority}/x HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n${smuggled('adm-5')}`,
  };
  for (const [what, bytes] of Object.entries(cases)) {
    const res = await rawExchange(service.port, bytes);
    const marker = `adm-${Object.keys(cases).indexOf(what) + 1}`;
    assertRefusedAndClosed(t, what, res, marker);
  }
  // A well-formed key no agent has: refused from the store's answer (cold), then
  // from the cache of unknown keys, inside the request handler (warm).
  const unknown = `agk_${'A'.repeat(40)}`;
  for (const round of ['cold', 'cached']) {
    const res = await rawExchange(service.port, `POST /proxy/${unknown}/${upstream.authority}/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: ${5 + smuggled(`unk-${round}`).length}\r\n\r\nhello${smuggled(`unk-${round}`)}`);
    assertRefusedAndClosed(t, `unknown key (${round}), two lengths`, res, `unk-${round}`);
  }
  await stillServes(t);
});

t.test('a header value the upstream client refuses (obs-text, DEL) is 400 invalid_request, not a 502, and not forwarded', async (t) => {
  const cases: Record<string, Buffer> = {
    'obs-text (latin1 é)': Buffer.concat([Buffer.from(`GET ${PROXY}/marker-obs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Name: caf`), Buffer.from([0xe9]), Buffer.from('s\r\n\r\n')]),
    'a DEL character': Buffer.from(`GET ${PROXY}/marker-del HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Name: a\x7fb\r\n\r\n`, 'latin1'),
  };
  for (const [what, bytes] of Object.entries(cases)) {
    const res = await rawExchange(service.port, bytes, { maxMs: 1500 });
    t.same(res.statuses, [400], `${what}: 400 (${res.text.slice(-160)})`);
    t.match(res.text, /"error":"invalid_request"/);
    t.match(res.text, /x-name/, 'the message names the header');
  }
  t.notOk(reached('obs') || reached('del'), 'nothing upstream');
  await stillServes(t);
});

t.test('an oversized head is 431 (or refused by the parser), without contacting upstream', async (t) => {
  const big = (n: number) => `X-Big: ${'a'.repeat(n)}\r\n`;
  // Answered connections stay open (keep-alive): each waits out maxMs, so all at once.
  const [proxy, admin, many, huge] = await Promise.all([
    rawExchange(service.port, `GET ${PROXY}/marker-head HTTP/1.1\r\nHost: x\r\n${big(20_000)}\r\n`, { maxMs: 1500 }),
    rawExchange(service.port, `GET /agents HTTP/1.1\r\nHost: x\r\n${AUTH}${big(20_000)}\r\n`, { maxMs: 1500 }),
    rawExchange(service.port, `GET ${PROXY}/marker-head-many HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 40 }, (_, i) => `X-H${i}: ${'b'.repeat(500)}\r\n`).join('')}\r\n`, { maxMs: 1500 }),
    rawExchange(service.port, `GET ${PROXY}/marker-head-huge HTTP/1.1\r\nHost: x\r\n${big(200_000)}\r\n`, { maxMs: 3000 }),
  ]);
  t.same(proxy.statuses, [431], 'proxy: 431');
  t.match(proxy.text, /"error":"headers_too_large"/);
  t.same(admin.statuses, [431], 'admin: 431');
  t.same(many.statuses, [431], 'many mid-sized fields adding up past 16 KiB: 431');
  t.ok(huge.statuses.length === 0 ? huge.closed : huge.statuses.every((s) => s === 431 || s === 400), `200 KB head: 400/431 or closed (${JSON.stringify(huge.statuses)}, closed ${huge.closed})`);
  for (const m of ['head', 'head-many', 'head-huge']) t.notOk(reached(m), `${m}: nothing upstream`);
  await stillServes(t);
});

t.test('an oversized URL is 414, proxy and admin, without contacting upstream', async (t) => {
  const long = 'a'.repeat(9000);
  const [proxyPath, proxyQuery, admin] = await Promise.all([
    rawExchange(service.port, `GET ${PROXY}/marker-url/${long} HTTP/1.1\r\nHost: x\r\n\r\n`, { maxMs: 1500 }),
    rawExchange(service.port, `GET ${PROXY}/marker-urlq?q=${long} HTTP/1.1\r\nHost: x\r\n\r\n`, { maxMs: 1500 }),
    rawExchange(service.port, `GET /audit?tool_name=${long} HTTP/1.1\r\nHost: x\r\n${AUTH}\r\n`, { maxMs: 1500 }),
  ]);
  t.same(proxyPath.statuses, [414], 'proxy path: 414');
  t.match(proxyPath.text, /"error":"uri_too_long"/);
  t.same(proxyQuery.statuses, [414], 'proxy query: 414');
  t.same(admin.statuses, [414], 'admin: 414');
  t.notOk(reached('url') || reached('urlq'), 'nothing upstream');
  await stillServes(t);
});

t.test('an oversized admin body is 413 and the connection closed; bytes inside it are never served', async (t) => {
  const declared = MAX_ADMIN_BODY_BYTES + 1;
  const head = `POST /agents HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nContent-Length: ${declared}\r\n\r\n`;
  const byLength = await rawExchange(service.port, [head, smuggled('body-1'), 'x'.repeat(64 * 1024)], { gapMs: 20 });
  t.same(byLength.statuses, [413], 'by Content-Length: 413 before the body is read');
  t.match(byLength.text, /"error":"payload_too_large"/);
  t.ok(byLength.closed, 'closed');
  const chunk = 'x'.repeat(256 * 1024);
  const chunked = await rawExchange(service.port, [
    `POST /agents HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
    ...Array.from({ length: 5 }, () => `${chunk.length.toString(16)}\r\n${chunk}\r\n`),
    `0\r\n\r\n${smuggled('body-2')}`,
  ], { gapMs: 10, maxMs: 5000 });
  t.same(chunked.statuses, [413], 'chunked: 413 once the running size passes 1 MiB');
  t.ok(chunked.closed, 'closed');
  t.notOk(reached('body-1') || reached('body-2'), 'nothing inside the refused bodies was served');
  const agents = await fetch(`${base}/agents`, { headers: owner.auth });
  t.notOk(((await agents.json()) as { name: string }[]).some((a) => a.name.startsWith('x')), 'no agent came from a refused body');
  await stillServes(t);
});

t.test('obs-fold, a NUL, a bare CR or LF, too many fields: nothing reaches upstream, the connection ends without a 2xx', async (t) => {
  const results = await stalling;
  for (const [name, res] of results) {
    t.notOk(ok2xx(res), `${name}: no 2xx (${JSON.stringify(res.statuses)})`);
    t.ok(res.closed, `${name}: closed (after ${Math.round(res.elapsedMs)} ms)`);
    t.notOk(reached(MARKERS[name]!), `${name}: nothing reached upstream`);
  }
  t.notOk(reached('fold-admin') || upstream.seen.some((s) => 'x-injected' in s.headers), 'no injected header or pipelined request got through');
  await stillServes(t);
});
