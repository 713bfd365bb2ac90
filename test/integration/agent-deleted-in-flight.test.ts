// Deleting an agent ends its calls in flight (docs/api.md, DELETE /agents): an
// event stream (an MCP session's GET) ends, a chunked body still coming is cut,
// a call waiting for its upstream and an upload still arriving are answered 401
// with their upstream request aborted; each is audited; another agent's stream
// goes on. All-in-one in this process, and a split-mode proxy, which hears of
// the deletion through the change log. Real HTTPS upstream.
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { api, createAgent, eventually, signup, startTestService } from '../support/service.js';
import { spawnService } from '../support/spawn-service.js';
import { startSplitDeployment } from '../support/split-mode.js';
import { startUpstream, unfinishedJson, type Route } from '../support/upstream.js';

/** Resolves once the guard at `base` has at least `n` proxied calls under way (its /metrics gauge). */
async function callsUnderWay(base: string, n: number): Promise<void> {
  await eventually(async () => {
    const text = await (await fetch(`${base}/metrics`)).text();
    const m = /^tcg_proxy_in_flight (\d+)/m.exec(text);
    return m !== null && Number(m[1]) >= n ? true : undefined;
  });
}

const sse = (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' }).flushHeaders();
const routes: Record<string, Route> = {
  // One event, then quiet until the client goes (an MCP GET stream between messages).
  '/forever': (req, res) => {
    sse(res);
    res.write('data: hello\n\n');
    req.socket.on('close', () => res.destroy());
  },
  // A chunked JSON body that never ends.
  '/unfinished-json': unfinishedJson,
  // Takes the request and never answers.
  '/no-answer': (req, res) => {
    req.socket.on('close', () => res.destroy());
  },
  // An event stream with a Content-Length (a buffered answer to a POST) that has not all come: the guard sends it chunked, so it can end complete.
  '/sse-with-length': (req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'content-length': '1000' });
    res.write('data: a\n\n');
    req.socket.on('close', () => res.destroy());
  },
};
const upstream = await startUpstream(routes);
// Uploads the upstream began to receive, and how each ended (the routes see only finished ones).
const uploads: { ended: boolean; closed: boolean }[] = [];
/** The upstream's side of the call that never gets an answer closed (the guard aborted it). */
let noAnswerClosed = false;
upstream.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
  if (req.url === '/no-answer') res.on('close', () => (noAnswerClosed = true));
  if (req.url !== '/upload') return;
  const upload = { ended: false, closed: false };
  uploads.push(upload);
  req.on('end', () => (upload.ended = true));
  req.on('close', () => (upload.closed = true));
});
t.teardown(() => upstream.close());

/**
 * A POST of `pieces` × `piece` bytes, one piece every 100 ms (the first at
 * once), which would reach its end unless stopped: its status, or 'closed'
 * when the connection ends unanswered.
 */
function startUpload(url: string, piece: number, pieces: number): Promise<number | 'closed'> {
  return new Promise((resolve) => {
    const req = httpRequest(url, { method: 'POST', headers: { 'content-length': String(piece * pieces), 'content-type': 'application/octet-stream' } });
    let sent = 0;
    const send = () => {
      if (req.destroyed) return;
      req.write(Buffer.alloc(piece, 1));
      if (++sent === pieces) req.end();
      else setTimeout(send, 100);
    };
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', () => resolve('closed'));
    send();
  });
}

/** Reads a response's body to its end: 'complete', or 'cut' when the connection ends first. */
const readToEnd = (res: Response) => res.text().then(() => 'complete', () => 'cut');

/** Reads an event stream until its first event has come; then the rest of it, to 'complete' or 'cut'. */
async function openStream(url: string): Promise<{ rest: Promise<string> }> {
  const res = await fetch(url, { headers: { accept: 'text/event-stream' } });
  if (res.status !== 200) throw new Error(`stream answered ${res.status}: ${await res.text()}`);
  const reader = res.body!.getReader();
  let text = '';
  while (!text.includes('\n\n')) {
    const { done, value } = await reader.read();
    if (done) throw new Error('the stream ended before its first event');
    text += Buffer.from(value).toString();
  }
  const rest = (async () => {
    try {
      while (!(await reader.read()).done);
      return 'complete';
    } catch {
      return 'cut';
    }
  })();
  return { rest };
}

/** Whether `promise` settles within `ms`. */
const settlesWithin = (promise: Promise<unknown>, ms: number) => Promise.race([promise.then(() => true), new Promise<boolean>((resolve) => setTimeout(resolve, ms, false))]);
/** What `promise` gives, or 'still open' after `ms`: a call the guard fails to end fails the test, not tap's timeout. */
const within = <T>(promise: Promise<T>, ms = 5000) => Promise.race([promise, new Promise<'still open'>((resolve) => setTimeout(resolve, ms, 'still open'))]);

