// Operability: /metrics, canonical log lines and request ids, /ready, /openapi.json.
import t from 'tap';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect as netConnect } from 'node:net';
import { join } from 'node:path';
import { api, createAgent, eventually, signup, startTestService } from '../support/service.js';
import { spawnServiceInTempDir, startRefused } from '../support/spawn-service.js';
import { startUpstream } from '../support/upstream.js';

const METRICS_TOKEN = 'metrics-token-0123456789';
const upstream = await startUpstream();
const service = await startTestService({ METRICS_TOKEN, LOG_REQUEST_SAMPLE: '1', LOG_LEVEL: 'info' });
const base = service.url;
t.teardown(async () => {
  await service.close();
  await upstream.close();
});
const owner = await signup(base);
const agent = await createAgent(base, owner, 'observed', 'hash');
const canary = 'canary-metrics-secret-77';
await api(base, owner, 'POST', '/credentials', { name: 'tok', hostname: upstream.authority, cred_type: 'bearer', value: canary });

async function scrape(): Promise<string> {
  const res = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  if (res.status !== 200) throw new Error(`metrics: ${res.status}`);
  return res.text();
}

function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}

t.test('GET /metrics needs the bearer token when one is configured', async (t) => {
  t.equal((await fetch(`${base}/metrics`)).status, 401);
  t.equal((await fetch(`${base}/metrics`, { headers: { authorization: 'Bearer wrong-token-000000000' } })).status, 401);
  const res = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type') ?? '', /text\/plain/);
});

t.test('metrics count proxied calls by decision, method and status class, with no unbounded label', async (t) => {
  const before = await scrape();
  for (let i = 0; i < 3; i++) await (await fetch(`${base}/proxy/${agent.api_key}/${upstream.authority}/json?secret-path=1`)).text();
  await (await fetch(`${base}/proxy/${agent.api_key}/${upstream.authority}/status?code=404`)).text();
  await (await fetch(`${base}/proxy/${agent.api_key}/127.0.0.2:1/x`)).text(); // target_forbidden
  const after = await eventually(async () => {
    const text = await scrape();
    return sample(text, 'tcg_audit_rows_written_total') >= sample(before, 'tcg_audit_rows_written_total') + 5 ? text : undefined;
  });
  const delta = (name: string, labels: Record<string, string> = {}) => sample(after, name, labels) - sample(before, name, labels);
  t.equal(delta('tcg_proxy_requests_total', { decision: 'allowed', method: 'GET', status_class: '2xx' }), 3);
  t.equal(delta('tcg_proxy_requests_total', { decision: 'allowed', method: 'GET', status_class: '4xx' }), 1);
  t.equal(delta('tcg_proxy_requests_total', { decision: 'denied', method: 'GET', status_class: '4xx' }), 1);
  t.ok(delta('tcg_cache_hits_total', { cache: 'agents' }) >= 4, 'warm key lookups are cache hits');
  t.ok(sample(after, 'tcg_proxy_request_duration_seconds_count') >= 5);
  t.ok(sample(after, 'tcg_proxy_upstream_latency_seconds_count') >= 4);
  t.ok(delta('tcg_proxy_response_bytes_total') > 0);
  t.ok(sample(after, 'tcg_audit_batch_rows_count') >= 1, 'batch sizes observed');
  t.ok(sample(after, 'tcg_process_cpu_user_seconds_total') > 0, 'process metrics');
  for (const leak of [agent.api_key, agent.api_key.slice(0, 12), agent.id, canary, 'secret-path', upstream.authority]) {
    t.notOk(after.includes(leak), `no label carries ${leak.slice(0, 16)}`);
  }
});

