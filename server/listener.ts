// The public listener (uWebSockets.js), the one front door of every role:
// /health, /ready, /metrics and /openapi.json answered here, /proxy/{key}/...
// handed to the proxy pipeline, every other path to the admin adapter (the admin
// API in-process, or the split-mode pass-through). uWS frees the HttpRequest when
// the handler returns, so everything needed later is copied out of it first;
// onAborted is attached before anything else; writes after an await are corked.
import { createRequire } from 'node:module';
import { timingSafeEqual } from 'node:crypto';
import type { TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import { ProxyExchange } from '../proxy/exchange.js';
import type { ProxyPipeline } from '../proxy/pipeline.js';
import { RequestBody } from '../proxy/request-body.js';
import { answerWhole } from '../shared/uws-write.js';
import { handleAdmin, type AdminHandler } from './admin-adapter.js';
import { answerAfterBody, answerAndClose, writeError } from './answers.js';
import { readRequestHead } from './request-head.js';

type Uws = typeof import('uWebSockets.js');

/**
 * Loads uWS and refuses to go on when its native binary did not load: the package
 * silently falls back to a slow JavaScript implementation otherwise.
 */
export function loadUws(): Uws {
  const require = createRequire(import.meta.url);
  const uws = require('uWebSockets.js') as Uws;
  if (!String(uws.App).includes('[native code]')) {
    throw new Error(`uWebSockets.js did not load its native binary for ${process.platform}-${process.arch} (Node ABI ${process.versions.modules}); refusing to run on the slow fallback`);
  }
  return uws;
}

export interface ListenOptions {
  host: string;
  port: number;
  /** The proxy route; absent in the split-mode admin process. */
  pipeline: ProxyPipeline | null;
  admin: AdminHandler;
  /** Split-mode admin: the client address comes from the proxy's X-Forwarded-For. */
  trustForwardedFor: boolean;
  /**
   * Refuse a port another process listens on. uWS listens with SO_REUSEPORT by
   * default: a second all-in-one on the port started, and the kernel split the
   * connections between the two. Only split-mode proxies share a port.
   */
  exclusivePort: boolean;
  /** True once shutdown began: admin requests are answered 503 with Connection: close. */
  closing: () => boolean;
  health: () => Record<string, unknown>;
  /** Resolves with null when ready, else why not (GET /ready answers 503 with it). */
  ready: () => Promise<string | null>;
  /** GET /metrics; null when METRICS_ENABLED is off (then 404). */
  metrics: { text(): Promise<string>; contentType: string; token: string | null } | null;
  /** Logs a failure the listener answered with 500. */
  onError: (message: string, err: unknown) => void;
  /** The OpenAPI document served at GET /openapi.json (null: 404). */
  openapi: string | null;
}

export interface Listener {
  port: number;
  /** Stops accepting connections (in-flight exchanges go on). */
  stop(): void;
  /** From now on a request on a kept-alive connection is not answered: its connection is closed. */
  stopAnswering(): void;
}

/** uWS's ListenOptions (docs/index.d.ts): libus' flags. */
const LIBUS_LISTEN_DEFAULT = 0;
const LIBUS_LISTEN_EXCLUSIVE_PORT = 1;

export function listen(uws: Uws, options: ListenOptions): Promise<Listener> {
  const { pipeline } = options;
  const app: TemplatedApp = uws.App();
  let answering = true;

  app.get('/health', (res) => {
    const body = JSON.stringify({ status: 'ok', ...options.health() });
    res.cork(() => res.writeHeader('content-type', 'application/json').end(body));
  });
  app.get('/ready', (res) => {
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    void options.ready().then(
      (reason) => reason,
      () => 'a readiness check failed',
    ).then((reason) => {
      if (aborted) return;
      res.cork(() => {
        if (reason === null) res.writeHeader('content-type', 'application/json').end('{"status":"ready"}');
        else writeError(res, 'unavailable', `Not ready: ${reason}.`);
      });
    });
  });

  const metrics = options.metrics;
  if (metrics !== null) app.get('/metrics', (res, req) => {
    const { token } = metrics;
    if (token !== null && !bearerMatches(req.getHeader('authorization'), token)) {
      writeError(res, 'unauthorized', 'GET /metrics needs the metrics bearer token.');
      return;
    }
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    metrics.text().then(
      (text) => {
        if (!aborted) answerWhole(res, () => res.writeHeader('content-type', metrics.contentType), text);
      },
      (err: unknown) => {
        // A collector that throws is answered, not left as an unhandled rejection (which ends the process).
        options.onError('GET /metrics failed', err);
        if (!aborted) res.cork(() => writeError(res, 'internal'));
      },
    );
  });

  const openapi = options.openapi;
  if (openapi !== null) {
    app.get('/openapi.json', (res) => {
      res.writeHeader('content-type', 'application/json').end(openapi);
    });
  }

  app.any('/health', (res, req) => {
    if (req.getCaseSensitiveMethod() === 'HEAD') {
      res.cork(() => res.writeHeader('content-type', 'application/json').endWithoutBody());
      return;
    }
    res.cork(() => writeError(res, 'method_not_allowed', undefined, true, 'GET, HEAD'));
  });

  if (pipeline !== null) app.any('/proxy/*', (res, req) => {
    if (!answering) {
      res.close(); // past the drain: an answer now could miss the audit flush
      return;
    }
    const ex = new ProxyExchange(res);
    res.onAborted(() => ex.clientAborted());
    const url = req.getUrl();
    readRequestHead(req, url, ex);
    if (!ex.readProxyPath(url)) {
      // Not a well-formed key: refused before any lookup, and not audited (no agent).
      ex.finished = true;
      if (ex.headError !== null) answerAndClose(res, ex.headError.code, ex.headError.message);
      else if (ex.contentLength > 0 && !ex.chunked) answerAfterBody(res, 'invalid_api_key'); // read and dropped first (answers.ts)
      else if (ex.chunked) answerAndClose(res, 'invalid_api_key');
      else writeError(res, 'invalid_api_key', undefined, false, undefined, ex.method === 'HEAD');
      return;
    }
    if (ex.contentLength > 0 || ex.chunked) ex.body = new RequestBody(res, ex.chunked ? -1 : ex.contentLength);
    pipeline.run(ex);
  });

  app.any('/*', (res, req) => {
    if (!answering) {
      res.close();
      return;
    }
    if (options.closing()) {
      answerAndClose(res, 'unavailable', 'The service is shutting down; retry.');
      return;
    }
    handleAdmin(res, req, options.admin, options.trustForwardedFor);
  });

  return new Promise((resolve, reject) => {
    // The build takes listen options after the port (index.d.ts types them only without a host).
    const listenWithOptions = app.listen as unknown as (host: string, port: number, options: number, cb: (socket: us_listen_socket | false) => void) => void;
    listenWithOptions.call(app, options.host, options.port, options.exclusivePort ? LIBUS_LISTEN_EXCLUSIVE_PORT : LIBUS_LISTEN_DEFAULT, (socket) => {
      if (!socket) {
        reject(new Error(`cannot listen on ${options.host}:${options.port} (the port is in use, or the address is not this machine's${options.exclusivePort ? '; only split-mode proxies share a port' : ''})`));
        return;
      }
      resolve({
        port: uws.us_socket_local_port(socket as never),
        stop: () => uws.us_listen_socket_close(socket),
        stopAnswering: () => {
          answering = false;
        },
      });
    });
  });
}

function bearerMatches(header: string, token: string): boolean {
  const given = Buffer.from(header.startsWith('Bearer ') ? header.slice(7) : '');
  const expected = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
