// Long-lived streams through the proxy: an event stream's head arrives before
// its first event; an idle event stream outlives the ordinary body timeout; and
// shutdown with a stream open ends it as a complete response, audits it and
// exits 0 within the drain deadline plus a second. Real processes, real HTTPS upstream.
import { mkdtempSync, rmSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { createGzip } from 'node:zlib';
import { join } from 'node:path';
import t from 'tap';
import { eventually } from '../support/eventually.js';
import { api, createAgent, login, signup, TLS_DIR } from '../support/service.js';
import { spawnService } from '../support/spawn-service.js';
import { splitModeEnv } from '../support/split-mode.js';
import { startUpstream, unfinishedJson, type Route } from '../support/upstream.js';

// Node sends a head only with the first body bytes unless flushed: an SSE server flushes it.
const sse = (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' }).flushHeaders();
const routes: Record<string, Route> = {
  // Head at once, first event after 1.5 s, then the end.
  '/late': (_req, res) => {
    sse(res);
    setTimeout(() => res.end('data: late\n\n'), 1500);
  },
  // A chunked JSON body still being written (an export): at shutdown it must look cut, not complete.
  '/unfinished-json': unfinishedJson,
  // A compressed event stream (compression middleware that flushes each event): one event now, the end in 1.5 s.
  '/gzip-events': (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' });
    const gzip = createGzip();
    gzip.pipe(res);
    gzip.write('data: one\n\n');
    gzip.flush();
    setTimeout(() => gzip.end('data: two\n\n'), 1500);
  },
  // One event, then quiet forever (as an MCP GET stream between messages).
  '/forever': (req, res) => {
    sse(res);
    res.write('data: hello\n\n');
    req.socket.on('close', () => res.destroy());
  },
};
const upstream = await startUpstream(routes);
const dir = mkdtempSync(join(tmpdir(), 'tcg-streams-'));
const env = {
  DATA_DIR: dir,
  PORT: '0',
  GUARD_ALLOW_TARGETS: '127.0.0.1',
  NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'),
  UPSTREAM_BODY_TIMEOUT_MS: '500',
  UPSTREAM_STREAM_IDLE_MS: '5000',
  SHUTDOWN_DRAIN_MS: '1000',
};
t.teardown(async () => {
  await upstream.close();
  rmSync(dir, { recursive: true, force: true });
});

const service = await spawnService('all-in-one', env);
const owner = await signup(service.url);
const agent = await createAgent(service.url, owner, 'streams', 'full');
const url = (path: string) => `${service.url}/proxy/${agent.api_key}/${upstream.authority}${path}`;

t.test('an event stream\'s head arrives before its first event, and the event after', async (t) => {
  const started = performance.now();
  const res = await fetch(url('/late'), { headers: { accept: 'text/event-stream' } });
  const headAfter = performance.now() - started;
  t.equal(res.status, 200);
  t.ok(headAfter < 1000, `head after ${headAfter.toFixed(0)} ms, not with the event at 1,500 ms`);
  t.equal(await res.text(), ':\ndata: late\n\n', 'an SSE comment line, then the upstream\'s bytes');
});

t.test('a compressed event stream passes as it came: its first event at once, and nothing written into its bytes', async (t) => {
  const started = performance.now();
  const res = await fetch(url('/gzip-events'), { headers: { accept: 'text/event-stream', 'accept-encoding': 'gzip' } });
  const reader = res.body!.getReader();
  const first = await reader.read().then((r) => Buffer.from(r.value!).toString(), (err: Error) => `error: ${err.message}`);
  t.equal(first, 'data: one\n\n', 'the first event, decoded');
  t.ok(performance.now() - started < 1200, `before the stream's end (${(performance.now() - started).toFixed(0)} ms)`);
  let rest = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    rest += Buffer.from(value).toString();
  }
  t.equal(rest, 'data: two\n\n');
});

t.test('an idle event stream outlives UPSTREAM_BODY_TIMEOUT_MS; an ordinary body does not', async (t) => {
  const stream = await fetch(url('/late'), { headers: { accept: 'text/event-stream' } });
  t.equal(await stream.text(), ':\ndata: late\n\n', '1.5 s of silence is within UPSTREAM_STREAM_IDLE_MS (5 s): complete');
  const ordinary = await fetch(url('/late')).then((r) => r.text()).then(() => 'complete', () => 'cut');
  t.equal(ordinary, 'cut', 'without Accept: text/event-stream the 500 ms body timeout applies');
});

t.test('SIGTERM with an event stream open: the stream ends complete, the call is audited, exit 0 in time', async (t) => {
  const res = await fetch(url('/forever'), { headers: { accept: 'text/event-stream' } });
  const reader = res.body!.getReader();
  let text = Buffer.from((await reader.read()).value!).toString();
  const json = await fetch(url('/unfinished-json'));
  const jsonRead = json.text().then(() => 'complete', () => 'cut');
  const started = performance.now();
  service.child.kill('SIGTERM');
  for (;;) {
    const { done, value } = await reader.read(); // throws if the stream is cut instead of ended
    if (done) break;
    text += Buffer.from(value).toString();
  }
  t.match(text, /data: hello\n\n$/, 'the client read the stream to a clean end');
  t.equal(await jsonRead, 'cut', 'a chunked body that is no event stream is cut, not ended as if complete');
  t.equal(await service.exited, 0, 'exit 0');
  const took = performance.now() - started;
  t.ok(took < 1000 + 2000, `exited ${took.toFixed(0)} ms after SIGTERM (drain 1,000 ms)`);

  const again = await spawnService('all-in-one', env);
  const rows = (await api(again.url, await login(again.url, owner.email), 'GET', `/audit?agent_id=${agent.id}`)).json as any[];
  const entry = rows.find((r) => r.tool_url.endsWith('/forever'));
  t.ok(entry, 'the stream\'s entry is in the audit log after the restart');
  t.equal(entry?.status_code, 200, 'with the upstream\'s status');
  t.equal(entry?.response_bytes, 'data: hello\n\n'.length, 'and the bytes it carried');
  t.ok(entry?.latency_ms >= 900, `its real lifetime (${entry?.latency_ms} ms)`);
  t.equal(await again.stop(), 0);
});

t.test('split mode: a proxy stopped with an event stream open ends it complete and its entry reaches ClickHouse', async (t) => {
  const common = await splitModeEnv(t, dir, env);
  const admin = await spawnService('admin', { ...common, SPOOL_DIR: join(dir, 'spool-admin') });
  t.teardown(() => admin.stop());
  const proxy = await spawnService('proxy', { ...common, ADMIN_URL: admin.url, SPOOL_DIR: join(dir, 'spool-proxy') });
  const owner = await signup(proxy.url);
  const agent = await createAgent(proxy.url, owner, 'split-stream', 'none');
  const res = await fetch(`${proxy.url}/proxy/${agent.api_key}/${upstream.authority}/forever`, { headers: { accept: 'text/event-stream' } });
  const reader = res.body!.getReader();
  await reader.read();
  const started = performance.now();
  proxy.child.kill('SIGTERM');
  while (!(await reader.read()).done); // throws if cut
  t.equal(await proxy.exited, 0, 'the proxy exits 0');
  t.ok(performance.now() - started < 3000, 'within the drain (1 s) and a second or so');
  const rows = await eventually(async () => {
    const page = (await api(admin.url, owner, 'GET', `/audit?agent_id=${agent.id}`)).json as any[];
    return page.length > 0 ? page : undefined;
  });
  t.equal(rows[0].status_code, 200, 'its entry, with the upstream\'s status');
});
