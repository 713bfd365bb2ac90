// The upstream response, streamed back to the client through uWS with
// back-pressure both ways. This is undici's lowest-level handler (the shape its
// own core calls: onConnect / onHeaders / onData / onComplete / onError), so no
// adapter or header object is built per request; raw header buffers go straight
// to uWS. Status, headers and the first body chunk leave in one cork.
//
// The chunks undici hands over in one event-loop turn (a TLS read decrypts into
// 16 KiB pieces, each its own onData) are gathered and leave together at the
// turn's end, one send(2) for all of them instead of one each: on loopback a
// send costs the sender the receiver's TCP work too, and a 64 KiB answer took
// five or six (docs/performance.md, "Sends per answer"). At GATHER_MAX_BYTES
// they go at once, so a fast upstream and a slow client hold no more than that.
//
// A response without a length (chunked, an event stream) is written in pieces
// that fit uWS's cork buffer with their chunk framing, one cork and one send
// each: a larger write can lose its bytes (shared/uws-write.ts says how).
import { PROXIED_RESPONSE_HEADER_BYTES, PROXIED_RESPONSE_HEADERS, RESPONSE_DROP, statusLine } from '../shared/http.js';
import { CORK_PIECE_BYTES, endWithLength } from '../shared/uws-write.js';
import { answerEnded, END_REASONS, redactCapture, type EndReason, type ProxyExchange } from './exchange.js';
import type { UpstreamBudget } from './upstream-pools.js';
import { rebaseHeader, scopeSetCookie } from './response-urls.js';
import { SseEndpointRewriter } from './sse-endpoint.js';

type Resume = () => void;

const EMPTY = Buffer.alloc(0);
const NOTHING = (): void => {};

