// The public listener (uWebSockets.js): /health, /proxy/{key}/{target}, and every
// other path handed to the admin API. uWS frees the HttpRequest when the handler
// returns, so everything needed later is copied out of it first; onAborted is
// attached before anything else; writes after an await are corked.
import { createRequire } from 'node:module';
import { STATUS_CODES } from 'node:http';
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import type { AdminRequest, AdminResponse } from '../admin/http.js';
import { MAX_ADMIN_BODY_BYTES } from '../admin/http.js';
import { errorBody, type ErrorCode, ERRORS } from '../shared/errors.js';
import { timingSafeEqual } from 'node:crypto';
import { hashApiKey } from '../shared/secrets.js';
import { ProxyExchange } from './exchange.js';
import type { ProxyPipeline } from './pipeline.js';
import { RequestBody } from './request-body.js';
import { API_KEY_RE } from './resolve-agent.js';

/**
 * Request heads larger than this are answered 431. The uWS build we run ignores
 * UWS_HTTP_MAX_HEADERS_SIZE and accepts heads up to ~120 KB (it resets the
 * connection beyond), so the limit is enforced here, while copying the head.
 */
export const MAX_HEAD_BYTES = 16 * 1024;
/** Longer request targets are answered 414 (RFC 9112 §3 recommends supporting at least 8000). */
export const MAX_URL_BYTES = 8 * 1024;
export const MAX_REASONING_CHARS = 16 * 1024;

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
  admin: (req: AdminRequest) => Promise<AdminResponse>;
  /** Split-mode admin: the client address comes from the proxy's X-Forwarded-For. */
  trustForwardedFor: boolean;
  /** True once shutdown began: admin requests are answered 503 with Connection: close. */
  closing: () => boolean;
  health: () => Record<string, unknown>;
  /** Resolves with null when ready, else why not (GET /ready answers 503 with it). */
  ready: () => Promise<string | null>;
  /** GET /metrics; null when METRICS_ENABLED is off (then 404). */
  metrics: { text(): Promise<string>; contentType: string; token: string | null } | null;
  /** The OpenAPI document served at GET /openapi.json (null: 404). */
  openapi: string | null;
}

export interface Listener {
  port: number;
  /** Stops accepting connections (in-flight exchanges go on). */
  stop(): void;
}

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding',
  'upgrade', 'expect', 'host', 'content-length', 'x-agent-reasoning', 'x-agent-task-id',
]);

// req.forEach runs synchronously, so one module-level cursor avoids a closure per request.
let current: ProxyExchange | null = null;
let hostSeen = 0;
let lengthSeen = 0;
let connectionTokens: string[] | null = null;
let headBytes = 0;

function copyProxyHeader(name: string, value: string): void {
  const ex = current!;
  headBytes += name.length + value.length + 4;
  if (!HOP_BY_HOP.has(name)) {
    if (name === 'x-request-id') {
      ex.hasRequestId = true;
      if (value.length <= 200) ex.requestId = value;
    }
    ex.headers.push(name, value);
    return;
  }
  switch (name) {
    case 'host':
      if (++hostSeen > 1) ex.headError = { code: 'invalid_request', message: 'The request has more than one Host header.' };
      break;
    case 'content-length':
      if (++lengthSeen > 1) ex.headError = { code: 'invalid_request', message: 'The request has more than one Content-Length header.' };
      else if (!/^\d{1,15}$/.test(value)) ex.headError = { code: 'invalid_request', message: 'The Content-Length header is not a number.' };
      else ex.contentLength = Number(value);
      break;
    case 'transfer-encoding':
      // uWS already refuses Content-Length with Transfer-Encoding; anything but chunked is refused here.
      if (value.trim().toLowerCase() !== 'chunked') ex.headError = { code: 'invalid_request', message: 'Only Transfer-Encoding: chunked is accepted.' };
      else ex.chunked = true;
      break;
    case 'connection':
      connectionTokens = value.toLowerCase().split(',').map((s) => s.trim());
      break;
    case 'x-agent-reasoning':
      ex.reasoning = value.length > MAX_REASONING_CHARS ? value.slice(0, MAX_REASONING_CHARS) : value;
      break;
    case 'x-agent-task-id':
      ex.taskId = value.length > 1024 ? value.slice(0, 1024) : value;
      break;
  }
}