t.test('one canonical log line per proxied call; the key appears by prefix only; request ids travel', async (t) => {
  const requestId = 'req-0123456789abcdef';
  const res = await fetch(`${base}/proxy/${agent.api_key}/${upstream.authority}/echo/logged`, { headers: { 'x-request-id': requestId } });
  const echoed = (await res.json()) as any;
  t.equal(echoed.headers['x-request-id'], requestId, 'propagated to the upstream');
  const res2 = await fetch(`${base}/proxy/${agent.api_key}/${upstream.authority}/echo/generated`);
  const generated = ((await res2.json()) as any).headers['x-request-id'];
  t.match(generated, /^[0-9a-f-]{36}$/, 'added when absent');
  const rows = await eventually(async () => {
    const list = (await api(base, owner, 'GET', `/audit?agent_id=${agent.id}&limit=1000`)).json as any[];
    return list.some((r) => r.request_id === generated) && list.some((r) => r.request_id === requestId) ? list : undefined;
  });
  t.ok(rows.find((r) => r.request_id === requestId).tool_url.endsWith('/echo/logged'), 'the audit record carries the request id');
  const lines = service.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'proxied');
  const line = lines.find((l) => l.request_id === requestId);
  t.ok(line, 'a canonical line for the call');
  t.equal(line.level, 'info');
  t.equal(line.key_prefix, agent.api_key.slice(0, 12));
  t.equal(line.status, 200);
  t.equal(line.tool, '127.0.0.1');
  t.ok(typeof line.latency_ms === 'number' && typeof line.upstream_ms === 'number');
  const all = service.logs.join('\n');
  t.notOk(all.includes(agent.api_key), 'the full key never appears in the logs');
  t.notOk(all.includes(canary), 'the credential never appears in the logs');
});

t.test('GET /ready is 200 when the stores answer; /health stays a liveness check', async (t) => {
  const ready = await fetch(`${base}/ready`);
  t.equal(ready.status, 200);
  t.same(await ready.json(), { status: 'ready' });
  const health = await fetch(`${base}/health`);
  t.equal(((await health.json()) as any).status, 'ok');
});

t.test('GET /openapi.json serves the OpenAPI document', async (t) => {
  const res = await fetch(`${base}/openapi.json`);
  t.equal(res.status, 200);
  const doc = (await res.json()) as any;
  t.equal(doc.openapi, '3.1.0');
  t.ok(doc.paths['/agents'], 'documents the admin API');
});

t.test('pipelined requests for the OpenAPI document from a client that reads late each get it whole', async (t) => {
  // The document (~175 KB) is larger than uWS's cork buffer, and each answer
  // must arrive whole even when the ones before it fill the socket (uWS answers
  // pipelined requests of a synchronous route in turn; an asynchronous route's
  // are not served: uWS closes the connection). small-socket-buffers.test.ts
  // runs this where the socket fills.
  const count = 4;
  const socket = netConnect(service.port, '127.0.0.1');
  await new Promise<void>((r) => socket.once('connect', () => r()));
  socket.pause();
  socket.write('GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(count));
  await new Promise((r) => setTimeout(r, 500));
  const bodies: Buffer[] = [];
  let raw = Buffer.alloc(0);
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, 10_000);
    socket.on('data', (chunk: Buffer) => {
      raw = Buffer.concat([raw, chunk]);
      for (;;) {
        const headEnd = raw.indexOf('\r\n\r\n');
        if (headEnd < 0) break;
        const length = Number(/content-length: (\d+)/i.exec(raw.subarray(0, headEnd).toString('latin1'))?.[1] ?? NaN);
        if (!(length >= 0) || raw.length < headEnd + 4 + length) break;
        bodies.push(raw.subarray(headEnd + 4, headEnd + 4 + length));
        raw = raw.subarray(headEnd + 4 + length);
      }
      if (bodies.length === count) {
        clearTimeout(timer);
        resolve();
      }
    });
    socket.resume();
  });
  socket.destroy();
  t.equal(bodies.length, count, `${count} answers (got ${bodies.length}, ${raw.length} bytes left)`);
  t.ok(bodies.every((b) => (JSON.parse(b.toString('utf8')) as { openapi: string }).openapi === '3.1.0'), 'each the whole document');
});

t.test('METRICS_ENABLED=false: no /metrics, and the proxy still works', async (t) => {
  const quiet = await spawnServiceInTempDir(t, 'tcg-nometrics-', 'all-in-one', { METRICS_ENABLED: 'false' });
  const res = await fetch(`${quiet.url}/metrics`);
  t.equal(res.status, 404);
  t.equal(((await res.json()) as any).error, 'not_found');
  t.equal((await fetch(`${quiet.url}/health`)).status, 200);
});

