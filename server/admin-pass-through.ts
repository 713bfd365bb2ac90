// Split mode: a proxy process passes every admin path to the admin process
// (ADMIN_URL) over a keep-alive pool, adding X-Forwarded-For so the admin's login
// limiter sees the client's address.
import type { Dispatcher } from 'undici';
import { Pool } from '../shared/undici.js';
import type { AdminRequest, AdminResponse } from '../admin/http.js';
import { errorBody } from '../shared/errors.js';
import { PASS_THROUGH_DROP as DROP } from '../shared/http.js';

export interface AdminPassThrough {
  handle(req: AdminRequest): Promise<AdminResponse>;
  /** Ends the event streams passed through (shutdown's first step: the pool's close waits for open bodies). */
  endStreams(): void;
  close(): Promise<void>;
}

/** Event streams one proxy passes through at once, at most: each holds a connection to the admin process. */
export const PASS_THROUGH_MAX_STREAMS = 256;

const STREAM_PATH = /^\/audit\/stream\/?$/;

/** How long a stopping proxy waits for admin requests it passes through before it cuts them. */
const CLOSE_WAIT_MS = 1000;

export interface PassThroughLimits {
  /**
   * How long a request may wait for the head of the admin's answer, counted from
   * its arrival here: time queued behind the pool's busy connections included
   * (undici's headersTimeout starts only once a connection takes the request).
   */
  answerWithinMs: number;
  /** Admin requests (event streams aside) passed through at once, queued ones included; past it, 503 at once. */
  maxPending: number;
}

/**
 * An admin process that stops answering but keeps its sockets open holds at most
 * 256 requests here (bodies ≤ 1 MiB), each for at most 60 s. Without the bounds
 * the queue behind the pool's 64 connections grew without end, and its tail
 * waited one headersTimeout for each round of 64 ahead of it.
 */
export const PASS_THROUGH_LIMITS: PassThroughLimits = { answerWithinMs: 60_000, maxPending: 256 };

