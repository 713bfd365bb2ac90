// The one reader of request heads, for proxy and admin paths alike. uWS frees
// the HttpRequest when the handler returns, so the head is copied here, in the
// handler, into a target the route owns (a ProxyExchange, an AdminRequest).
//
// Framing is checked here once, for every path: uWS v20.30 passes two
// Content-Lengths, two Hosts and a non-chunked Transfer-Encoding to the handler
// (it refuses CL + TE itself), and ignores UWS_HTTP_MAX_HEADERS_SIZE, so the
// 16 KiB head limit is enforced while copying.
import type { HttpRequest } from 'uWebSockets.js';
import type { ErrorCode } from '../shared/errors.js';

export interface HeadProblem {
  code: ErrorCode;
  message: string;
}

/** What a route copies a head into (a ProxyExchange, an admin request under construction). */
export interface RequestHeadTarget {
  method: string;
  /** The raw query string, without `?`. */
  query: string;
  /** The request's Content-Length, or -1 when it has none (no body, or chunked). */
  contentLength: number;
  /** Transfer-Encoding: chunked (a body of unknown length). */
  chunked: boolean;
  /** The first problem found with the head, or null. */
  headError: HeadProblem | null;
  /** Every header but framing, lower-cased, in arrival order. */
  header(name: string, value: string): void;
  /** The lower-cased field names the Connection header lists. */
  dropConnectionFields(names: readonly string[]): void;
}

/** Request heads larger than this are answered 431 (uWS itself resets only beyond ~120 KB). */
export const MAX_HEAD_BYTES = 16 * 1024;
/** Longer request targets are answered 414 (RFC 9112 §3 recommends supporting at least 8000). */
export const MAX_URL_BYTES = 8 * 1024;

const KEEP_ALIVE_ONLY = /^[ \t]*keep-alive[ \t]*$/i;

// req.forEach runs synchronously, so one module-level cursor serves every
// request without a closure per request.
let target: RequestHeadTarget | null = null;
let hostSeen = 0;
let lengthSeen = 0;
let headBytes = 0;
let connection: string | null = null;

function onHeader(name: string, value: string): void {
  const into = target!;
  headBytes += name.length + value.length + 4;
  switch (name) {
    case 'host':
      if (++hostSeen > 1) into.headError = problem('invalid_request', 'The request has more than one Host header.');
      return;
    case 'content-length':
      if (++lengthSeen > 1) into.headError = problem('invalid_request', 'The request has more than one Content-Length header.');
      else if (!/^\d{1,15}$/.test(value)) into.headError = problem('invalid_request', 'The Content-Length header is not a number.');
      else into.contentLength = Number(value);
      return;
    case 'transfer-encoding':
      // uWS already refuses Content-Length with Transfer-Encoding; anything but chunked is refused here.
      if (value.trim().toLowerCase() !== 'chunked') into.headError = problem('invalid_request', 'Only Transfer-Encoding: chunked is accepted.');
      else into.chunked = true;
      return;
    case 'connection':
      // Several Connection lines are one list (RFC 9110 §5.3): each names fields to drop.
      connection = connection === null ? value : `${connection},${value}`;
      return;
    default:
      into.header(name, value);
  }
}

function problem(code: HeadProblem['code'], message: string): HeadProblem {
  return { code, message };
}

/**
 * Copies the head of `req` into `into`: method, query, framing, and every
 * other header through `into.header` (Host, Content-Length, Transfer-Encoding
 * and Connection are framing, read here and not passed on). The fields named by
 * Connection (RFC 9110 §7.6.1) go to `into.dropConnectionFields`. A problem
 * with the head is left in `into.headError` for the route to answer.
 */
export function readRequestHead(req: HttpRequest, url: string, into: RequestHeadTarget): void {
  into.method = req.getCaseSensitiveMethod();
  into.query = req.getQuery() ?? '';
  target = into;
  hostSeen = 0;
  lengthSeen = 0;
  headBytes = 0;
  connection = null;
  req.forEach(onHeader);
  target = null;
  // `Connection: keep-alive`, what most HTTP clients send, names only a hop-by-hop
  // field every target drops anyway: no list is built for it (~230 ns a call,
  // bench/micro/header-copy.ts).
  if (connection !== null && !KEEP_ALIVE_ONLY.test(connection)) {
    into.dropConnectionFields((connection as string).toLowerCase().split(',').map((s) => s.trim()));
  }
  if (headBytes > MAX_HEAD_BYTES) into.headError = problem('headers_too_large', `The request headers exceed ${MAX_HEAD_BYTES} bytes.`);
  if (url.length + into.query.length > MAX_URL_BYTES) into.headError = problem('uri_too_long', 'The request URL is too long.');
}
