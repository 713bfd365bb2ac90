// How a chunked body (uWS's write()) is written safely: in pieces that fit
// uWS's cork buffer with their chunk framing, one cork each.
//
// uWS v20.30 corks a write() chunk's framing; a chunk that does not fit the
// 16 KiB cork buffer (LoopData::CORK_BUFFER_SIZE) goes through
// AsyncSocket::uncork(src), which returns when the corked framing cannot all be
// sent, as when the client is behind, without writing src: the client gets a
// chunk header without its bytes (docs/performance.md, "Two uWS faults"). A
// piece that fits is copied into the cork buffer, and what its uncork cannot
// send uWS keeps. tryEnd (a known length) is not affected: it reports what it
// did not take. end(body) is: a large body is ended outside a cork (answerWhole).
import type { HttpResponse } from 'uWebSockets.js';

/** The most one corked write() may carry: the cork buffer less the framing (up to 12 bytes) and a margin. */
export const CORK_PIECE_BYTES = 16 * 1024 - 64;

/** Whether a chunk surely fits one corked write (a string's UTF-8 is at most 3 bytes a UTF-16 unit). */
export function fitsOneCork(chunk: string | Uint8Array): boolean {
  return (typeof chunk === 'string' ? chunk.length * 3 : chunk.length) <= CORK_PIECE_BYTES;
}

/**
 * Writes a body chunk of any size, not corked yet, in pieces of at most
 * CORK_PIECE_BYTES, one cork each; false when uWS holds bytes it could not send
 * (it keeps them all: the client is behind).
 */
export function writeInPieces(res: HttpResponse, chunk: string | Uint8Array): boolean {
  let accepted = true;
  if (fitsOneCork(chunk)) {
    res.cork(() => {
      accepted = res.write(chunk);
    });
    return accepted;
  }
  const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
  for (let at = 0; at < bytes.length; at += CORK_PIECE_BYTES) {
    const piece = bytes.subarray(at, at + CORK_PIECE_BYTES);
    res.cork(() => {
      if (!res.write(piece)) accepted = false;
    });
  }
  return accepted;
}

/**
 * Answers with a head (`head` writes its status and headers) and a whole body,
 * not corked yet: a body that fits one cork leaves with the head, in one send;
 * a larger one is ended after the head's cork, so that uWS writes it straight
 * to the socket and keeps what the client cannot take yet.
 */
export function answerWhole(res: HttpResponse, head: () => void, body: string | Uint8Array | readonly Uint8Array[]): void {
  if (typeof body !== 'string' && !(body instanceof Uint8Array)) {
    answerPieces(res, head, body);
    return;
  }
  const large = !fitsOneCork(body);
  res.cork(() => {
    head();
    if (!large) res.end(body);
  });
  if (large) res.end(body);
}

/**
 * Answers with a head and a body in pieces, never joined: each is offered to
 * tryEnd (Content-Length their sum), and what the client cannot take yet waits
 * for onWritable, from where uWS stopped (getWriteOffset). Joined, a GET /audit
 * page of 150 MB took 90 ms to copy into one buffer, and end() 90 ms more to
 * copy what the client could not take yet into uWS's.
 */
function answerPieces(res: HttpResponse, head: () => void, pieces: readonly Uint8Array[]): void {
  let total = 0;
  for (const piece of pieces) total += piece.length;
  let index = 0;
  let pieceStart = 0; // where pieces[index] starts in the body
  const send = (): boolean => {
    while (index < pieces.length) {
      const piece = pieces[index]!;
      const sent = res.getWriteOffset() - pieceStart;
      const [ok, done] = res.tryEnd(sent === 0 ? piece : piece.subarray(sent), total);
      if (done) return true;
      if (!ok) return false;
      pieceStart += piece.length;
      index++;
    }
    return true;
  };
  res.cork(() => {
    head();
    if (total === 0) res.end();
    else if (!send()) res.onWritable(send);
  });
}

/** The bytes of a whole body (a HEAD answer's Content-Length). */
export function bodyBytes(body: string | Uint8Array | readonly Uint8Array[]): number {
  if (typeof body === 'string') return Buffer.byteLength(body);
  if (body instanceof Uint8Array) return body.length;
  let total = 0;
  for (const piece of body) total += piece.length;
  return total;
}

/**
 * Ends a response without a body, with `Content-Length: length` when it is not
 * negative (a HEAD's: the bytes the GET's body would have, RFC 9110 §9.3.2).
 * Written by hand: uWS v20.30's endWithoutBody(length) leaves the response
 * half-open (the connection's next request closes it), it takes any first
 * argument, `undefined` too, as a length, and with a length and
 * `closeConnection` it aborts the process.
 */
export function endWithLength(res: HttpResponse, length: number): void {
  if (length >= 0) res.writeHeader('content-length', String(length));
  res.endWithoutBody();
}

/** Whether endAnswer sends the body: not to a HEAD, unless the connection closes after it (endWithLength cannot close). */
export function answerCarriesBody(headOnly: boolean, closeConnection: boolean): boolean {
  return !headOnly || closeConnection;
}

/**
 * Ends an answer the service writes itself: with `body`, or, to a HEAD
 * (`headOnly`), with no body and the length the GET's would have. A body after
 * a HEAD's head is read by the client as the start of its next answer on the
 * connection. An answer that closes the connection keeps its body.
 */
export function endAnswer(res: HttpResponse, body: string, headOnly: boolean, closeConnection = false): void {
  if (answerCarriesBody(headOnly, closeConnection)) res.end(body, closeConnection);
  else endWithLength(res, Buffer.byteLength(body));
}
