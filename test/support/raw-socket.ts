// Raw bytes over a net socket, waiting for the server to close (not just to go
// quiet, as raw-http.ts does): the smuggling and slow-client tests need to know
// whether, when and after which answers the server ended the connection.
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface RawExchange {
  /** Everything the server sent (latin1). */
  text: string;
  /** The status of every response in `text`, in order. */
  statuses: number[];
  /** The server closed (or reset) the connection before `maxMs`. */
  closed: boolean;
  /** Milliseconds from the first byte written to the close (or to `maxMs`). */
  elapsedMs: number;
}

export function statusesOf(text: string): number[] {
  return [...text.matchAll(/HTTP\/1\.[01] (\d{3})/g)].map((m) => Number(m[1]));
}

/** Writes `bytes` (each part of an array after `gapMs`), then waits until the server closes or `maxMs` passes. */
export function rawExchange(port: number, bytes: string | Buffer | Array<string | Buffer>, options: { maxMs?: number; gapMs?: number; localAddress?: string } = {}): Promise<RawExchange> {
  const { maxMs = 3000, gapMs = 0, localAddress } = options;
  return new Promise((resolve) => {
    const socket: Socket = connect({ port, host: '127.0.0.1', ...(localAddress !== undefined ? { localAddress } : {}) });
    const chunks: Buffer[] = [];
    const started = performance.now();
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      const text = Buffer.concat(chunks).toString('latin1');
      resolve({ text, statuses: statusesOf(text), closed, elapsedMs: performance.now() - started });
    };
    const timer = setTimeout(() => finish(false), maxMs);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('close', () => finish(true));
    socket.on('error', () => undefined);
    const parts = Array.isArray(bytes) ? bytes : [bytes];
    socket.once('connect', async () => {
      for (let i = 0; i < parts.length && !done; i++) {
        if (i > 0 && gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
        if (!socket.destroyed) socket.write(parts[i]!);
      }
    });
  });
}

/**
 * HEAD `path`, then on the same connection, `gapMs` later (after the HEAD's
 * answer), `GET /health`: the HEAD's head (up to its blank line) and what
 * followed it, which is the next answer when the HEAD's carried no body.
 * `headers`: more header lines for the HEAD, each ending in CRLF.
 */
export async function headThenNext(port: number, path: string, gapMs = 300, headers = ''): Promise<{ statuses: number[]; head: string; after: string }> {
  const { text, statuses } = await rawExchange(port, [`HEAD ${path} HTTP/1.1\r\nHost: x\r\n${headers}\r\n`, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'], { gapMs, maxMs: gapMs + 3000 });
  const headEnd = text.indexOf('\r\n\r\n') + 4;
  return { statuses, head: text.slice(0, headEnd), after: text.slice(headEnd) };
}

/**
 * A server on 127.0.0.1 that takes every connection and never answers (a tool
 * stuck before TLS, a hung ClickHouse): `held` are its connections; closed, and
 * they destroyed, at the test's teardown.
 */
export async function startSilentServer(t: { teardown: (fn: () => void) => void }): Promise<{ port: number; held: Socket[] }> {
  const held: Socket[] = [];
  const server = createServer((socket) => {
    held.push(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const socket of held) socket.destroy();
    server.close();
  });
  return { port: (server.address() as AddressInfo).port, held };
}
