// server/admin-pass-through.ts against admin processes that misbehave: one that
// takes connections and never answers (its requests are bounded in number and
// in time), and one whose answer's body comes late (the deadline is the head's).
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { createAdminPassThrough, type PassThroughLimits } from '../../server/admin-pass-through.js';
import type { AdminRequest } from '../../admin/http.js';

function request(path: string): AdminRequest {
  return { method: 'GET', path, query: new URLSearchParams(), headers: {}, body: Buffer.alloc(0), remoteAddress: '127.0.0.1' };
}

/** A pass-through to the admin process `admin`, listening on a free port; both closed at the test's end. */
async function passThroughTo(t: Test, admin: HttpServer, limits: PassThroughLimits) {
  await new Promise<void>((resolve) => admin.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    admin.closeAllConnections();
    admin.close();
  });
  const { port } = admin.address() as AddressInfo;
  const passThrough = createAdminPassThrough(`http://127.0.0.1:${port}`, limits);
  t.teardown(() => passThrough.close());
  return passThrough;
}

function message(body: string | Buffer | readonly Buffer[]): string {
  const parsed = JSON.parse(Array.isArray(body) ? Buffer.concat(body).toString() : body.toString()) as { error: string; message: string };
  return `${parsed.error}: ${parsed.message}`;
}

t.test('an admin process that holds its sockets and never answers: bounded requests, each answered 503 by its deadline', async (t) => {
  const sockets = new Set<Socket>();
  const silent = createServer((socket) => {
    sockets.add(socket);
    socket.resume(); // reads every request, answers none
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const socket of sockets) socket.destroy();
    silent.close();
  });
  const { port } = silent.address() as AddressInfo;
  const passThrough = createAdminPassThrough(`http://127.0.0.1:${port}`, { answerWithinMs: 400, maxPending: 70 });
  t.teardown(() => passThrough.close());

  // 64 on the pool's connections, 6 queued behind them, 5 past the bound.
  const started = Date.now();
  const answers = await Promise.all(
    Array.from({ length: 75 }, async () => {
      const res = await passThrough.handle(request('/agents'));
      return { status: res.status, message: message(res.body), ms: Date.now() - started, retryAfter: res.headers['retry-after'] };
    }),
  );
  t.ok(answers.every((a) => a.status === 503), 'every one 503');
  t.ok(answers.every((a) => a.retryAfter === '5'), 'every one with Retry-After');
  const refused = answers.filter((a) => a.message.startsWith('unavailable: Too many admin requests'));
  const late = answers.filter((a) => a.message === 'unavailable: The admin service did not answer in time; retry later.');
  t.equal(refused.length, 5, 'past 70 waiting: refused');
  t.ok(refused.every((a) => a.ms < 300), `refused at once (${Math.max(...refused.map((a) => a.ms))} ms)`);
  t.equal(late.length, 70, 'the 70 let in: cut at their deadline, the queued ones too');
  const slowest = Math.max(...late.map((a) => a.ms));
  t.ok(slowest >= 390 && slowest < 5000, `by the 400 ms deadline (the slowest ${slowest} ms), not undici's 60 s headersTimeout`);

  // The bound counts requests waiting now, not ever: the next one is let in.
  const next = await passThrough.handle(request('/agents'));
  t.equal(message(next.body), 'unavailable: The admin service did not answer in time; retry later.', 'let in again once they ended');
});

t.test('the deadline is for the head: a body that comes later than it still arrives whole', async (t) => {
  const admin = createHttpServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"items":');
    setTimeout(() => res.end('[1,2,3]}'), 600);
  });
  const passThrough = await passThroughTo(t, admin, { answerWithinMs: 300, maxPending: 4 });
  const res = await passThrough.handle(request('/agents'));
  t.equal(res.status, 200);
  t.same(JSON.parse(Buffer.concat(res.body as Buffer[]).toString()), { items: [1, 2, 3] }, 'its chunks, in order');
});

t.test('a request queued behind connections busy with slow bodies is answered by its deadline, not when one frees', async (t) => {
  const admin = createHttpServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    if (req.url !== '/slow') {
      res.end('{}');
      return;
    }
    // The head at once, the body a chunk at a time for 3 s: the connection stays busy.
    let sent = 0;
    const timer = setInterval(() => {
      if (++sent < 30) res.write(' ');
      else {
        clearInterval(timer);
        res.end('{}');
      }
    }, 100);
    res.on('close', () => clearInterval(timer));
  });
  const passThrough = await passThroughTo(t, admin, { answerWithinMs: 400, maxPending: 100 });
  const slow = Array.from({ length: 64 }, () => passThrough.handle(request('/slow')));
  await new Promise((resolve) => setTimeout(resolve, 200)); // the 64 connections taken
  const started = Date.now();
  const queued = await passThrough.handle(request('/fast'));
  const ms = Date.now() - started;
  t.equal(queued.status, 503);
  t.equal(message(queued.body), 'unavailable: The admin service did not answer in time; retry later.');
  t.ok(ms < 1500, `answered by its deadline (${ms} ms), not once a connection freed (~3 s)`);
  for (const res of await Promise.all(slow)) t.equal(res.status, 200, 'the slow ones, whole');
});

t.test('a client that leaves ends its request to the admin process too (a job waiting there gives its place up)', async (t) => {
  let closed: () => void;
  const adminSawClose = new Promise<void>((resolve) => (closed = resolve));
  const admin = createHttpServer((req) => {
    req.socket.on('close', () => closed()); // never answers: the job is still waiting
  });
  const passThrough = await passThroughTo(t, admin, { answerWithinMs: 30_000, maxPending: 10 });
  const client = new AbortController();
  const answer = passThrough.handle({ ...request('/policy/replay'), signal: client.signal });
  await new Promise((r) => setTimeout(r, 100));
  const started = Date.now();
  client.abort();
  await adminSawClose;
  t.ok(Date.now() - started < 5_000, `the admin process saw the request end ${Date.now() - started} ms after the client left, not at the 30 s deadline`);
  t.equal((await answer).status, 503, 'an answer nobody reads');
});
