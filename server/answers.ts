// Answers the front door writes itself, in the contract's error shape. uWS
// rules: a response is written corked, and never touched after onAborted.
import type { HttpResponse } from 'uWebSockets.js';
import { errorBody, type ErrorCode, ERRORS } from '../shared/errors.js';
import { statusLine } from '../shared/http.js';
import { endAnswer } from '../shared/uws-write.js';

/** An error answered in the request handler itself (already corked); `headOnly` answers HEAD (endAnswer). */
export function writeError(res: HttpResponse, code: ErrorCode, message?: string, closeConnection = false, allow?: string, headOnly = false): void {
  res.writeStatus(statusLine(ERRORS[code].status)).writeHeader('content-type', 'application/json');
  if (allow !== undefined) res.writeHeader('allow', allow);
  // A body we will not read makes the connection unusable for a next request.
  endAnswer(res, errorBody(code, message), headOnly, closeConnection);
}

/**
 * Answers a request whose framing cannot be trusted (or whose body we will not
 * read) and closes the connection. Not from inside the handler: uWS then goes on
 * to serve the bytes after the first Content-Length as a next request even with
 * end(body, true). Draining the body first and answering a turn later closes
 * before any such "request" is parsed.
 */
export function answerAndClose(res: HttpResponse, code: ErrorCode, message?: string): void {
  let aborted = false;
  res.onAborted(() => {
    aborted = true; // replaces any earlier handler: nothing else will touch this response
  });
  res.onData(() => undefined);
  setImmediate(() => {
    if (!aborted) res.cork(() => writeError(res, code, message, true));
  });
}

/** Lingering before a refusal: the most of an unwanted body read and dropped first. */
export const LINGER_MAX_BYTES = 16 * 1024 * 1024;
/** The longest the whole linger lasts. */
export const LINGER_MS = 5000;
/** A client that sends nothing for this long is waiting for the answer: it gets it. */
export const LINGER_STALL_MS = 200;

/**
 * Refuses a request whose Content-Length body will not be read (413, a
 * malformed key) with framing that can be trusted, as nginx's lingering close
 * does: the body is read and dropped until it ends, the client pauses (LINGER_STALL_MS: it waits
 * for the answer, e.g. after a partial body or Expect: 100-continue), or the
 * bounds (LINGER_MAX_BYTES, LINGER_MS) are reached; then the answer goes and
 * the connection is closed. Closing while the client still sends leaves unread
 * bytes, and the kernel then resets the connection: the client sees EPIPE or
 * ECONNRESET instead of the answer (reproduced with 64 curl clients at once,
 * 2 MiB bodies). The answer is written a turn after the body's end, as in
 * answerAndClose. (A chunked body is refused at once, as before: reading on to
 * its last chunk would let bytes after it be parsed as a request.)
 */
export function answerAfterBody(res: HttpResponse, code: ErrorCode, message?: string): void {
  let done = false;
  let dropped = 0;
  const stop = (): void => {
    done = true;
    clearTimeout(deadline);
    clearTimeout(stall);
  };
  const answer = (): void => {
    if (done) return;
    stop();
    res.cork(() => writeError(res, code, message, true));
  };
  const deadline = setTimeout(answer, LINGER_MS);
  const stall = setTimeout(answer, LINGER_STALL_MS);
  res.onAborted(stop);
  res.onData((chunk, isLast) => {
    if (done) return;
    dropped += chunk.byteLength;
    if (isLast) setImmediate(answer);
    else if (dropped > LINGER_MAX_BYTES) answer();
    else stall.refresh();
  });
}
