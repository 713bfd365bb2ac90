// The request body, read from uWS as it arrives. uWS hands each chunk in an
// ArrayBuffer that it neuters when the callback returns, so every chunk is copied.
//
// A body whose Content-Length is at most SMALL_BODY_BYTES is collected into one
// buffer of exactly that size and sent upstream in one write (like nginx's
// client_body_buffer_size); anything larger, or chunked, streams through a
// Readable whose back-pressure pauses and resumes the client's socket.
import { Readable } from 'node:stream';
import type { HttpResponse } from 'uWebSockets.js';

export const SMALL_BODY_BYTES = 64 * 1024;
const STREAM_HIGH_WATER_MARK = 64 * 1024;

function ignoreError(): void {}

export class RequestBody {
  readonly #res: HttpResponse;
  /** Bytes received so far. */
  received = 0;
  complete = false;
  /** Small bodies: the whole body, filled as it arrives. */
  buffer: Buffer | null = null;
  /** Large or chunked bodies: what undici reads. */
  stream: Readable | null = null;
  #paused = false;
  #discarding = false;
  /** Set once the response is ended or aborted: uWS forbids touching it after. */
  #detached = false;
  #onComplete: (() => void) | null = null;

  constructor(res: HttpResponse, contentLength: number) {
    this.#res = res;
    if (contentLength >= 0 && contentLength <= SMALL_BODY_BYTES) {
      this.buffer = Buffer.allocUnsafe(contentLength);
    } else {
      this.stream = new Readable({
        highWaterMark: STREAM_HIGH_WATER_MARK,
        read: () => {
          if (this.#paused && !this.#detached) {
            this.#paused = false;
            this.#res.resume();
          }
        },
      });
      // abort() destroys it with an error, which undici hears once it reads the
      // body; before that (a lookup, a cache miss, a wait for a connection)
      // nobody listens, and an unheard 'error' would end the process.
      this.stream.on('error', ignoreError);
    }
    res.onData((chunk, isLast) => this.#onData(chunk, isLast));
  }

  #onData(chunk: ArrayBuffer, isLast: boolean): void {
    const length = chunk.byteLength;
    if (!this.#discarding) {
      if (this.buffer !== null) {
        // uWS has already checked the length against Content-Length: it never sends more.
        this.buffer.set(new Uint8Array(chunk), this.received);
      } else if (this.stream !== null && length > 0) {
        if (!this.stream.push(Buffer.from(new Uint8Array(chunk))) && !this.#detached) {
          this.#paused = true;
          this.#res.pause();
        }
      }
    }
    this.received += length;
    if (isLast) {
      this.complete = true;
      if (!this.#discarding) this.stream?.push(null);
      // Nothing more will arrive for this request; a paused socket would stall the
      // connection's next request, and uWS forbids resume() once the response ended.
      if (this.#paused && !this.#detached) {
        this.#paused = false;
        this.#res.resume();
      }
      const done = this.#onComplete;
      this.#onComplete = null;
      done?.();
    }
  }

  /**
   * The whole body in memory, for a policy that reads it (MCP-aware rules):
   * null when it grows past `maxBytes` (or the client went away). A streamed
   * body becomes a buffered one, which is what is then forwarded.
   */
  collect(maxBytes: number): Promise<Buffer | null> {
    if (this.buffer !== null) {
      const buffer = this.buffer;
      return new Promise((resolve) => this.whenComplete(() => resolve(buffer)));
    }
    const stream = this.stream!;
    return new Promise((resolve) => {
      const chunks: Buffer[] = [];
      let bytes = 0;
      const settle = (value: Buffer | null) => {
        stream.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
        resolve(value);
      };
      const onData = (chunk: Buffer) => {
        bytes += chunk.length;
        if (bytes > maxBytes) settle(null);
        else chunks.push(chunk);
      };
      const onEnd = () => {
        this.buffer = Buffer.concat(chunks, bytes);
        this.stream = null;
        settle(this.buffer);
      };
      const onError = () => settle(null);
      const onClose = () => settle(null);
      stream.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
    });
  }

  /** Calls `done` once the whole body has arrived (at once when it already has). */
  whenComplete(done: () => void): void {
    if (this.complete) done();
    else this.#onComplete = done;
  }

  /**
   * The response is about to end: drop whatever else of the body arrives, and
   * make sure the socket reads on. Must run before the response's last write,
   * since uWS forbids touching the response after it.
   */
  detach(): void {
    if (this.#detached) return;
    if (this.complete) {
      this.#detached = true;
      return;
    }
    this.#discarding = true;
    this.#onComplete = null;
    if (this.#paused && !this.#detached) {
      this.#paused = false;
      this.#res.resume();
    }
    this.#detached = true;
    if (this.stream !== null && !this.stream.destroyed) this.stream.destroy();
  }

  /** The client went away: nothing more will arrive, and the response is gone. */
  abort(): void {
    this.#detached = true;
    this.#discarding = true;
    this.#onComplete = null;
    if (this.stream !== null && !this.stream.destroyed) this.stream.destroy(new Error('client aborted'));
  }
}