function readProxyHead(ex: ProxyExchange, req: HttpRequest, url: string): void {
  ex.method = req.getCaseSensitiveMethod();
  ex.query = req.getQuery() ?? '';
  // url is /proxy/{key}/{target}
  const keyEnd = url.indexOf('/', 7);
  const key = keyEnd < 0 ? url.slice(7) : url.slice(7, keyEnd);
  ex.rawTarget = keyEnd < 0 ? '' : url.slice(keyEnd + 1);
  if (API_KEY_RE.test(key)) {
    ex.keyHash = hashApiKey(key);
    ex.keyPrefix = key.slice(0, 12);
  }
  current = ex;
  hostSeen = 0;
  lengthSeen = 0;
  connectionTokens = null;
  headBytes = 0;
  req.forEach(copyProxyHeader);
  current = null;
  if (headBytes > MAX_HEAD_BYTES) ex.headError = { code: 'headers_too_large', message: `The request headers exceed ${MAX_HEAD_BYTES} bytes.` };
  if (connectionTokens !== null) {
    const named = connectionTokens as string[];
    const kept: string[] = [];
    for (let i = 0; i < ex.headers.length; i += 2) {
      if (!named.includes(ex.headers[i]!)) kept.push(ex.headers[i]!, ex.headers[i + 1]!);
    }
    ex.headers = kept;
  }
  if (url.length + ex.query.length > MAX_URL_BYTES) ex.headError = { code: 'uri_too_long', message: 'The request URL is too long.' };
}

export function listen(uws: Uws, options: ListenOptions): Promise<Listener> {
  const { pipeline } = options;
  const app: TemplatedApp = uws.App();

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
    void metrics.text().then((text) => {
      if (!aborted) res.cork(() => res.writeHeader('content-type', metrics.contentType).end(text));
    });
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
    const ex = new ProxyExchange(res);
    res.onAborted(() => {
      ex.aborted = true;
      ex.body?.abort();
      ex.abortUpstream?.(new Error('client aborted'));
      ex.finish();
    });
    const url = req.getUrl();
    readProxyHead(ex, req, url);
    if (ex.keyHash === '') {
      // Not a well-formed key: refused before any lookup, and not audited (no agent).
      ex.finished = true;
      if (ex.headError !== null) answerAndClose(res, ex.headError.code, ex.headError.message);
      else if (ex.contentLength > 0 || ex.chunked) answerAndClose(res, 'invalid_api_key');
      else writeError(res, 'invalid_api_key');
      return;
    }
    if (ex.contentLength > 0 || ex.chunked) ex.body = new RequestBody(res, ex.chunked ? -1 : ex.contentLength);
    pipeline.run(ex);
  });

  app.any('/*', (res, req) => {
    if (options.closing()) {
      answerAndClose(res, 'unavailable', 'The service is shutting down; retry.');
      return;
    }
    handleAdmin(res, req, options.admin, options.trustForwardedFor);
  });

  return new Promise((resolve, reject) => {
    app.listen(options.host, options.port, (socket: us_listen_socket | false) => {
      if (!socket) {
        reject(new Error(`cannot listen on ${options.host}:${options.port}`));
        return;
      }
      resolve({
        port: uws.us_socket_local_port(socket as never),
        stop: () => uws.us_listen_socket_close(socket),
      });
    });
  });
}

/**
 * Answers a request whose framing cannot be trusted (or whose body we will not
 * read) and closes the connection. Not from inside the handler: uWS then goes on
 * to serve the bytes after the first Content-Length as a next request even with
 * end(body, true). Draining the body first and answering a turn later closes
 * before any such "request" is parsed.
 */
function answerAndClose(res: HttpResponse, code: ErrorCode, message?: string): void {
  let aborted = false;
  res.onAborted(() => {
    aborted = true; // replaces any earlier handler: nothing else will touch this response
  });
  res.onData(() => undefined);
  setImmediate(() => {
    if (!aborted) res.cork(() => writeError(res, code, message, true));
  });
}

