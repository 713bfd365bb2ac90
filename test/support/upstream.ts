// A real HTTPS upstream on loopback for the proxy tests, with a certificate from
// the test CA (test/fixtures/tls). Every request is recorded.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TLS_DIR } from './service.js';

export interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  bodyBytes: number;
  bodySha256: string;
  remoteAddress: string;
}

export interface Upstream {
  port: number;
  /** `127.0.0.1:<port>`: what a test puts after /proxy/{key}/. */
  authority: string;
  seen: SeenRequest[];
  server: Server;
  close(): Promise<void>;
}

export type Route = (req: IncomingMessage, res: ServerResponse, body: Buffer) => void;

/** Deterministic bytes: the same n bytes for the same n, so tests can compare hashes. */
export function patternBytes(n: number): Buffer {
  const out = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) out[i] = (i * 31 + (i >> 8)) & 0xff;
  return out;
}

/**
 * Writes `bytes` in pieces of `sizes` (in turn) as the socket drains, then calls
 * `then`; `apart`: one piece an event-loop turn, so that they reach the proxy apart.
 */
function writeInPieces(res: ServerResponse, bytes: Buffer, then: () => void, sizes: readonly number[] = [65536], apart = false): void {
  let at = 0;
  let next = 0;
  const more = (): void => {
    while (at < bytes.length) {
      const piece = bytes.subarray(at, at + sizes[next++ % sizes.length]!);
      at += piece.length;
      if (!res.write(piece)) {
        res.once('drain', more);
        return;
      }
      if (apart && at < bytes.length) {
        setImmediate(more);
        return;
      }
    }
    then();
  };
  more();
}

const UNEVEN_PIECES = [700, 23_000, 5_000, 65_536, 1_200, 17_000, 9_000, 40_000, 16_380, 3];

/** A chunked JSON body that never ends (an export still being written): a proxy that ends it early must cut it, not end it complete. */
export const unfinishedJson: Route = (req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.write('{"items":[');
  const more = setInterval(() => res.write('1,'), 100);
  req.socket.on('close', () => {
    clearInterval(more);
    res.destroy();
  });
};

