// The test HTTPS upstream (same certificate and routes as upstream.ts), listening
// on one port at several loopback addresses at once, each listener recording what
// reached it. The SSRF tests use it to prove which address the proxy connected
// to: a request the guard refused must appear on no listener, and an allowed one
// on exactly the listener of the address that was checked.
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { TLS_DIR } from './service.js';
import { DEFAULT_ROUTES, type Route } from './upstream.js';

export interface ListenerHit {
  method: string;
  url: string;
  host: string | undefined;
  /** The address the connection arrived on (the listener's own). */
  localAddress: string;
}

export interface MultiAddressUpstream {
  port: number;
  /** Requests per listener address (as given to startMultiAddressUpstream). */
  hits: Map<string, ListenerHit[]>;
  /** Connections accepted per listener address, whether or not a request followed. */
  connections: Map<string, number>;
  total(): number;
  close(): Promise<void>;
}

function serve(address: string, port: number, routes: Record<string, Route>, hits: ListenerHit[], onConnection: () => void): Promise<Server> {
  const server = createServer({ cert: readFileSync(`${TLS_DIR}server.crt`), key: readFileSync(`${TLS_DIR}server.key`) }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      hits.push({ method: req.method!, url: req.url!, host: req.headers.host, localAddress: req.socket.localAddress ?? '' });
      // Not new URL(): a target such as `//x/y` is a valid origin-form path but parses as an authority.
      const path = req.url!.split('?')[0]!;
      (routes[path] ?? routes['/echo']!)(req, res, Buffer.concat(chunks));
    });
  });
  server.on('connection', onConnection);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, address, () => resolve(server));
  });
}

/**
 * Listens on every address at one port (the first address picks a free port; the
 * others bind the same one, retried on a fresh port when one is taken).
 */
export async function startMultiAddressUpstream(addresses: readonly string[], routes: Record<string, Route> = {}): Promise<MultiAddressUpstream> {
  const all = { ...DEFAULT_ROUTES, ...routes };
  for (let attempt = 0; attempt < 20; attempt++) {
    const hits = new Map<string, ListenerHit[]>(addresses.map((a) => [a, []]));
    const connections = new Map<string, number>(addresses.map((a) => [a, 0]));
    const servers: Server[] = [];
    const count = (a: string) => () => connections.set(a, connections.get(a)! + 1);
    try {
      const first = await serve(addresses[0]!, 0, all, hits.get(addresses[0]!)!, count(addresses[0]!));
      servers.push(first);
      const port = (first.address() as AddressInfo).port;
      for (const address of addresses.slice(1)) servers.push(await serve(address, port, all, hits.get(address)!, count(address)));
      return {
        port,
        hits,
        connections,
        total: () => [...hits.values()].reduce((n, list) => n + list.length, 0),
        close: async () => {
          await Promise.all(servers.map((s) => new Promise<void>((r) => {
            s.closeAllConnections();
            s.close(() => r());
          })));
        },
      };
    } catch {
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
    }
  }
  throw new Error(`could not bind one port on ${addresses.join(', ')}`);
}
