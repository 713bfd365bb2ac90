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
import { openSse } from '../support/sse-client.js';
import { startSplitDeployment } from '../support/split-mode.js';
import { startUpstream, type Route } from '../support/upstream.js';

const sse = (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' }).flushHeaders();
const routes: Record<string, Route> = {
  // One event, then quiet until the client goes (an MCP GET stream between messages).
  '/forever': (req, res) => {
    sse(res);
    res.write('data: hello\n\n');
    req.socket.on('close', () => res.destroy());
  },
  // A chunked JSON body that never ends.
  '/unfinished-json': (req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"items":[');
    const more = setInterval(() => res.write('1,'), 100);
    req.socket.on('close', () => {
      clearInterval(more);
      res.destroy();
    });
  },
  // Takes the request and never answers.
  '/no-answer': (req, res) => {
    req.socket.on('close', () => res.destroy());
  },
};
const upstream = await startUpstream(routes);
// Uploads the upstream began to receive, and how each ended (the routes see only finished ones).
const uploads: { ended: boolean; closed: boolean }[] = [];
upstream.server.on('request', (req: IncomingMessage) => {
  if (req.url !== '/upload') return;
  const upload = { ended: false, closed: false };
  uploads.push(upload);
  req.on('end', () => (upload.ended = true));
  req.on('close', () => (upload.closed = true));
});
t.teardown(() => upstream.close());

/** A POST of `total` bytes of which only the first 64 KiB are sent: its status, or 'closed' when the connection ends unanswered. */
function startUpload(url: string, total: number): Promise<number | 'closed'> {
  return new Promise((resolve) => {
    const req = httpRequest(url, { method: 'POST', headers: { 'content-length': String(total), 'content-type': 'application/octet-stream' } });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', () => resolve('closed'));
    req.write(Buffer.alloc(64 * 1024, 1));
  });
}

/** Reads a response's body to its end: 'complete', or 'cut' when the connection ends first. */
const readToEnd = (res: Response) => res.text().then(() => 'complete', () => 'cut');

t.test('all-in-one: deleting an agent ends each of its calls in flight, audited; another agent\'s stream goes on', async (t) => {
  const service = await startTestService({ UPSTREAM_BODY_TIMEOUT_MS: '60000', UPSTREAM_HEADERS_TIMEOUT_MS: '60000', UPSTREAM_STREAM_IDLE_MS: '60000' });
  t.teardown(() => service.close());
  const owner = await signup(service.url);
  const doomed = await createAgent(service.url, owner, 'doomed', 'full');
  const other = await createAgent(service.url, owner, 'other', 'none');
  const url = (agent: { api_key: string }, path: string) => `${service.url}/proxy/${agent.api_key}/${upstream.authority}${path}`;

  const stream = await openSse(url(doomed, '/forever'), {});
  const otherStream = await openSse(url(other, '/forever'), {});
  t.ok(await stream.nextEvent(undefined, 5000), 'the doomed agent\'s stream carries its first event');
  t.ok(await otherStream.nextEvent(undefined, 5000), 'so does the other agent\'s');
  const json = await fetch(url(doomed, '/unfinished-json'));
  t.equal(json.status, 200);
  const jsonRead = readToEnd(json);
  const waiting = fetch(url(doomed, '/no-answer'));
  const upload = startUpload(url(doomed, '/upload'), 1024 * 1024);
  await eventually(async () => (upstream.seen.some((r) => r.url === '/no-answer') && uploads.length === 1 ? true : undefined));

  const started = performance.now();
  t.equal((await api(service.url, owner, 'DELETE', `/agents/${doomed.id}`)).status, 204);
  t.ok(await stream.ended(2000), 'the event stream ends (complete: the client reconnects, and its key is refused)');
  t.equal(await jsonRead, 'cut', 'a chunked body still coming is cut, not ended as if complete');
  const answered = await waiting;
  t.equal(answered.status, 401, 'a call waiting for its upstream is answered 401');
  t.same(await answered.json(), { error: 'invalid_api_key', message: 'The agent API key is unknown or revoked.' });
  t.equal(await upload, 401, 'an upload still arriving is answered 401 too');
  const took = performance.now() - started;
  t.ok(took < 2000, `all within ${took.toFixed(0)} ms of the delete`);
  await eventually(async () => (uploads[0]!.closed ? true : undefined));
  t.notOk(uploads[0]!.ended, 'the upstream never got the whole upload: its request was aborted');
  t.equal((await fetch(url(doomed, '/forever'), { headers: { accept: 'text/event-stream' } })).status, 401, 'a reconnect is refused');

  t.equal(await otherStream.ended(300), false, 'the other agent\'s stream is still open');
  otherStream.close();

  const rows = await eventually(async () => {
    const page = (await api(service.url, owner, 'GET', `/audit?agent_id=${doomed.id}`)).json as any[];
    return page.length >= 4 ? page : undefined;
  });
  const byPath = (path: string) => rows.find((r) => new URL(r.tool_url).pathname === path);
  t.match(byPath('/forever'), { status_code: 200, decision: 'allowed', output: 'data: hello\n\n' }, 'the stream: the upstream\'s status and what it carried');
  t.match(byPath('/unfinished-json'), { status_code: 200, decision: 'allowed' }, 'the cut body: the upstream\'s status');
  t.match(byPath('/no-answer'), { status_code: 401, decision: 'allowed' }, 'the waiting call: sent upstream, so allowed, answered 401');
  t.match(byPath('/upload'), { status_code: 401, decision: 'allowed' }, 'the upload: its first bytes went upstream');
});

t.test('split mode: a proxy ends a deleted agent\'s event stream once the change log tells it', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tcg-agent-deleted-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const split = await startSplitDeployment(root, { GUARD_ALLOW_TARGETS: '127.0.0.1', NODE_EXTRA_CA_CERTS: new URL('../fixtures/tls/ca.crt', import.meta.url).pathname, UPSTREAM_STREAM_IDLE_MS: '60000' });
  t.teardown(() => split.close());
  const proxy = await spawnService('proxy', split.proxyEnv('p1'));
  t.teardown(() => proxy.stop());
  const owner = await signup(split.admin.url);
  const agent = await createAgent(split.admin.url, owner, 'split-doomed', 'none');
  const stream = await openSse(`${proxy.url}/proxy/${agent.api_key}/${upstream.authority}/forever`, {});
  t.ok(await stream.nextEvent(undefined, 5000), 'the stream carries its first event');
  t.equal((await api(split.admin.url, owner, 'DELETE', `/agents/${agent.id}`)).status, 204, 'deleted through the admin process');
  t.ok(await stream.ended(3000), 'the proxy ends the stream (CHANGE_POLL_MS 250 ms)');
  const rows = await eventually(async () => {
    const page = (await api(split.admin.url, owner, 'GET', `/audit?agent_id=${agent.id}`)).json as any[];
    return page.length > 0 ? page : undefined;
  });
  t.equal(rows[0].status_code, 200, 'its entry reaches ClickHouse, with the upstream\'s status');
});