t.test('all-in-one: deleting an agent ends each of its calls in flight, audited; another agent\'s stream goes on', async (t) => {
  const service = await startTestService({ UPSTREAM_BODY_TIMEOUT_MS: '60000', UPSTREAM_HEADERS_TIMEOUT_MS: '60000', UPSTREAM_STREAM_IDLE_MS: '60000' });
  t.teardown(() => service.close());
  const owner = await signup(service.url);
  const doomed = await createAgent(service.url, owner, 'doomed', 'full');
  const other = await createAgent(service.url, owner, 'other', 'none');
  const url = (agent: { api_key: string }, path: string) => `${service.url}/proxy/${agent.api_key}/${upstream.authority}${path}`;

  const stream = await openStream(url(doomed, '/forever'));
  const otherStream = await openStream(url(other, '/forever'));
  const withLength = await openStream(url(doomed, '/sse-with-length'));
  const json = await fetch(url(doomed, '/unfinished-json'));
  t.equal(json.status, 200);
  const jsonRead = readToEnd(json);
  const waiting = fetch(url(doomed, '/no-answer'), { signal: AbortSignal.timeout(10_000) });
  // 64 KiB pieces stream upstream as they come; a small body waits whole in the guard before it is sent.
  const upload = startUpload(url(doomed, '/upload'), 64 * 1024, 20);
  const small = startUpload(url(doomed, '/small'), 1000, 20);
  await eventually(async () => (upstream.seen.some((r) => r.url === '/no-answer') && uploads.length === 1 ? true : undefined));
  await callsUnderWay(service.url, 7); // the small upload too, held whole at the guard

  const started = performance.now();
  t.equal((await api(service.url, owner, 'DELETE', `/agents/${doomed.id}`)).status, 204);
  t.equal(await within(stream.rest), 'complete', 'the event stream ends as a complete response (its client reconnects, and its key is refused)');
  t.equal(await within(withLength.rest), 'complete', 'an event stream with a Content-Length goes chunked (its endpoint events are watched): it ends complete too');
  t.equal(await within(jsonRead), 'cut', 'a chunked body still coming is cut, not ended as if complete');
  const answered = await waiting;
  t.equal(answered.status, 401, 'a call waiting for its upstream is answered 401');
  t.same(await answered.json(), { error: 'invalid_api_key', message: 'The agent API key is unknown or revoked.' });
  t.ok(await eventually(async () => (noAnswerClosed ? true : undefined), 2000), 'and its upstream request is aborted, not left to UPSTREAM_HEADERS_TIMEOUT_MS');
  t.equal(await within(upload), 401, 'an upload still arriving is answered 401');
  t.equal(await within(small), 401, 'so is a small body still arriving');
  const took = performance.now() - started;
  t.ok(took < 5000, `all within ${took.toFixed(0)} ms of the delete`);
  await eventually(async () => (uploads[0]!.closed ? true : undefined));
  await new Promise((resolve) => setTimeout(resolve, 2500)); // past when the client would have sent its last piece
  t.notOk(uploads[0]!.ended, 'the upstream never got the whole upload: its request was aborted');
  t.notOk(upstream.seen.some((r) => r.url === '/small'), 'nor anything of the small body');
  t.equal((await fetch(url(doomed, '/forever'), { headers: { accept: 'text/event-stream' } })).status, 401, 'a reconnect is refused');

  t.equal(await settlesWithin(otherStream.rest, 300), false, 'the other agent\'s stream is still open');

  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${doomed.id}`)).json as any[];
    return page.length >= 6 ? page : undefined;
  });
  const byPath = (path: string) => rows.find((r) => new URL(r.tool_url).pathname === path);
  t.match(byPath('/forever'), { status_code: 200, decision: 'allowed', output: 'data: hello\n\n' }, 'the stream: the upstream\'s status and what it carried');
  t.match(byPath('/sse-with-length'), { status_code: 200, decision: 'allowed' }, 'the stream with a length: the upstream\'s status');
  t.match(byPath('/unfinished-json'), { status_code: 200, decision: 'allowed' }, 'the cut body: the upstream\'s status');
  t.match(byPath('/no-answer'), { status_code: 401, decision: 'allowed', output: null }, 'the waiting call: sent upstream, so allowed, answered 401');
  t.match(byPath('/upload'), { status_code: 401, decision: 'allowed' }, 'the upload: its first bytes went upstream');
  t.match(byPath('/small'), { status_code: 401, decision: 'denied' }, 'the small body: nothing went upstream, so refused here');
});

t.test('a call still queued for an upstream connection when its agent is deleted is audited denied: nothing reached the tool', async (t) => {
  // One connection per origin: the second call waits in the pool's queue behind the first, which never gets an answer.
  const queued = await startUpstream(routes);
  t.teardown(() => queued.close());
  const service = await startTestService({ UPSTREAM_CONNECTIONS: '1', UPSTREAM_HEADERS_TIMEOUT_MS: '60000' });
  t.teardown(() => service.close());
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'queued', 'none');
  const url = (path: string) => `${service.url}/proxy/${agent.api_key}/${queued.authority}${path}`;
  const first = fetch(url('/no-answer'), { signal: AbortSignal.timeout(10_000) });
  await eventually(async () => (queued.seen.some((r) => r.url === '/no-answer') ? true : undefined));
  const second = fetch(url('/no-answer?second'), { signal: AbortSignal.timeout(10_000) });
  await callsUnderWay(service.url, 2); // at the guard, in the pool's queue
  t.equal((await api(service.url, owner, 'DELETE', `/agents/${agent.id}`)).status, 204);
  t.equal((await first).status, 401);
  t.equal((await second).status, 401);
  t.notOk(queued.seen.some((r) => r.url === '/no-answer?second'), 'the queued call never reached the tool');
  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${agent.id}`)).json as any[];
    return page.length >= 2 ? page : undefined;
  });
  t.match(rows.find((r) => r.tool_url.endsWith('/no-answer')), { status_code: 401, decision: 'allowed' }, 'the first: sent upstream');
  t.match(rows.find((r) => r.tool_url.endsWith('?second')), { status_code: 401, decision: 'denied' }, 'the queued one: refused here');
});

