// The admin API behind the public listener: a uWS request becomes an
// AdminRequest (head read by the one request-head reader, body collected up to
// 1 MiB), and the AdminResponse is written back corked. The same adapter serves
// the admin handlers in-process and, in a split-mode proxy, the pass-through.
import type { HttpRequest, HttpResponse } from 'uWebSockets.js';
import type { AdminRequest, AdminResponse, StreamSink } from '../admin/http.js';
import { MAX_ADMIN_BODY_BYTES } from '../admin/http.js';
import { statusLine } from '../shared/http.js';
import { answerWhole, bodyBytes, endWithLength, writeInPieces } from '../shared/uws-write.js';
import { answerAfterBody, answerAndClose, writeError } from './answers.js';
import { readRequestHead, type HeadProblem, type RequestHeadTarget } from './request-head.js';

export type AdminHandler = (req: AdminRequest) => Promise<AdminResponse>;

/** An admin head under construction: a repeated header keeps its first value. */
class AdminHead implements RequestHeadTarget {
  method = '';
  query = '';
  contentLength = -1;
  chunked = false;
  headError: HeadProblem | null = null;
  readonly headers: Record<string, string> = {};

  header(name: string, value: string): void {
    if (!(name in this.headers)) this.headers[name] = value;
  }

  /** RFC 9110 §7.6.1: fields the Connection header names describe this hop only (split mode forwards the rest). */
  dropConnectionFields(names: readonly string[]): void {
    for (const name of names) delete this.headers[name];
  }
}

/**
 * Bytes a streamed response may have waiting in uWS (written while the socket
 * would not take more) before its client is dropped as too slow: a stalled
 * subscriber must not make the process buffer the audit log for it forever. It
 * holds a burst (a poll hands a subscriber up to 1,000 entries at once; with
 * `log_outputs: full` an entry can be 64 KiB) without dropping a reader that
 * keeps up.
 */
export const STREAM_MAX_BUFFERED_BYTES = 8 * 1024 * 1024;

/** The sink of a stream whose client is gone: takes nothing. */
const CLOSED_SINK: StreamSink = { write: () => false, end: () => {} };

export function handleAdmin(res: HttpResponse, req: HttpRequest, admin: AdminHandler, trustForwardedFor: boolean): void {
  let aborted = false;
  /** Set while a streamed body is open: told when the client goes away. */
  let streamClosed: (() => void) | null = null;
  /** Tells a job still waiting for its turn (one-at-a-time.ts) that nobody waits for its answer. */
  const gone = new AbortController();
  res.onAborted(() => {
    aborted = true;
    streamClosed?.();
    gone.abort();
  });
  const url = req.getUrl();
  const head = new AdminHead();
  readRequestHead(req, url, head);
  if (head.headError === null && head.contentLength > MAX_ADMIN_BODY_BYTES) {
    head.headError = { code: 'payload_too_large', message: `The body must be at most ${MAX_ADMIN_BODY_BYTES} bytes.` };
  }
  if (head.headError !== null) {
    // Framing that cannot be trusted, or chunked, is answered and closed at once; a
    // Content-Length body refused with sound framing is read and dropped first.
    if (head.headError.code !== 'invalid_request' && head.contentLength > 0 && !head.chunked) answerAfterBody(res, head.headError.code, head.headError.message);
    else answerAndClose(res, head.headError.code, head.headError.message);
    return;
  }
  const { headers } = head;
  const request: AdminRequest = {
    method: head.method,
    path: url,
    query: new URLSearchParams(head.query),
    headers,
    body: Buffer.alloc(0),
    remoteAddress: (trustForwardedFor ? headers['x-forwarded-for']?.split(',').pop()?.trim() : undefined) || Buffer.from(res.getRemoteAddressAsText()).toString(),
    signal: gone.signal,
  };
  const respond = (response: AdminResponse): void => {
    if (aborted) {
      // A stream whose client left before it opened: opened on a closed sink and
      // closed at once, so what feeds it (a subscription, a passed-through body) stops.
      if (response.stream !== undefined) response.stream(CLOSED_SINK)();
      return;
    }
    if (response.stream !== undefined) {
      streamClosed = openStream(res, response, response.stream);
      return;
    }
    const head = (): void => {
      res.writeStatus(statusLine(response.status));
      for (const name in response.headers) res.writeHeader(name, response.headers[name]!);
    };
    if (response.status !== 204 && response.status !== 304 && request.method !== 'HEAD') {
      answerWhole(res, head, response.body); // a large body outside the head's cork (shared/uws-write.ts)
      return;
    }
    res.cork(() => {
      head();
      // A HEAD passed through to the admin process carries the admin's length.
      const reportsLength = request.method === 'HEAD' && response.status !== 204 && response.status !== 304 && response.headers['content-length'] === undefined;
      endWithLength(res, reportsLength ? bodyBytes(response.body) : -1);
    });
  };
  if (!(head.contentLength > 0 || head.chunked)) {
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
      // Found too large while chunked: answered and closed at once. Reading on to the
      // last chunk would let bytes after it be parsed as a next request first.
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

/**
 * Writes a streamed response's head at once (an SSE comment ends it, since uWS
 * sends the head with the first write) and hands the body's writer to the
 * handler. Every write is corked, in pieces that fit uWS's cork buffer
 * (shared/uws-write.ts; they come from timers and awaits); back-pressure:
 * once uWS refuses a write it buffers the rest, and past STREAM_MAX_BUFFERED_BYTES
 * the connection is closed instead of buffering on. Returns what onAborted calls.
 */
function openStream(res: HttpResponse, response: AdminResponse, stream: NonNullable<AdminResponse['stream']>): () => void {
  let over = false;
  let blockedBytes = -1; // -1: the socket takes what is written; else bytes written since it stopped
  let onClose: (() => void) | null = null;
  const finish = (): void => {
    if (over) return;
    over = true;
    onClose?.();
  };
  res.cork(() => {
    res.writeStatus(statusLine(response.status));
    for (const name in response.headers) res.writeHeader(name, response.headers[name]!);
    res.write(':\n\n');
  });
  const sink: StreamSink = {
    write(chunk) {
      if (over) return false;
      const accepted = writeInPieces(res, chunk);
      // Bytes, not a string's UTF-16 units: CJK text is 3 bytes a unit, and counted by units ~3× the bound waited.
      const bytes = typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length;
      if (blockedBytes >= 0) blockedBytes += bytes;
      else if (!accepted) {
        blockedBytes = bytes;
        res.onWritable(() => {
          // A write is what makes uWS send what it holds (measured: with a handler
          // that writes nothing, 9 of 13 MB stayed in uWS until the next event);
          // an SSE comment changes nothing for the reader.
          const drained = res.write(':\n\n');
          if (drained) blockedBytes = -1;
          return drained;
        });
      }
      if (blockedBytes > STREAM_MAX_BUFFERED_BYTES) {
        finish();
        res.close(); // too slow: dropped, not buffered for
        return false;
      }
      return true;
    },
    end() {
      if (over) return;
      finish();
      res.cork(() => res.end());
    },
  };
  onClose = stream(sink);
  return finish;
}
