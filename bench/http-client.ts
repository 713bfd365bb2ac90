// One request at a time, timed: for probes, SSE time-to-first-event and the big
// download. Keep-alive agents, so a sequence of requests measures the proxy and
// not the TCP/TLS handshake; the HTTPS agent trusts the test CA only.
//
// A kept-alive socket can be closed by the server (uWS: 10 s idle) just as a
// request is written on it; the request then fails with no answer. Probes come
// about every 10 s in a quick run, so this race lost a round in three runs
// ("socket hang up"). As Node's docs advise, such a request is sent again once,
// on a new socket: nothing of it reached a handler.
import { readFileSync } from 'node:fs';
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { CA_FILE } from './paths.js';

export interface TimedExchange {
  status: number;
  /** Milliseconds from sending to the response head. */
  headMs: number;
  /** Milliseconds from sending to the end of the first SSE event (`\n\n`), or null when none came. */
  firstEventMs: number | null;
  totalMs: number;
  bytes: number;
}

export interface ExchangeOptions {
  method?: string;
  body?: Buffer;
  timeoutMs: number;
  /** Watch the body for the first `\n\n` (server-sent events). */
  sse?: boolean;
}

export class BenchHttp {
  readonly #http = new HttpAgent({ keepAlive: true, maxSockets: 4 });
  readonly #https = new HttpsAgent({ keepAlive: true, maxSockets: 4, ca: readFileSync(CA_FILE) });

  async exchange(url: string, options: ExchangeOptions): Promise<TimedExchange> {
    try {
      return await this.#once(url, options);
    } catch (err) {
      if (!(err instanceof StaleSocketError)) throw err;
      return this.#once(url, options);
    }
  }

  #once(url: string, options: ExchangeOptions): Promise<TimedExchange> {
    const u = new URL(url);
    if (u.hostname !== '127.0.0.1') throw new Error(`bench: refusing a request to ${u.hostname} (loopback only)`);
    const secure = u.protocol === 'https:';
    const send = secure ? httpsRequest : httpRequest;
    const started = performance.now();
    let answered = false;
    return new Promise((resolve, reject) => {
      const req = send(u, {
        method: options.method ?? 'GET',
        agent: secure ? this.#https : this.#http,
        headers: options.body !== undefined ? { 'content-type': 'application/octet-stream', 'content-length': String(options.body.length) } : {},
        timeout: options.timeoutMs,
      }, (res: IncomingMessage) => {
        answered = true;
        const headMs = performance.now() - started;
        let bytes = 0;
        let firstEventMs: number | null = null;
        let tail = '';
        res.on('data', (chunk: Buffer) => {
          bytes += chunk.length;
          if (options.sse === true && firstEventMs === null) {
            tail = (tail + chunk.toString('latin1')).slice(-4096);
            if (tail.includes('\n\n')) firstEventMs = performance.now() - started;
          }
        });
        res.once('end', () => resolve({ status: res.statusCode ?? 0, headMs, firstEventMs, totalMs: performance.now() - started, bytes }));
        res.once('error', reject);
      });
      req.once('timeout', () => req.destroy(new Error(`${url}: no answer within ${options.timeoutMs} ms`)));
      req.once('error', (err: NodeJS.ErrnoException) => {
        const stale = req.reusedSocket && !answered && (err.code === 'ECONNRESET' || err.code === 'EPIPE');
        reject(stale ? new StaleSocketError(err) : err);
      });
      req.end(options.body);
    });
  }

  close(): void {
    this.#http.destroy();
    this.#https.destroy();
  }
}

/** A request on a kept-alive socket that the server had closed; nothing was answered. */
class StaleSocketError extends Error {
  constructor(cause: Error) {
    super(cause.message, { cause });
  }
}
