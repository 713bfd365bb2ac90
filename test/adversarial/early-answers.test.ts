// Early answers reach the client. A request refused before its body was read
// (413 for an admin body over 1 MiB, 401 for a proxy call with an unknown key)
// was answered and its connection closed at once: with body bytes still
// arriving, the kernel reset the connection, and a client still sending got
// EPIPE and lost the answer (64 raw clients at once, 2 MiB bodies, against the
// built service: about 60 of 64 never read it; 64 curl processes: a few exit 55). A Content-Length body
// is now read and dropped first, within bounds (server/answers.ts), then answered.
import { request } from 'node:http';
import { connect } from 'node:net';
import t from 'tap';
import { startTestService } from '../support/service.js';
import { spawnServiceInTempDir } from '../support/spawn-service.js';

const service = await startTestService();
t.teardown(() => service.close());
const TWO_MIB = Buffer.alloc(2 * 1024 * 1024, 'x');
const EIGHT_MIB = Buffer.alloc(8 * 1024 * 1024, 'x');
const TWELVE_MIB = Buffer.alloc(12 * 1024 * 1024, 'x');

async function many(n: number, send: () => Promise<Response>): Promise<string[]> {
  return Promise.all(
    Array.from({ length: n }, () =>
      send().then(
        async (res) => `${res.status} ${((await res.json()) as { error: string }).error}`,
        (err: Error & { cause?: { code?: string } }) => `failed: ${err.cause?.code ?? err.message}`,
      ),
    ),
  );
}

/** A raw client that writes head and body without waiting, as curl does; whether it read an answer starting with `status`. */
function rawPost(port: number, path: string, body: Buffer, status: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    let error = '';
    const verdict = () => (got.startsWith(`HTTP/1.1 ${status} `) ? 'answered' : `no answer (${error || 'closed'})`);
    socket.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      // A whole answer read (the connection may stay open for a next request).
      const end = got.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(got);
      if (end !== -1 && length !== null && got.length >= end + 4 + Number(length[1])) {
        resolve(verdict());
        socket.destroy();
      }
    });
    socket.on('error', (e: NodeJS.ErrnoException) => (error = e.code ?? 'error'));
    socket.on('close', () => resolve(verdict()));
    socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
    socket.write(body);
  });
}

t.test('64 raw clients at once sending 8 MiB bodies without waiting: every one reads its 413, and its 401 on the proxy', async (t) => {
  // The service in a process of its own (in this one, client and server would share one event loop).
  const own = await spawnServiceInTempDir(t, 'tcg-early-', 'all-in-one');
  const admin = await Promise.all(Array.from({ length: 64 }, () => rawPost(own.port, '/agents', EIGHT_MIB, 413)));
  t.strictSame([...new Set(admin)], ['answered']);
  const proxy = await Promise.all(Array.from({ length: 64 }, () => rawPost(own.port, `/proxy/agk_${'D'.repeat(40)}/127.0.0.1/echo`, EIGHT_MIB, 401)));
  t.strictSame([...new Set(proxy)], ['answered'], 'an unknown key');
  const malformed = await Promise.all(Array.from({ length: 64 }, () => rawPost(own.port, '/proxy/agk_short/127.0.0.1/echo', EIGHT_MIB, 401)));
  t.strictSame([...new Set(malformed)], ['answered'], 'a key not of the key\'s shape');
});

t.test('48 concurrent 2 MiB admin bodies: every client gets its 413', async (t) => {
  const answers = await many(48, () => fetch(`${service.url}/agents`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: TWO_MIB }));
  t.strictSame([...new Set(answers)], ['413 payload_too_large']);
});

t.test('16 concurrent 12 MiB admin bodies (more than socket buffers hold): every client gets its 413', async (t) => {
  const answers = await many(16, () => fetch(`${service.url}/agents`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: TWELVE_MIB }));
  t.strictSame([...new Set(answers)], ['413 payload_too_large']);
});

t.test('16 concurrent proxy calls with an unknown key and a 12 MiB body: every client gets its 401', async (t) => {
  const key = `agk_${'B'.repeat(40)}`;
  const answers = await many(16, () => fetch(`${service.url}/proxy/${key}/127.0.0.1/echo`, { method: 'POST', body: TWELVE_MIB }));
  t.strictSame([...new Set(answers)], ['401 invalid_api_key']);
});

/** node:http, which reports a reset while it still writes as an error, not the answer. */
function nodePost(path: string, body: Buffer): Promise<string> {
  const url = new URL(path, service.url);
  return new Promise((resolve) => {
    const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-length': body.length } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve(`${res.statusCode} ${(JSON.parse(text) as { error: string }).error}`));
      res.on('error', (err: NodeJS.ErrnoException) => resolve(`failed: ${err.code}`));
    });
    req.on('error', (err: NodeJS.ErrnoException) => resolve(`failed: ${err.code}`));
    req.end(body);
  });
}

t.test('node:http clients, 16 at once, 12 MiB bodies: each reads its answer (no EPIPE, no reset)', async (t) => {
  const admin = await Promise.all(Array.from({ length: 16 }, () => nodePost('/agents', TWELVE_MIB)));
  t.strictSame([...new Set(admin)], ['413 payload_too_large']);
  const proxy = await Promise.all(Array.from({ length: 16 }, () => nodePost(`/proxy/agk_${'C'.repeat(40)}/127.0.0.1/echo`, TWELVE_MIB)));
  t.strictSame([...new Set(proxy)], ['401 invalid_api_key']);
});

t.test('a chunked admin body found too large: the answer still arrives', async (t) => {
  const chunked = () => {
    const body = new ReadableStream({
      start(controller) {
        for (let i = 0; i < 8; i++) controller.enqueue(TWO_MIB.subarray(0, 256 * 1024));
        controller.close();
      },
    });
    return fetch(`${service.url}/agents`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, duplex: 'half' } as RequestInit);
  };
  const answers = await many(16, chunked);
  t.strictSame([...new Set(answers)], ['413 payload_too_large']);
});

t.test('48 concurrent proxy calls with an unknown key and a 2 MiB body: every client gets its 401', async (t) => {
  const key = `agk_${'A'.repeat(40)}`;
  const answers = await many(48, () => fetch(`${service.url}/proxy/${key}/127.0.0.1/echo`, { method: 'POST', body: TWO_MIB }));
  t.strictSame([...new Set(answers)], ['401 invalid_api_key']);
});

t.test('the service goes on serving after refusing them', async (t) => {
  t.equal((await fetch(`${service.url}/health`)).status, 200);
});
