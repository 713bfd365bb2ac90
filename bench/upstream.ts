// The bench upstream, run as its own process (`node dist/bench/upstream.js`): an
// HTTPS server on 127.0.0.1 built on uWebSockets.js's SSLApp with the test
// certificate (test/fixtures/tls/server.crt, signed by ca.crt), so that the
// server answering is never what limits a proxy. Prints
// `BENCH_UPSTREAM_READY port=<n>` once it listens; SIGTERM stops it.
import { createRequire } from 'node:module';
import type { HttpResponse, us_listen_socket } from 'uWebSockets.js';
import { SERVER_CERT, SERVER_KEY } from './paths.js';
import {
  DOWNLOAD_PATH, LARGE_BYTES, LARGE_PATH, SINK_PATH, SMALL_BODY, SMALL_PATH, SSE_EVENTS, SSE_INTERVAL_MS, SSE_PATH,
} from './routes.js';

type Uws = typeof import('uWebSockets.js');
const uws = createRequire(import.meta.url)('uWebSockets.js') as Uws;

const LARGE_BODY = Buffer.alloc(LARGE_BYTES, 'a');
/** One buffer every download is cut from: no allocation per chunk. */
const DOWNLOAD_CHUNK = Buffer.alloc(256 * 1024, 'b');
/** The largest download asked for (8 GiB): a typo cannot stream for ever. */
const MAX_DOWNLOAD_BYTES = 8 * 1024 ** 3;

const app = uws.SSLApp({ cert_file_name: SERVER_CERT, key_file_name: SERVER_KEY });

app.get(SMALL_PATH, (res) => {
  res.writeHeader('content-type', 'application/json').end(SMALL_BODY);
});

app.get(LARGE_PATH, (res) => {
  res.writeHeader('content-type', 'application/octet-stream').end(LARGE_BODY);
});

app.post(SINK_PATH, (res) => {
  let aborted = false;
  let received = 0;
  res.onAborted(() => {
    aborted = true;
  });
  res.onData((chunk, isLast) => {
    received += chunk.byteLength;
    if (isLast && !aborted) {
      res.cork(() => res.writeHeader('content-type', 'application/json').end(`{"ok":true,"received":${received}}`));
    }
  });
});

app.get(SSE_PATH, (res) => {
  let aborted = false;
  res.onAborted(() => {
    aborted = true;
  });
  // X-Accel-Buffering: no is how an SSE origin tells nginx not to buffer it (nginx docs, proxy_buffering).
  res.writeHeader('content-type', 'text/event-stream').writeHeader('cache-control', 'no-cache').writeHeader('x-accel-buffering', 'no');
  res.write('data: event 1\n\n');
  let sent = 1;
  const timer = setInterval(() => {
    if (aborted) {
      clearInterval(timer);
      return;
    }
    sent += 1;
    res.cork(() => {
      res.write(`data: event ${sent}\n\n`);
      if (sent >= SSE_EVENTS) {
        clearInterval(timer);
        res.end();
      }
    });
  }, SSE_INTERVAL_MS);
});

app.get(DOWNLOAD_PATH, (res, req) => {
  const bytes = Number(new URLSearchParams(req.getQuery() ?? '').get('bytes') ?? '0');
  if (!Number.isSafeInteger(bytes) || bytes < 0 || bytes > MAX_DOWNLOAD_BYTES) {
    res.writeStatus('400 Bad Request').end('bytes must be 0..8 GiB');
    return;
  }
  res.writeHeader('content-type', 'application/octet-stream');
  streamDownload(res, bytes);
});

app.any('/*', (res) => {
  res.writeStatus('404 Not Found').writeHeader('content-type', 'application/json').end('{"error":"not_found"}');
});

/**
 * Streams `total` bytes with back-pressure, as uWS's VideoStreamer example does:
 * tryEnd hands over a chunk; when the socket cannot take all of it, the rest is
 * offered again from onWritable, counted from the write offset it started at.
 */
function streamDownload(res: HttpResponse, total: number): void {
  let aborted = false;
  let handed = 0; // bytes tryEnd accepted whole
  let pending: Buffer | null = null;
  let pendingOffset = 0;
  res.onAborted(() => {
    aborted = true;
  });

  const pump = (): void => {
    while (!aborted && handed < total) {
      const size = Math.min(DOWNLOAD_CHUNK.length, total - handed);
      const chunk = size === DOWNLOAD_CHUNK.length ? DOWNLOAD_CHUNK : DOWNLOAD_CHUNK.subarray(0, size);
      const offset = res.getWriteOffset();
      const [ok, done] = res.tryEnd(chunk, total);
      if (done) return;
      if (!ok) {
        pending = chunk;
        pendingOffset = offset;
        return;
      }
      handed += size;
    }
  };

  res.onWritable((offset) => {
    if (aborted || pending === null) return true;
    const [ok, done] = res.tryEnd(pending.subarray(offset - pendingOffset), total);
    if (done) return true;
    if (ok) {
      handed += pending.length;
      pending = null;
      pump();
    }
    return ok;
  });

  if (total === 0) res.endWithoutBody(0);
  else pump();
}

app.listen('127.0.0.1', 0, (socket: us_listen_socket | false) => {
  if (!socket) {
    process.stderr.write('bench upstream: cannot listen on 127.0.0.1\n');
    process.exit(1);
  }
  process.stdout.write(`BENCH_UPSTREAM_READY port=${uws.us_socket_local_port(socket as never)}\n`);
  const stop = (): void => {
    uws.us_listen_socket_close(socket);
    process.exit(0);
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
});