t.test('all-in-one: the embedded engine\'s threads run at CHDB_THREAD_NICE, Node\'s own as started', { skip: process.platform !== 'linux' && 'thread nice values are read from /proc: Linux only' }, async (t) => {
  const service = await spawnServiceInTempDir(t, 'tcg-nice-', 'all-in-one', { CHDB_THREAD_NICE: '6' });
  const pid = service.child.pid!;
  const threads = readdirSync(`/proc/${pid}/task`).flatMap((tid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      return [{ tid, name, nice: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]) }];
    } catch {
      return []; // ended meanwhile
    }
  });
  const own = Number(readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ')[16]);
  t.equal(threads.find((x) => x.tid === String(pid))?.nice, own, 'the main thread keeps the nice value it was started with');
  t.ok(threads.filter((x) => x.name === 'node' && x.nice === own).length >= 3, 'so do Node\'s helper threads (V8\'s, libuv\'s)');
  // The engine names its threads after its pools (ThreadPool, MergeMutate, BgSchPool, ...).
  const engine = threads.filter((x) => x.name !== 'node' && !x.name.startsWith('tokio'));
  t.ok(engine.length >= 5, `the engine's threads are there (${engine.map((x) => x.name).join(', ')})`);
  t.ok(engine.every((x) => x.nice === 6), `each runs at nice 6 (${engine.map((x) => `${x.name} ${x.nice}`).join(', ')})`);
});

t.test('an open /metrics on a HOST other machines reach: the process refuses to start, before loading its stores', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-openmetrics-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // Refused before listening: nothing is bound to 0.0.0.0.
  const err = await startRefused('all-in-one', { DATA_DIR: dir, PORT: '0', HOST: '0.0.0.0' });
  t.match(err?.message ?? '', /exited with 2 before listening/);
  t.match(err?.message ?? '', /METRICS_TOKEN/, 'the message names the ways out');
  t.match(err?.message ?? '', /METRICS_PUBLIC=true/);
  t.strictSame(readdirSync(dir), [], 'no store was opened');
});

t.test('a malformed GUARD_ALLOW_TARGETS, or a spool directory the process cannot write, is refused naming it, before a store is opened', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-badallow-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // Read as the proxy was built, it came after secrets.json, the signing key, chDB and SQLite were made, and exited 1.
  const err = await startRefused('all-in-one', { DATA_DIR: dir, PORT: '0', GUARD_ALLOW_TARGETS: '127.0.0.1:8443' });
  t.match(err?.message ?? '', /exited with 2 before listening/);
  t.match(err?.message ?? '', /GUARD_ALLOW_TARGETS/, 'the message names the variable');
  t.strictSame(readdirSync(dir), [], 'no store was opened');
  // A lock file SQLite cannot open (as in a directory this user cannot write; root writes any): "unable to open database file" named neither the directory nor what to do.
  const spoolDir = join(dir, 'spool');
  mkdirSync(join(spoolDir, 'spool.lockdb'), { recursive: true });
  const spool = await startRefused('all-in-one', { DATA_DIR: join(dir, 'data'), PORT: '0', SPOOL_DIR: spoolDir });
  t.match(spool?.message ?? '', new RegExp(`audit spool ${spoolDir.replace(/[.]/g, '\\.')}: cannot open its lock file`), `the directory is named (${spool?.message.split('\n').find((l) => l.includes('spool'))})`);
});

t.test('a metrics collector that fails is answered 500 and logged; the process goes on', async (t) => {
  const { auditBatcher, pipeline } = service;
  const working = {
    auditStats: () => ({ ...auditBatcher.stats, pending: auditBatcher.pending, spooledBatches: auditBatcher.spooledBatches }),
    inFlight: () => pipeline?.inFlight ?? 0,
  };
  // A gauge whose source throws makes prom-client's metrics() reject.
  service.metrics.setSources({ ...working, inFlight: () => { throw new Error('collector broke'); } });
  t.teardown(() => service.metrics.setSources(working));
  const res = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  t.equal(res.status, 500);
  t.equal(((await res.json()) as any).error, 'internal');
  t.ok(service.logs.some((line) => line.includes('GET /metrics failed')), 'logged');
  service.metrics.setSources(working);
  t.equal((await fetch(`${base}/health`)).status, 200, 'still serving');
  t.ok((await scrape()).includes('tcg_proxy_in_flight'), 'and /metrics answers again');
});
