// Answers the front door writes itself, in the contract's error shape. uWS
// rules: a response is written corked, and never touched after onAborted.
import type { HttpResponse } from 'uWebSockets.js';
import { errorBody, type ErrorCode, ERRORS } from '../shared/errors.js';
import { statusLine } from '../shared/http.js';

/** An error answered in the request handler itself (already corked). */
export function writeError(res: HttpResponse, code: ErrorCode, message?: string, closeConnection = false, allow?: string): void {
  res.writeStatus(statusLine(ERRORS[code].status)).writeHeader('content-type', 'application/json');
  if (allow !== undefined) res.writeHeader('allow', allow);
  // A body we will not read makes the connection unusable for a next request.
  res.end(errorBody(code, message), closeConnection);
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
