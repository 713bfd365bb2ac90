// The stack's floor, run as its own process: a bare uWebSockets.js server that
// forwards every request to the bench upstream with undici (one Pool, TLS
// verified against the test CA) and adds the same bearer credential the guard
// injects. No key, policy, SSRF check, audit, cache or metrics: what the guard
// would cost if its features cost nothing. Issue 12's goal compares the guard's
// CPU per request with this one's, measured in the same run.
// Env: UPSTREAM_ORIGIN (https://127.0.0.1:<port>), BEARER. Prints
// `BENCH_BARE_READY port=<n>`; SIGTERM stops it.
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { Pool } from 'undici';
import uws, { type HttpResponse } from 'uWebSockets.js';
import { CA_FILE } from './paths.js';

const upstream = process.env.UPSTREAM_ORIGIN ?? '';
if (!upstream.startsWith('https://127.0.0.1:')) {
  process.stderr.write('bare: UPSTREAM_ORIGIN must be https://127.0.0.1:<port>\n');
  process.exit(2);
}
const authorization = `Bearer ${process.env.BEARER ?? ''}`;
// One TLS context for every connection, as the guard has (proxy/upstream-pools.ts): a `ca` in
// `connect` would parse the CA again for each connection the pool opens.
const secureContext = createSecureContext({ ca: readFileSync(CA_FILE, 'utf8') });
const pool = new Pool(upstream, { connections: 256, connect: { rejectUnauthorized: true, secureContext } });
const HOST = new URL(upstream).host;
const DROP = new Set(['host', 'connection', 'keep-alive', 'content-length', 'transfer-encoding', 'authorization']);
const RESPONSE_DROP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'date']);

/**
 * One call, through undici's dispatch API with a handler (as the guard's
 * stream-response.ts does, so the floor pays no more than it must): the head
 * and each chunk written as they come, uWS's back-pressure pausing the upstream.
 */
function forward(res: HttpResponse, method: string, path: string, headers: string[], body: Buffer | null, state: { aborted: boolean }): void {
  let headed = false;
  let status = 0;
  let headerList: Buffer[] = [];
  const writeHead = () => {
    headed = true;
    res.writeStatus(String(status));
    for (let i = 0; i < headerList.length; i += 2) {
      const name = headerList[i]!.toString('latin1').toLowerCase();
      if (!RESPONSE_DROP.has(name)) res.writeHeader(name, headerList[i + 1]!.toString('latin1'));
    }
  };
  let resume: (() => void) | null = null;
  pool.dispatch({ path, method: method as never, headers, body }, {
    onConnect() {},
    onHeaders(statusCode: number, rawHeaders: Buffer[], resumeUpstream: () => void) {
      status = statusCode;
      headerList = rawHeaders;
      resume = resumeUpstream;
      return true;
    },
    onData(chunk: Buffer) {
      if (state.aborted) return true;
      let ok = true;
      res.cork(() => {
        if (!headed) writeHead();
        ok = res.write(chunk);
      });
      if (ok) return true;
      res.onWritable(() => {
        resume?.();
        return true;
      });
      return false;
    },
    onComplete() {
      if (!state.aborted) res.cork(() => {
        if (!headed) writeHead();
        res.end();
      });
    },
    onError() {
      if (!state.aborted && !headed) res.cork(() => res.writeStatus('502').end());
      else if (!state.aborted) res.close();
    },
  } as never);
}

const app = uws.App();
app.any('/*', (res, req) => {
  const state = { aborted: false };
  res.onAborted(() => {
    state.aborted = true;
  });
  const method = req.getMethod().toUpperCase();
  const query = req.getQuery();
  const path = query ? `${req.getUrl()}?${query}` : req.getUrl();
  const headers: string[] = ['authorization', authorization, 'host', HOST];
  req.forEach((name, value) => {
    if (!DROP.has(name)) headers.push(name, value);
  });
  if (method === 'GET' || method === 'HEAD') {
    forward(res, method, path, headers, null, state);
    return;
  }
  const chunks: Buffer[] = [];
  res.onData((chunk, isLast) => {
    chunks.push(Buffer.from(new Uint8Array(chunk)));
    if (isLast) {
      const body = Buffer.concat(chunks);
      headers.push('content-length', String(body.length));
      forward(res, method, path, headers, body, state);
    }
  });
});
app.listen('127.0.0.1', 0, (socket) => {
  if (!socket) {
    process.stderr.write('bare: could not listen\n');
    process.exit(1);
  }
  process.stdout.write(`BENCH_BARE_READY port=${uws.us_socket_local_port(socket)}\n`);
});

const stop = (): void => {
  void pool.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