export function createAdminPassThrough(adminUrl: string, limits: PassThroughLimits = PASS_THROUGH_LIMITS): AdminPassThrough {
  const pool = new Pool(adminUrl, { connections: 64, headersTimeout: 60_000, bodyTimeout: 60_000 });
  // Event streams have a pool of their own: each holds its connection for as long
  // as the client listens, which must not starve the admin API's 64. bodyTimeout:
  // a stream carries a comment at least every 15 s, so 60 s of silence is a dead admin.
  const streamPool = new Pool(adminUrl, { connections: PASS_THROUGH_MAX_STREAMS, headersTimeout: 60_000, bodyTimeout: 60_000 });
  const streams = new Set<() => void>();
  let closed = false;
  let pending = 0;
  return {
    async handle(req): Promise<AdminResponse> {
      const isStream = STREAM_PATH.test(req.path);
      if (isStream && (closed || streams.size >= PASS_THROUGH_MAX_STREAMS)) {
        return { status: 503, headers: { 'content-type': 'application/json', 'retry-after': '5' }, body: errorBody('unavailable', closed ? 'The service is shutting down.' : 'Too many audit streams are open through this proxy; retry later.') };
      }
      if (isStream) return passOn(req, true);
      if (pending >= limits.maxPending) {
        return { status: 503, headers: { 'content-type': 'application/json', 'retry-after': '5' }, body: errorBody('unavailable', 'Too many admin requests are waiting for the admin service; retry later.') };
      }
      // Counted until both the answer is given and undici lets the request go: one
      // cut at its deadline while still queued leaves undici's queue only once a
      // connection takes it (undici 7 rejects an aborted queued request then).
      pending++;
      let holds = 2;
      const release = (): void => {
        if (--holds === 0) pending--;
      };
      try {
        return await passOn(req, false, release);
      } finally {
        release();
      }
    },
    endStreams() {
      closed = true;
      for (const end of [...streams]) end();
    },
    close: async () => {
      // close() waits for requests in flight, which a stalled admin process holds
      // up to the 60 s timeouts: after CLOSE_WAIT_MS they are cut (the audit is
      // flushed by now; such a request is no proxied call).
      const closed = Promise.all([pool.close(), streamPool.close()]);
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), CLOSE_WAIT_MS);
      });
      const outcome = await Promise.race([closed.then(() => 'closed' as const), late]);
      clearTimeout(timer);
      if (outcome === 'late') await Promise.all([pool.destroy(), streamPool.destroy()]);
    },
  };

  async function passOn(req: AdminRequest, isStream: boolean, released?: () => void): Promise<AdminResponse> {
    const headers: Record<string, string> = {};
    for (const name in req.headers) if (!DROP.has(name)) headers[name] = req.headers[name]!;
    headers['x-forwarded-for'] = req.remoteAddress;
    const query = req.query.toString();
    // The deadline is for the answer's head: a body then has bodyTimeout between
    // chunks, and an event stream lives for as long as its client reads it.
    const deadline = new AbortController();
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      deadline.abort();
    }, limits.answerWithinMs);
    // The client left: the admin process is told by the request's end (a job still waiting gives its place up).
    req.signal?.addEventListener('abort', () => deadline.abort(), { once: true });
    try {
      let res: Dispatcher.ResponseData;
      try {
        const request = (isStream ? streamPool : pool).request({
          method: req.method as 'GET',
          path: query.length > 0 ? `${req.path}?${query}` : req.path,
          headers,
          body: req.body.length > 0 ? req.body : null,
          signal: deadline.signal,
        });
        request.then(
          (answer) => {
            if (late) answer.body.destroy(); // its head came after the 503
            released?.();
          },
          () => released?.(),
        );
        // The deadline answers at once: undici rejects an aborted request still in
        // its queue only when a connection takes it, which may be much later.
        const timedOut = new Promise<never>((_, reject) => {
          deadline.signal.addEventListener('abort', () => reject(new Error('the admin service did not answer in time')), { once: true });
        });
        res = await Promise.race([request, timedOut]);
      } finally {
        clearTimeout(timer);
      }
      const out: Record<string, string> = {};
      for (const [name, value] of Object.entries(res.headers)) {
        if (!DROP.has(name) && name !== 'date' && value !== undefined) out[name] = Array.isArray(value) ? value.join(', ') : value;
      }
      // A HEAD answer has no body to measure: the admin's Content-Length (a GET's) goes on as it is.
      if (req.method === 'HEAD' && typeof res.headers['content-length'] === 'string') out['content-length'] = res.headers['content-length'];
      if (/^text\/event-stream\b/i.test(out['content-type'] ?? '') && req.method !== 'HEAD') {
        // GET /audit/stream: passed on chunk by chunk as the admin writes it, never buffered whole.
        const body = res.body;
        return {
          status: res.statusCode,
          headers: out,
          body: '',
          stream: (sink) => {
            const end = (): void => {
              streams.delete(end);
              body.destroy();
              sink.end();
            };
            if (closed) {
              end(); // shutdown began while its head was on the way
              return end;
            }
            streams.add(end);
            body.on('data', (chunk: Buffer) => {
              if (!sink.write(chunk)) end(); // the client went away or was too slow
            });
            body.on('end', end);
            body.on('error', end);
            return end; // the client went away: stop reading from the admin
          },
        };
      }
      // Its chunks as they came, written on without being joined (a GET /audit page can be 150 MB).
      const pieces: Buffer[] = [];
      for await (const chunk of res.body) pieces.push(chunk as Buffer);
      return { status: res.statusCode, headers: out, body: pieces };
    } catch (err) {
      // undici refuses what it cannot put on the wire (a method such as CONNECT,
      // a control character): the request is at fault, not the admin process.
      if ((err as { code?: string }).code === 'UND_ERR_INVALID_ARG' || (err as Error).name === 'NotSupportedError') {
        return { status: 400, headers: { 'content-type': 'application/json' }, body: errorBody('invalid_request', `The request cannot be passed to the admin service: ${(err as Error).message}.`) };
      }
      const message = late ? 'The admin service did not answer in time; retry later.' : 'The admin service cannot be reached; retry later.';
      return { status: 503, headers: { 'content-type': 'application/json', 'retry-after': '5' }, body: errorBody('unavailable', message) };
    }
  }
}