t.test('split mode: a proxy ends a deleted agent\'s event stream once the change log tells it', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tcg-agent-deleted-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const split = await startSplitDeployment(root, { PORT: '0', GUARD_ALLOW_TARGETS: '127.0.0.1', NODE_EXTRA_CA_CERTS: new URL('../fixtures/tls/ca.crt', import.meta.url).pathname, UPSTREAM_STREAM_IDLE_MS: '60000' });
  t.teardown(() => split.close());
  const proxy = await spawnService('proxy', split.proxyEnv('p1'));
  t.teardown(() => proxy.stop());
  const owner = await signup(split.admin.url);
  const agent = await createAgent(split.admin.url, owner, 'split-doomed', 'none');
  const stream = await openStream(`${proxy.url}/proxy/${agent.api_key}/${upstream.authority}/forever`);
  t.equal((await api(split.admin.url, owner, 'DELETE', `/agents/${agent.id}`)).status, 204, 'deleted through the admin process');
  t.equal(await settlesWithin(stream.rest, 3000), true, 'the proxy ends the stream (CHANGE_POLL_MS 250 ms)');
  t.equal(await stream.rest, 'complete', 'as a complete response');
  const rows = await eventually(async () => {
    const page = (await api(split.admin.url, owner, 'GET', `/audit?agent_id=${agent.id}`)).json as any[];
    return page.length > 0 ? page : undefined;
  });
  t.equal(rows[0].status_code, 200, 'its entry reaches ClickHouse, with the upstream\'s status');
});

t.test('split mode: a proxy draining for shutdown still ends a deleted agent\'s calls', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tcg-agent-deleted-drain-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const split = await startSplitDeployment(root, { PORT: '0', GUARD_ALLOW_TARGETS: '127.0.0.1', NODE_EXTRA_CA_CERTS: new URL('../fixtures/tls/ca.crt', import.meta.url).pathname, UPSTREAM_STREAM_IDLE_MS: '60000' });
  t.teardown(() => split.close());
  const proxy = await spawnService('proxy', { ...split.proxyEnv('p1'), SHUTDOWN_DRAIN_MS: '20000' });
  t.teardown(() => proxy.stop());
  const owner = await signup(split.admin.url);
  const agent = await createAgent(split.admin.url, owner, 'drain-doomed', 'none');
  const res = await fetch(`${proxy.url}/proxy/${agent.api_key}/${upstream.authority}/unfinished-json`);
  t.equal(res.status, 200);
  const download = readToEnd(res);
  // SIGTERM: the proxy stops taking calls and lets this one go on, for up to 20 s.
  const exited = proxy.stop();
  await new Promise((r) => setTimeout(r, 300));
  t.equal((await api(split.admin.url, owner, 'DELETE', `/agents/${agent.id}`)).status, 204, 'deleted through the admin process while the proxy drains');
  t.equal(await within(download, 5000), 'cut', 'the download is cut (CHANGE_POLL_MS 250 ms), not left to the drain\'s 20 s');
  t.equal(await within(exited, 5000), 0, 'and the proxy, with nothing left in flight, exits');
});