export const DEFAULT_ROUTES: Record<string, Route> = {
  '/echo': (req, res, body) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body_sha256: createHash('sha256').update(body).digest('hex'), body_bytes: body.length }));
  },
  '/json': (_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ ok: true, items: [1, 2, 3], text: 'héllo' }));
  },
  '/bytes': (req, res) => {
    const n = Number(requestUrl(req).searchParams.get('n') ?? '1024');
    res.setHeader('content-type', 'application/octet-stream');
    res.setHeader('content-length', String(n));
    res.end(patternBytes(n));
  },
  '/bytes-chunked': (req, res) => {
    // The same bytes as /bytes, without a Content-Length, written in 64 KiB pieces as the socket drains.
    res.setHeader('content-type', 'application/octet-stream');
    writeInPieces(res, patternBytes(Number(requestUrl(req).searchParams.get('n') ?? '1024')), () => res.end());
  },
  '/bytes-uneven': (req, res) => {
    // The same bytes as /bytes, without a Content-Length, in pieces of uneven sizes (below and above
    // uWS's 16 KiB cork buffer), one a turn: what a chunked API or an event stream sends.
    res.setHeader('content-type', 'application/octet-stream');
    writeInPieces(res, patternBytes(Number(requestUrl(req).searchParams.get('n') ?? '1024')), () => res.end(), UNEVEN_PIECES, true);
  },
  '/big-head': (req, res) => {
    // A 20 KiB head (larger than uWS's 16 KiB cork buffer) over ?n= body bytes: with a
    // Content-Length, chunked (?chunked=1) or as an event stream (?sse=1).
    const query = requestUrl(req).searchParams;
    const body = patternBytes(Number(query.get('n') ?? '1024'));
    res.setHeader('x-big', 'b'.repeat(20_000));
    res.setHeader('x-after', 'still here');
    if (query.get('sse') === '1') res.setHeader('content-type', 'text/event-stream');
    if (query.get('chunked') === '1' || query.get('sse') === '1') writeInPieces(res, body, () => res.end());
    else res.end(body);
  },
  '/chunked': (_req, res) => {
    res.setHeader('content-type', 'text/plain');
    res.write('one,');
    setTimeout(() => res.write('two,'), 20);
    setTimeout(() => res.end('three'), 40);
  },
  '/sse': (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    let n = 0;
    const timer = setInterval(() => {
      n += 1;
      res.write(`data: event ${n}\n\n`);
      if (n === 3) {
        clearInterval(timer);
        res.end();
      }
    }, 150);
  },
  '/status': (req, res) => {
    const code = Number(requestUrl(req).searchParams.get('code') ?? '200');
    res.statusCode = code;
    // ?length=: the Content-Length a 304 may carry, the 200's (RFC 9110 §8.6), as Node's own http server sends it.
    const length = requestUrl(req).searchParams.get('length');
    if (length !== null) res.setHeader('content-length', length);
    if (code === 204 || code === 304) res.end();
    else res.end(`status ${code}`);
  },
  '/cookies': (_req, res) => {
    res.writeHead(200, { 'set-cookie': ['session=s1; Path=/; Domain=127.0.0.1; HttpOnly', 'pref=dark; Path=/docs; Secure', 'plain=1'], 'content-type': 'text/plain' });
    res.end('cookies');
  },
  '/redirect': (_req, res) => {
    res.writeHead(302, { location: 'https://elsewhere.example/next' });
    res.end();
  },
  '/hop': (_req, res) => {
    res.writeHead(200, { connection: 'x-secret-hop', 'x-secret-hop': 'dropped', 'keep-alive': 'timeout=5', 'x-kept': 'yes', 'content-type': 'text/plain' });
    res.end('hop');
  },
  '/stall-headers': () => {
    // never answers
  },
  '/stall-body': (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('partial');
  },
  '/burst-then-idle': (req, res) => {
    // An event stream that sends ?n= bytes at once, then `END\n`, then nothing for 5 s before it ends.
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const timer = setTimeout(() => res.end(), 5000);
    req.socket.on('close', () => clearTimeout(timer));
    writeInPieces(res, patternBytes(Number(requestUrl(req).searchParams.get('n') ?? '1024')), () => res.write('END\n'));
  },
  '/endless': (req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    const chunk = Buffer.alloc(16 * 1024, 'a');
    const pump = () => {
      while (res.write(chunk)) {
        if (res.destroyed) return;
      }
      res.once('drain', pump);
    };
    req.socket.on('close', () => res.destroy());
    pump();
  },
};

export async function startUpstream(routes: Record<string, Route> = {}, tls: { cert: string; key: string } = { cert: 'server.crt', key: 'server.key' }): Promise<Upstream> {
  const all = { ...DEFAULT_ROUTES, ...routes };
  const seen: SeenRequest[] = [];
  const server = createServer({
    cert: readFileSync(`${TLS_DIR}${tls.cert}`),
    key: readFileSync(`${TLS_DIR}${tls.key}`),
    keepAlive: true,
  }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push({
        method: req.method!,
        url: req.url!,
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        bodyBytes: body.length,
        bodySha256: createHash('sha256').update(body).digest('hex'),
        remoteAddress: req.socket.remoteAddress ?? '',
      });
      const path = requestUrl(req).pathname;
      const route = all[path] ?? all['/echo']!;
      route(req, res, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    authority: `127.0.0.1:${port}`,
    seen,
    server,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

/** The request target as a URL. Prefixed, not resolved: `//x/y` is a path, not a host. */
function requestUrl(req: IncomingMessage): URL {
  return new URL(`https://upstream.test${req.url!.startsWith('/') ? '' : '/'}${req.url!}`);
}