/** An error answered in the request handler itself (already corked). */
function writeError(res: HttpResponse, code: ErrorCode, message?: string, closeConnection = false, allow?: string): void {
  const status = ERRORS[code].status;
  res.writeStatus(`${status} ${STATUS_CODES[status]}`).writeHeader('content-type', 'application/json');
  if (allow !== undefined) res.writeHeader('allow', allow);
  // A body we will not read makes the connection unusable for a next request.
  res.end(errorBody(code, message), closeConnection);
}

function handleAdmin(res: HttpResponse, req: HttpRequest, admin: (req: AdminRequest) => Promise<AdminResponse>, trustForwardedFor: boolean): void {
  let aborted = false;
  res.onAborted(() => {
    aborted = true;
  });
  const headers: Record<string, string> = {};
  let problem: { code: ErrorCode; message: string } | null = null;
  let lengths = 0;
  let hosts = 0;
  let headSize = 0;
  req.forEach((name, value) => {
    headSize += name.length + value.length + 4;
    if (name === 'content-length') lengths++;
    if (name === 'host') hosts++;
    if (name === 'transfer-encoding' && value.trim().toLowerCase() !== 'chunked') {
      problem = { code: 'invalid_request', message: 'Only Transfer-Encoding: chunked is accepted.' };
    }
    if (!(name in headers)) headers[name] = value;
  });
  if (lengths > 1) problem = { code: 'invalid_request', message: 'The request has more than one Content-Length header.' };
  if (hosts > 1) problem = { code: 'invalid_request', message: 'The request has more than one Host header.' };
  if (headSize > MAX_HEAD_BYTES) problem = { code: 'headers_too_large', message: `The request headers exceed ${MAX_HEAD_BYTES} bytes.` };
  const url = req.getUrl();
  const query = req.getQuery() ?? '';
  if (url.length + query.length > MAX_URL_BYTES) problem = { code: 'uri_too_long', message: 'The request URL is too long.' };
  const declared = headers['content-length'] !== undefined ? Number(headers['content-length']) : -1;
  const hasBody = declared > 0 || headers['transfer-encoding'] !== undefined;
  if (problem === null && declared > MAX_ADMIN_BODY_BYTES) {
    problem = { code: 'payload_too_large', message: `The body must be at most ${MAX_ADMIN_BODY_BYTES} bytes.` };
  }
  if (problem !== null) {
    const { code, message } = problem;
    answerAndClose(res, code, message);
    return;
  }
  const request: AdminRequest = {
    method: req.getCaseSensitiveMethod(),
    path: url,
    query: new URLSearchParams(query),
    headers,
    body: Buffer.alloc(0),
    remoteAddress: (trustForwardedFor ? headers['x-forwarded-for']?.split(',').pop()?.trim() : undefined) || Buffer.from(res.getRemoteAddressAsText()).toString(),
  };
  const respond = (response: AdminResponse): void => {
    if (aborted) return;
    res.cork(() => {
      res.writeStatus(`${response.status} ${STATUS_CODES[response.status] ?? ''}`);
      for (const name in response.headers) res.writeHeader(name, response.headers[name]!);
      if (response.status === 204) res.endWithoutBody();
      else if (request.method === 'HEAD') {
        // By hand: uWS's endWithoutBody(length) leaves the connection unusable.
        res.writeHeader('content-length', String(Buffer.byteLength(response.body))).endWithoutBody();
      }
      else res.end(response.body);
    });
  };
  if (!hasBody) {
    void admin(request).then(respond);
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let refused = false;
  res.onData((chunk, isLast) => {
    if (refused) return;
    size += chunk.byteLength;
    if (size > MAX_ADMIN_BODY_BYTES) {
      refused = true;
      if (!aborted) {
        res.cork(() => writeError(res, 'payload_too_large', `The body must be at most ${MAX_ADMIN_BODY_BYTES} bytes.`, true));
      }
      return;
    }
    chunks.push(Buffer.from(new Uint8Array(chunk)));
    if (isLast) {
      request.body = Buffer.concat(chunks, size);
      void admin(request).then(respond);
    }
  });
}

function bearerMatches(header: string, token: string): boolean {
  const given = Buffer.from(header.startsWith('Bearer ') ? header.slice(7) : '');
  const expected = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