export class UpstreamResponse {
  readonly #ex: ProxyExchange;
  readonly #headOnly: boolean;
  /** The upstream answered an event stream: shutdown ends it complete (its client reconnects); any other body is cut. */
  #eventStream = false;
  readonly #captureCap: number;
  #status = 0;
  #rawHeaders: Buffer[] | null = null;
  #headWritten = false;
  /** About what the head takes in uWS's cork buffer (uWS's own headers and framing included). */
  #headBytes = 0;
  /** Content-Length of the upstream body, or -1 when it is chunked or close-delimited. */
  #length = -1;
  #resume: Resume | null = null;
  #ended = false;
  /** The chunk uWS could not take yet, and the write offset it started at. */
  #pending: Buffer | null = null;
  #pendingOffset = 0;
  #writableHooked = false;
  /** write() mode: uWS holds bytes it could not send yet. */
  #backpressured = false;
  /**
   * Chunks not yet handed to uWS: this turn's (one send at the turn's end, or
   * with the last bytes), or those that came while the client was behind (sent
   * on its drain). The body's last bytes join them only once released.
   */
  #gathered: Buffer[] = [];
  #gatheredBytes = 0;
  #gatheredScheduled = false;
  /** The body's last bytes, held until the call's record is journaled (sendLast). */
  #lastChunk: Buffer | null = null;
  readonly #writeChunkCorked = (): void => this.#writeChunk();
  readonly #endCorked = (): void => this.#end();
  /** The body's last bytes or its end, handed to the exchange's sendLast (they leave once the record is journaled). */
  #lastQueued = false;
  readonly #sendLastChunk = (): void => {
    this.#gathered.push(this.#lastChunk!);
    this.#lastChunk = null;
    this.#flush();
  };
  readonly #sendEnd = (): void => {
    this.#largeHeadFirst();
    if (this.#length < 0 && !this.#headOnly) {
      // write() mode: the last gathered bytes and the endpoint rewriter's held
      // ones go, the last piece with the end (a small answer's body and end
      // leave in one send); uWS takes them all (it buffers what the client cannot take yet).
      const held = this.#endpoint?.flush();
      if (held !== undefined && held.length > 0) this.#gathered.push(held);
      this.#writePieces(false, true);
    }
    this.#ex.res.cork(this.#endCorked);
  };
  /** The piece #writePieceCorked writes (or #end, with the end). */
  #piece: Buffer = EMPTY;
  readonly #writePieceCorked = (): void => {
    if (!this.#headWritten) this.#writeHead();
    if (!this.#ex.res.write(this.#piece)) this.#backpressured = true;
  };

  /** Tries the target's next checked address after a refused connection; false when none is left. */
  readonly #retry: (() => boolean) | null;

  /** Holds the call's upstream slot (upstream-pools.ts) until released, once. */
  #budget: UpstreamBudget | null;

  /** An event stream's opening, watched for the older MCP transport's endpoint event (sse-endpoint.ts). */
  #endpoint: SseEndpointRewriter | null = null;

  constructor(ex: ProxyExchange, captureCap: number, retry: (() => boolean) | null = null, budget: UpstreamBudget | null = null) {
    this.#ex = ex;
    this.#retry = retry;
    this.#budget = budget;
    this.#headOnly = ex.method === 'HEAD';
    this.#captureCap = captureCap;
  }

  /**
   * undici is about to write the request (it may have waited in the pool's
   * queue for a connection): not if the client has gone, or the call was
   * answered meanwhile (shutdown answers a call not yet upstream with 503), so
   * that what the agent and the audit were told is what the tool saw.
   */
  onConnect(abort: (reason?: Error) => void): void {
    if (this.#ex.aborted) abort(new Error('client aborted'));
    else if (this.#ex.finished) abort(new Error('the call was answered before it went upstream'));
    else {
      this.#ex.abortUpstream = abort;
      this.#ex.upstreamWritten = true;
    }
  }

  onHeaders(status: number, rawHeaders: Buffer[], resume: Resume): boolean {
    if (status < 200) return true; // 1xx: undici handles them; wait for the final status
    this.#status = status;
    this.#rawHeaders = rawHeaders;
    let eventStream = false; // this.#eventStream once read
    let headBytes = HEAD_OVERHEAD_BYTES;
    for (let i = 0; i < rawHeaders.length; i += 2) {
      const name = rawHeaders[i]!;
      headBytes += name.length + rawHeaders[i + 1]!.length + 4;
      if (name.length === 14 && name.toString('latin1').toLowerCase() === 'content-length') {
        const length = Number(rawHeaders[i + 1]!.toString('latin1'));
        this.#length = Number.isSafeInteger(length) && length >= 0 ? length : -1;
      } else if (name.length === 12 && name.toString('latin1').toLowerCase() === 'content-type') {
        eventStream = rawHeaders[i + 1]!.toString('latin1').trimStart().toLowerCase().startsWith('text/event-stream');
      } else if (name.length === 17 && name.toString('latin1').toLowerCase() === 'transfer-encoding') {
        // A transfer coding other than chunked (`gzip, chunked`): undici takes off only the chunking, so the bytes are compressed.
        if (!/^\s*chunked\s*$/i.test(rawHeaders[i + 1]!.toString('latin1'))) this.#ex.responseEncoded = true;
      } else if (name.length === 14 && this.#ex.mcpSessionId === null && name.toString('latin1').toLowerCase() === 'mcp-session-id') {
        const id = rawHeaders[i + 1]!.toString('latin1');
        if (id.length <= 256) this.#ex.mcpSessionId = id; // the server's answer to initialize names the session
      } else if (name.length === 10 && (name[0]! | 0x20) === 0x73 && name.toString('latin1').toLowerCase() === 'set-cookie') {
        const before = rawHeaders[i + 1]!.length;
        rawHeaders[i + 1] = Buffer.from(scopeSetCookie(rawHeaders[i + 1]!.toString('latin1'), this.#ex.proxyPrefix(), this.#ex.target!.path), 'latin1');
        headBytes += rawHeaders[i + 1]!.length - before;
      } else if (name.length === 16 || name.length === 8 || ((name.length === 4 || name.length === 7) && URL_HEADER_FIRST.has(name[0]! | 0x20))) {
        const lower = name.toString('latin1').toLowerCase();
        if (lower === 'content-encoding') {
          // Any line that is not identity: a later `identity` line does not undo a `gzip` one.
          if (rawHeaders[i + 1]!.toString('latin1').trim().toLowerCase() !== 'identity') this.#ex.responseEncoded = true;
        } else if (URL_HEADERS.has(lower)) {
          const before = rawHeaders[i + 1]!.length;
          // A redirect that keeps the query (a trailing slash added, a login bounce),
          // or a pagination or refresh link built from the request URL, would hand
          // the agent the injected query credential: it never gets it. Redacted
          // first, as the upstream wrote it: rebasing re-encodes characters.
          if (this.#ex.credential !== null) rawHeaders[i + 1] = redactCapture(rawHeaders[i + 1]!, this.#ex.credential.spellings, false);
          // Relative references resolved as the upstream means them, under the tool's prefix (response-urls.ts).
          const target = this.#ex.target!;
          const value = rawHeaders[i + 1]!.toString('latin1');
          const rebased = rebaseHeader(lower, value, `https://${target.authority}${target.path}`, this.#ex.proxyPrefix());
          if (rebased !== value) rawHeaders[i + 1] = Buffer.from(rebased, 'latin1'); // what it rebased is ASCII (a URL's serialisation); the rest as it came
          headBytes += rawHeaders[i + 1]!.length - before; // the head's size decides how its first piece is corked
        }
      }
    }
    const extra = this.#ex.answerHeaders;
    if (extra !== null) for (let i = 0; i < extra.length; i++) headBytes += Buffer.byteLength(extra[i]!) + 2;
    this.#headBytes = headBytes + PROXIED_RESPONSE_HEADER_BYTES;
    this.#resume = resume;
    this.#ex.statusCode = status;
    this.#ex.upstreamMs = performance.now() - this.#ex.forwardedAt;
    const mode = this.#ex.agent!.logOutputs;
    if (mode === 'hash') this.#ex.hashing = true;
    else if (mode === 'full') this.#ex.capture = EMPTY; // '' unless a body arrives
    this.#ex.upstream = this;
    this.#eventStream = eventStream;
    // Not a compressed one: its bytes are not events (no boundary to rewrite at,
    // and the opening comment line would corrupt the compressed stream).
    if (eventStream && !this.#ex.responseEncoded && !this.#headOnly && status !== 204 && status !== 304 && !this.#ex.aborted) {
      // One with a Content-Length is read by clients as events all the same: it
      // is watched too, and goes chunked (its endpoint event may change length).
      this.#length = -1;
      const target = this.#ex.target!;
      this.#endpoint = new SseEndpointRewriter(`https://${target.authority}${target.path}`, this.#ex.proxyPrefix(), this.#ex.credential?.spellings);
      // An event stream's head goes out now, not with its first event (which may
      // be seconds away). uWS sends a head only together with body bytes, so it
      // goes with an SSE comment line (":"), which every event-stream parser
      // ignores (WHATWG HTML §9.2.6).
      this.#largeHeadFirst();
      this.#ex.res.cork(() => this.#openStream());
    }
    return true;
  }

  /** Runs corked. */
  #openStream(): void {
    if (!this.#headWritten) this.#writeHead();
    this.#ex.res.write(SSE_OPENING);
  }

  /** Shutdown, or the agent deleted: end the response now, as a complete one when its framing allows (chunked), else cut. */
  endEarly(why: EndReason): void {
    const ex = this.#ex;
    if (ex.aborted || ex.finished) return;
    if (this.#lastQueued) {
      // Still waiting for the turn's journal write: it leaves then.
      if (ex.lastSendHeld) return;
      // Handed to uWS but held back by a slow client: a Content-Length
      // response cannot end early and be complete, so it is cut, as on an upstream failure.
      ex.bodyCut = true;
      ex.finish();
      ex.res.close();
      return;
    }
    // The client's response ends first: aborting upstream reports an error
    // (onError), which must find the end queued, not cut it.
    if ((this.#eventStream && this.#length < 0) || this.#headOnly) {
      this.#queueLast(this.#sendEnd); // a complete (chunked) response: an event-stream client reconnects
    } else if (!this.#headWritten && this.#gathered.length === 0) {
      // The agent gets the proxy's answer, not the upstream's head: no output of it is recorded.
      ex.hashing = false;
      ex.capture = null;
      answerEnded(ex, why, 'allowed');
    } else {
      // Any other body (a Content-Length one, or chunked JSON still coming)
      // cannot end early and look complete: cut, as on an upstream failure,
      // after what this turn gathered (the client sees the bytes that came, as
      // when they had left at once).
      this.#flush();
      ex.bodyCut = true;
      ex.body?.detach();
      ex.finish();
      ex.res.close();
    }
    ex.abortUpstream?.(new Error(END_REASONS[why]));
  }

  onData(chunk: Buffer): boolean {
    const ex = this.#ex;
    if (ex.aborted || this.#ended || this.#lastQueued) return true;
    ex.responseBytes += chunk.length;
    if (ex.hashing) ex.hashChunk(chunk, ex.responseBytes === chunk.length && chunk.length === this.#length);
    else if (ex.agent!.logOutputs === 'full') this.#capture(chunk);
    if (this.#endpoint !== null) {
      // The audit keeps the upstream's bytes; the client gets the endpoint event rewritten.
      chunk = this.#endpoint.feed(chunk);
      if (chunk.length === 0) return true;
    }
    if (this.#length >= 0 && !this.#headOnly && ex.responseBytes >= this.#length) {
      this.#lastChunk = chunk;
      this.#queueLast(this.#sendLastChunk); // the body's last bytes, with what this turn gathered
      return true;
    }
    this.#gathered.push(chunk);
    this.#gatheredBytes += chunk.length;
    const blocked = this.#blocked;
    if (!blocked && this.#gatheredBytes >= GATHER_MAX_BYTES) {
      // libuv reads a socket up to 32 times a turn: a fast upstream can hand
      // over megabytes before the turn ends. They go now, and a client that
      // cannot take them pauses the upstream at once, as without gathering.
      this.#flush();
      return !this.#blocked;
    }
    if (!blocked && !this.#gatheredScheduled) {
      this.#gatheredScheduled = true;
      scheduleGathered(this);
    }
    // A client that cannot take more pauses the upstream; onWritable sends what is gathered.
    return !blocked;
  }

  /** sendGathered threw (uWS refuses a response it no longer holds): this call ends here, cut. */
  abandon(err: Error): void {
    this.#gathered = [];
    this.#gatheredBytes = 0;
    const ex = this.#ex;
    ex.abortUpstream?.(err);
    if (ex.finished) return;
    ex.statusCode = 502;
    ex.finish();
    if (ex.aborted) return;
    try {
      ex.res.close();
    } catch {
      // already gone
    }
  }

  /** The turn is over: what it gathered goes in one write (runGathered). */
  sendGathered(): void {
    this.#gatheredScheduled = false;
    const ex = this.#ex;
    if (this.#gathered.length === 0 || ex.aborted || ex.finished || this.#ended) return;
    // Once the last bytes are queued, their send takes what is gathered (or,
    // the client being behind, leaves it to onWritable, as it does here).
    if (this.#lastQueued) return;
    this.#flush();
  }

  /** The client is behind: uWS holds bytes of ours (a tryEnd's rest, or write()s it reported). */
  get #blocked(): boolean {
    return this.#pending !== null || this.#backpressured;
  }

  /** Sends the gathered chunks, unless the client is behind (then onWritable does). Not corked. */
  #flush(): void {
    if (this.#blocked || this.#gathered.length === 0) return;
    this.#largeHeadFirst();
    if (this.#length >= 0 && !this.#headOnly) this.#ex.res.cork(this.#writeChunkCorked);
    else this.#writePieces(true);
  }

  /**
   * A head that would not leave a piece room in uWS's cork buffer is written
   * now, not corked: uWS then sends each of its parts at once and keeps what
   * the socket cannot take, where a corked one could lose a part
   * (shared/uws-write.ts). Rare (heads run to a few hundred bytes), and a few
   * sends more when it happens.
   */
  #largeHeadFirst(): void {
    if (!this.#headWritten && this.#headBytes > CORK_PIECE_BYTES - MIN_PIECE_BYTES) this.#writeHead();
  }

  /**
   * write() mode, not corked: the gathered chunks in pieces that fit uWS's cork
   * buffer with their framing (the file's opening says why), each its own cork.
   * `untilBlocked`: the rest waits for onWritable once uWS reports the client
   * behind; else every piece goes (the end: uWS buffers what is left).
   * `keepLast`: the last piece stays in #piece, for #end.
   */
  #writePieces(untilBlocked: boolean, keepLast = false): void {
    const data = this.#takeGathered();
    if (data === null) return;
    const res = this.#ex.res;
    let at = 0;
    while (at < data.length) {
      const room = this.#headWritten ? CORK_PIECE_BYTES : CORK_PIECE_BYTES - this.#headBytes;
      this.#piece = at === 0 && data.length <= room ? data : data.subarray(at, at + room);
      at += this.#piece.length;
      if (keepLast && at === data.length) return;
      res.cork(this.#writePieceCorked);
      if (this.#backpressured && untilBlocked && at < data.length) {
        this.#gathered.push(data.subarray(at));
        this.#gatheredBytes = data.length - at;
        break;
      }
    }
    this.#piece = EMPTY;
    if (this.#backpressured) this.#hookWritable();
  }

  /** The gathered chunks as one buffer; null when there are none. */
  #takeGathered(): Buffer | null {
    const gathered = this.#gathered;
    if (gathered.length === 0) return null;
    this.#gathered = [];
    this.#gatheredBytes = 0;
    return gathered.length === 1 ? gathered[0]! : Buffer.concat(gathered);
  }

  /** The response's last send: after the call's audit record (ProxyExchange.sendLast). */
  #queueLast(send: () => void): void {
    this.#lastQueued = true;
    this.#ex.sendLast(send);
  }

  #released(): void {
    const budget = this.#budget;
    if (budget === null) return;
    this.#budget = null;
    budget.release();
  }

  onComplete(): void {
    this.#released();
    const ex = this.#ex;
    ex.abortUpstream = null; // the upstream request is over (its abort closure holds undici's request: see #done)
    this.#resume = null; // undici's parser may serve another request on this socket now
    if (ex.aborted || ex.finished || this.#lastQueued) return;
    this.#queueLast(this.#sendEnd);
  }

  onError(err: Error): void {
    this.#released();
    const ex = this.#ex;
    ex.abortUpstream = null; // over; a retry below sets its own
    if (ex.aborted || ex.finished || this.#lastQueued) return;
    // Body bytes gathered this turn came before the failure: they go out first
    // (unless the client is behind), so the client sees the head and a cut
    // body, as when they had left at once.
    this.#flush();
    this.#resume = null;
    if ((this.#status === 304 || this.#status === 204) && ex.responseBytes === 0 && (err as NodeJS.ErrnoException).code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH') {
      // A 304 may carry the Content-Length a 200 would have (RFC 9110 §8.6; Node's
      // http server and ASP.NET send one): undici 7 exempts only HEAD from its
      // length check and reports the body a 304 never has. The answer is whole.
      this.#queueLast(this.#sendEnd);
      return;
    }
    const timeout = isTimeout(err);
    if (!this.#headWritten && (err as NodeJS.ErrnoException).code === 'UND_ERR_INVALID_ARG') {
      // undici's dispatch reports a header, path or method it will not put on the
      // wire through onError, not by throwing (forward.ts's catch never sees it):
      // the caller's request is at fault, so 400 (its message names the header,
      // never a value; a header value uWS decoded from obs-text lands here).
      ex.answerError('invalid_request', `The request cannot be forwarded: ${err.message}.`);
      return;
    }
    if (!this.#headWritten && this.#retry !== null && REFUSED_CODES.has((err as NodeJS.ErrnoException).code ?? '') && this.#retry()) return;
    if (!this.#headWritten) {
      // The agent gets the proxy's answer, not the upstream's head: no output of it is recorded.
      ex.hashing = false;
      ex.capture = null;
      ex.answerError(
        timeout ? 'upstream_timeout' : 'upstream_unreachable',
        timeout ? 'The target did not answer in time.' : `The target could not be reached (${describe(err)}).`,
        undefined,
        'allowed',
      );
      return;
    }
    // Part of the response is out: all we can do is cut the connection so the
    // client sees a truncated body rather than a complete-looking one. The
    // exchange is finished (audited 504/502) before the close: uWS runs the
    // onAborted handler inside close(), which would record it as client-gone (499).
    ex.statusCode = timeout ? 504 : 502;
    ex.bodyCut = true;
    ex.body?.detach();
    ex.finish();
    ex.res.close();
  }

  #writeHead(): void {
    this.#headWritten = true;
    const res = this.#ex.res;
    res.writeStatus(statusLine(this.#status));
    const raw = this.#rawHeaders!;
    // One pass; names are lower-cased once. A Connection header (rare in
    // responses) names more fields to drop, which may come before it: then a
    // second pass writes the rest.
    const names: string[] = new Array(raw.length >> 1);
    let connectionTokens: string[] | null = null;
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i]!.toString('latin1').toLowerCase();
      names[i >> 1] = name;
      if (name === 'connection') connectionTokens = raw[i + 1]!.toString('latin1').toLowerCase().split(',').map((s) => s.trim());
    }
    for (let i = 0; i < raw.length; i += 2) {
      const name = names[i >> 1]!;
      if (RESPONSE_DROP.has(name) || (connectionTokens !== null && connectionTokens.includes(name))) continue;
      res.writeHeader(raw[i]!, raw[i + 1]!);
    }
    for (const [name, value] of PROXIED_RESPONSE_HEADERS) res.writeHeader(name, value);
    const extra = this.#ex.answerHeaders;
    if (extra !== null) for (let i = 0; i < extra.length; i += 2) res.writeHeader(extra[i]!, extra[i + 1]!);
  }

  /**
   * Runs corked, with a Content-Length: sends the gathered chunks, unless the
   * client is behind (then onWritable does). tryEnd is safe at any size: what
   * uWS could not send is left to us (#pending), never dropped.
   */
  #writeChunk(): void {
    const res = this.#ex.res;
    if (this.#pending !== null) return;
    const chunk = this.#takeGathered();
    if (chunk === null) return;
    if (!this.#headWritten) this.#writeHead();
    const offset = res.getWriteOffset();
    if (offset + chunk.length >= this.#length) this.#ex.body?.detach();
    const [ok, done] = res.tryEnd(chunk, this.#length);
    if (done) {
      this.#done();
    } else if (!ok) {
      this.#pending = chunk;
      this.#pendingOffset = offset;
      this.#hookWritable();
    }
  }

  #hookWritable(): void {
    if (this.#writableHooked) return;
    this.#writableHooked = true;
    this.#ex.res.onWritable((offset) => this.#onWritable(offset));
  }

  #onWritable(offset: number): boolean {
    if (this.#ex.aborted || this.#ex.finished) return true;
    const pending = this.#pending;
    if (pending === null) {
      // write() mode, or bytes uWS took into its cork buffer and could not all
      // send: it holds them, and it does not drain its own buffer while the
      // response has an onWritable handler. Any write drains it first: what
      // was gathered meanwhile, or, with nothing gathered, an empty cork (its
      // uncork writes the buffer off; a part left re-arms this event). Without
      // it the buffer's bytes waited for the upstream's next ones: a stream's
      // last event could wait minutes.
      this.#backpressured = false;
      if (this.#gathered.length > 0) this.#flush();
      else this.#ex.res.cork(NOTHING);
      if (!this.#blocked && !this.#ended) this.#resumeUpstream();
      return true;
    }
    const [ok, done] = this.#ex.res.tryEnd(pending.subarray(offset - this.#pendingOffset), this.#length);
    if (done) {
      this.#pending = null;
      this.#done();
    } else if (ok) {
      this.#pending = null;
      this.#flush();
      if (this.#pending === null && !this.#ended) this.#resumeUpstream();
    }
    return ok;
  }

  #resumeUpstream(): void {
    const resume = this.#resume;
    if (resume !== null) resume();
  }

  /** Runs corked: the upstream body is complete. */
  #end(): void {
    const res = this.#ex.res;
    if (!this.#headWritten) this.#writeHead();
    if (this.#ended) return;
    this.#ex.body?.detach();
    const status = this.#status;
    if (this.#headOnly || status === 204 || status === 304) {
      // No body: HEAD reports the length the GET would have.
      endWithLength(res, this.#headOnly ? this.#length : -1);
      this.#done();
    } else if (this.#length >= 0) {
      // All bytes were handed to tryEnd; `done` fires there, or on the last onWritable.
      if (this.#length === 0) {
        res.end();
        this.#done();
      }
    } else {
      // write() mode: #sendEnd wrote the other pieces.
      const last = this.#piece;
      this.#piece = EMPTY;
      if (last.length > 0) res.write(last);
      res.end();
      this.#done();
    }
  }

  #done(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#ex.finish();
    // Nothing reads these once the answer is out. An exchange that reaches V8's
    // old space and dies there keeps what it points to alive through every
    // scavenge until the next full GC (docs/performance.md, garbage collection):
    // dropping the upstream's head and handler here cut the bytes promoted per
    // scavenge from ~2.5 to ~1.5 MB under the bench's load.
    this.#rawHeaders = null;
    this.#lastChunk = null;
    this.#gathered = [];
    this.#gatheredBytes = 0;
    this.#ex.upstream = null;
  }

  #capture(chunk: Buffer): void {
    const ex = this.#ex;
    if (ex.captureTruncated) return;
    let capture = ex.capture;
    if (capture === null || capture === EMPTY) {
      capture = Buffer.allocUnsafe(this.#length >= 0 ? Math.min(this.#length, this.#captureCap) : this.#captureCap);
      ex.capture = capture;
    }
    const take = Math.min(capture.length - ex.captureLength, chunk.length);
    chunk.copy(capture, ex.captureLength, 0, take);
    ex.captureLength += take;
    if (take < chunk.length) ex.captureTruncated = true;
  }
}

/** What one response gathers before it sends without waiting for the turn's end: four TLS records. */
const GATHER_MAX_BYTES = 64 * 1024;

/** A head that leaves less room than this for a first piece is written before any cork (#largeHeadFirst). */
const MIN_PIECE_BYTES = 1024;

/** Response headers that carry URLs the upstream may build from the request's, query credential and all. */
const URL_HEADERS: ReadonlySet<string> = new Set(['location', 'content-location', 'link', 'refresh']);
/** The first letters of the short ones (link, refresh), lower-cased: `date`, `vary` and `etag` are not lower-cased to be compared. */
const URL_HEADER_FIRST: ReadonlySet<number> = new Set([0x6c, 0x72]);
/** What uWS adds to a head (status line, Date, its mark, Transfer-Encoding or Content-Length, the blank line), with room to spare. */
const HEAD_OVERHEAD_BYTES = 160;

/** Responses that gathered chunks this turn; one setImmediate sends them all. */
let gatheredResponses: UpstreamResponse[] = [];

function scheduleGathered(response: UpstreamResponse): void {
  if (gatheredResponses.length === 0) setImmediate(runGathered);
  gatheredResponses.push(response);
}

function runGathered(): void {
  const responses = gatheredResponses;
  gatheredResponses = [];
  for (let i = 0; i < responses.length; i++) {
    // Outside undici's callbacks now: one response's failure must not stop the others or the process.
    try {
      responses[i]!.sendGathered();
    } catch (err) {
      responses[i]!.abandon(err as Error);
    }
  }
}

/** Sent right after an event stream's head: an SSE comment line, ignored by clients. */
const SSE_OPENING = ':\n';

/** Connection failures that sent the upstream nothing: the next address may be tried. */
const REFUSED_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL']);

// A connect timeout is a failure to connect (502, like a refusal); 504 is for an
// upstream that accepted the call and then did not answer in time.
const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);
function isTimeout(err: Error): boolean {
  return TIMEOUT_CODES.has((err as NodeJS.ErrnoException).code ?? '');
}

/** A short, secret-free description of a connection failure. */
function describe(err: Error): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'ETIMEDOUT') return 'connect timeout';
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return 'connection reset';
  if (code !== undefined && /^(ERR_TLS|CERT_|UNABLE_TO|DEPTH_ZERO|SELF_SIGNED|ERR_SSL)/.test(code)) return `TLS failure: ${code}`;
  if (code !== undefined && /^[A-Z_]+$/.test(code)) return code;
  return 'connection failed';
}
